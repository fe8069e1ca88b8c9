/*-------------------------------------------------------------------------
 *
 * queue.h
 *		The queue of requests in shared memory (queue.c): a caller's side,
 *		which queues its requests and waits for their answers, and a
 *		worker's, which takes them and answers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_QUEUE_H
#define PKLIMIT_QUEUE_H

#include "entry.h"

extern Size pklimit_queue_shmem_size(void);
extern void pklimit_queue_shmem_init(void);
extern int	pklimit_queue_share(void);

/* a caller's */
extern void pklimit_submit(const PklimitRequest *requests,
						   PklimitAnswer *answers, int n);

/* a worker's */
extern int	pklimit_queue_take(Oid dboid, int worker, PklimitEntry *entries,
							   int max);
extern void pklimit_queue_answer(PklimitEntry *const *entries, int n);
extern void pklimit_queue_note_set_aside(PklimitEntry *const *entries, int n);
extern bool pklimit_queue_abandoned(int slot);
extern bool pklimit_queue_has_work(Oid dboid);
extern void pklimit_queue_release_worker(int worker);

/* pklimit_stats's */
extern void pklimit_queue_depths(const Oid *dboids, int64 *depths, int n);

#endif							/* PKLIMIT_QUEUE_H */
