/*-------------------------------------------------------------------------
 *
 * worker.h
 *		The worker (worker.c) and the batch algorithm it runs: a list of
 *		entries applied in its transactions (apply.c), unit by unit
 *		(unit.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_WORKER_H
#define PKLIMIT_WORKER_H

#include "fmgr.h"

#include "entry.h"
#include "store.h"
#include "xact.h"

/* worker.c */
extern PGDLLEXPORT void pklimit_worker_main(Datum main_arg);

/* apply.c */
extern void pklimit_apply(PklimitEntry **entries, int n, int lock_wait_ms,
						  PklimitSession *session,
						  MemoryContext memory_context);

/* unit.c */
extern bool pklimit_apply_unit(PklimitEntry **entries, int n, int u,
							   const PklimitTable *table,
							   const PklimitRequest *volatile *running);

#endif							/* PKLIMIT_WORKER_H */
