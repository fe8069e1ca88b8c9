/*-------------------------------------------------------------------------
 *
 * registry.h
 *		Which worker serves which database (registry.c): a worker is known
 *		by its registry index, from 0 to pklimit.max_workers - 1, which its
 *		registration, its queue holding and its static database (if any)
 *		share.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_REGISTRY_H
#define PKLIMIT_REGISTRY_H

#include "datatype/timestamp.h"

extern Size pklimit_registry_shmem_size(void);
extern void pklimit_registry_shmem_init(void);
extern void pklimit_register_static_workers(const char *setting);
extern const char *pklimit_registry_static_database(int worker);
extern int	pklimit_registry_static_index(void);
extern int	pklimit_registry_ensure(Oid dboid, int static_index,
									TimestampTz now, bool *start_failed);
extern void pklimit_registry_report_start_failure(void);
extern int	pklimit_registry_procno(int worker);
extern Oid	pklimit_registry_attach(int worker, Oid static_dboid);
extern void pklimit_registry_served(Oid dboid);
extern void pklimit_registry_retire(void);
extern bool pklimit_registry_detach(bool failed);
extern void pklimit_terminate_workers(Oid dboid);
extern pid_t pklimit_registry_worker_pid(Oid dboid);
extern int	pklimit_registry_sharers(int *workers);

#endif							/* PKLIMIT_REGISTRY_H */
