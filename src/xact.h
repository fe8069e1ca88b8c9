/*-------------------------------------------------------------------------
 *
 * xact.h
 *		The worker's session and its transactions (xact.c), whoever runs
 *		them: the batch (apply.c), the memory path's flush
 *		(memory/flush.c) and the purge (purge.c); and the lock waits and
 *		retries that govern them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_XACT_H
#define PKLIMIT_XACT_H

#include "request.h"

/*
 * The worker's tunables.  A batch waits PKLIMIT_BATCH_LOCK_MS for a row
 * lock before setting the requests on that key aside; set-aside requests
 * are tried again every PKLIMIT_RETRY_MS, in a transaction that waits only
 * PKLIMIT_RETRY_LOCK_MS for the lock, so a row that stays locked costs the
 * other keys little.
 */
#define PKLIMIT_BATCH_LOCK_MS 20
#define PKLIMIT_RETRY_MS 20
#define PKLIMIT_RETRY_LOCK_MS 2

/*
 * The worker's session, as its transactions need it: set up by worker.c,
 * passed to apply.c, the flush and purge.c, used here.
 */
typedef struct PklimitSession
{
	int			lock_wait_ms;	/* lock_timeout in force; -1: not set yet */
	bool		on_citus;		/* Citus is loaded: its tables' rows live on
								 * other nodes */
} PklimitSession;

/* The role the worker runs as, to come back to from the table's owner. */
typedef struct PklimitUser
{
	Oid			userid;
	int			sec_context;
} PklimitUser;

extern void pklimit_timer_reset(void);
extern void pklimit_timer_start(int ms);
extern void pklimit_timer_stop(void);
extern bool pklimit_timer_ran_out(void);
extern void pklimit_set_lock_wait(PklimitSession *session, int ms);
extern void pklimit_set_node_settings(const PklimitSession *session);
extern void pklimit_begin_transaction(const char *activity);
extern bool pklimit_commit_transaction(void);
extern void pklimit_rollback_transaction(void);
extern ErrorData *pklimit_abort_transaction(MemoryContext memory_context);
extern void pklimit_report_idle(void);
extern void pklimit_remember_user(PklimitUser *user);
extern void pklimit_become_owner(const PklimitUser *user, Oid owner);
extern void pklimit_restore_user(const PklimitUser *user);
extern void pklimit_answer_error(PklimitAnswer *answer, const ErrorData *edata);

#endif							/* PKLIMIT_XACT_H */
