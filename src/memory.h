/*-------------------------------------------------------------------------
 *
 * memory.h
 *		The memory path (src/memory/, docs/memory.md): keys' states in
 *		shared memory, decided on by calls with durable => false in the
 *		calling backend, and by the worker for the requests it finds there;
 *		written to the table by the worker's flush.  What the rest of
 *		pklimit calls: the caller's decision (api.c), the worker's lifecycle
 *		and flush (worker.c), the batch's one seam (apply.c), what the hooks
 *		drop (hooks.c) and what pklimit_memory_stats shows (statsfuncs.c).
 *		The wing's own types and locks are in memory/memory_private.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_MEMORY_H
#define PKLIMIT_MEMORY_H

#include "entry.h"
#include "store.h"
#include "xact.h"

/* memory/keys.c: the table in shared memory, and a caller's decision */
extern Size pklimit_memory_shmem_size(void);
extern void pklimit_memory_shmem_request(void);
extern void pklimit_memory_shmem_init(void);
extern bool pklimit_memory_decide(const PklimitRequest *requests,
								  PklimitAnswer *answers, int n);

/* memory/databases.c: a database's keys, from its worker's start to a drop */
extern void pklimit_memory_attach(void);
extern void pklimit_memory_close(void);
extern void pklimit_memory_detach(void);
extern void pklimit_memory_drop_extension(void);
extern void pklimit_memory_forget_database(Oid dboid);
extern void pklimit_memory_database_stats(Oid dboid, int64 *held,
										  double *lag_ms);

/* memory/inout.c: the keys a take-out left on their way out, at exit */
extern void pklimit_memory_stay_all(void);

/* memory/flush.c: the flush, every pklimit.flush_interval and at exit */
extern int	pklimit_flush(PklimitSession *session, MemoryContext memory_context);
extern bool pklimit_flush_due(void);
extern long pklimit_flush_wait_ms(void);

/*
 * memory/batch.c: the one seam between a worker's batch and the memory path.
 * apply.c passes each list of entries it applies through the memory path at
 * three points: before the list is applied (keys in memory: calls decided
 * there, or their keys taken out first), inside the one transaction that
 * applied it (the memory calls' rows as it leaves them) and after its
 * commit (those rows read into memory).  What the steps hand each other is
 * in the pass, not in statics.
 */
typedef struct PklimitMemoryPass
{
	PklimitSession *session;	/* the worker's, for the take-out's
								 * transactions */
	MemoryContext context;		/* the batch's, where errors are kept */
	Oid			relid;			/* the table the rows were read from */
	uint32		generation;		/* of this database's keys when read */
} PklimitMemoryPass;

extern void pklimit_memory_pass_begin(PklimitMemoryPass *pass,
									  PklimitSession *session,
									  MemoryContext memory_context);
extern int	pklimit_memory_pass_take(PklimitMemoryPass *pass,
									 PklimitEntry **entries, int n);
extern void pklimit_memory_pass_read_rows(PklimitMemoryPass *pass,
										  PklimitEntry **entries, int n,
										  const PklimitTable *table);
extern void pklimit_memory_pass_read_in(PklimitMemoryPass *pass,
										PklimitEntry **entries, int n);

#endif							/* PKLIMIT_MEMORY_H */
