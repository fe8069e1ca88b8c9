/*-------------------------------------------------------------------------
 *
 * purge.h
 *		The worker's side of the purge (purge.c): a purge request taken
 *		from the queue runs in steps between the worker's batches.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_PURGE_H
#define PKLIMIT_PURGE_H

#include "entry.h"
#include "xact.h"

extern Size pklimit_purge_shmem_size(void);
extern void pklimit_purge_shmem_init(void);
extern void pklimit_purge_take(const PklimitEntry *entry);
extern bool pklimit_purge_due(void);
extern bool pklimit_purge_step(PklimitSession *session,
							   MemoryContext memory_context);
extern bool pklimit_purge_running(void);
extern void pklimit_purge_fail_running(void);

#endif							/* PKLIMIT_PURGE_H */
