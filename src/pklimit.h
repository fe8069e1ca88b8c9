/*-------------------------------------------------------------------------
 *
 * pklimit.h
 *		The interfaces between pklimit's source files, and the shared state
 *		they exchange.
 *
 * A call travels caller -> queue -> worker -> store -> answer:
 *
 *	api.c		the SQL-callable functions: check the arguments, build the
 *				stored key (key.c), hand one request to the queue and turn the
 *				answer, or the store's unavailability, into a result
 *	queue.c		the request slots in shared memory: a caller queues its
 *				request and waits; the worker takes requests and answers them
 *	registry.c	which worker serves which database: start on demand, attach,
 *				back-off after failures, retire when idle, leave on exit
 *	worker.c	the worker process and its loop over batches
 *	apply.c		applying a batch's requests in the worker's own transactions
 *	store.c		the statements on platformkit_limits
 *	purge.c		the purge, from the SQL call to the worker's steps and status
 *	hooks.c		the ProcessUtility guards
 *	pklimit.c	module load: settings, hooks, shared memory, wait events
 *
 * Locking: every piece of pklimit's shared memory (queue slots, worker
 * registry and back-offs, purge status) is protected by the one LWLock
 * pklimit_lock, taken exclusively by whoever changes any of it and shared
 * by whoever only reads.  It is held for short scans only, never across a
 * latch wait, I/O or a transaction, and nothing that can raise an error runs
 * while it is held, so no error path needs to release it.  Functions that
 * expect it held say "Lock held"; each file says which fields it owns.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_H
#define PKLIMIT_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "storage/lwlock.h"

/* Longest stored key kept readable; longer ones are stored as a digest. */
#define PKLIMIT_MAX_READABLE_KEY 256

/* Most requests a worker applies in one transaction. */
#define PKLIMIT_BATCH_MAX 256

/* What one request asks of the table. */
typedef enum PklimitOpKind
{
	PKLIMIT_OP_HIT,				/* record events, return the new count */
	PKLIMIT_OP_COUNT,			/* read the count of the open window */
	PKLIMIT_OP_FORGET,			/* delete the key's row */
	PKLIMIT_OP_PURGE			/* delete rows whose window ended before
								 * cutoff */
} PklimitOpKind;

/* The rules of each kind, kept here and nowhere else. */
typedef struct PklimitOpRules
{
	bool		writes;			/* changes the row: can meet a row lock, and
								 * waits behind writes set aside on its key */
	bool		folds;			/* consecutive ones on a key: one statement,
								 * each answered its serial count */
	bool		in_batch;		/* applied in the worker's batches; false:
								 * runs in steps between them, and its caller
								 * waits for the end once a worker has taken
								 * it */
} PklimitOpRules;

static inline PklimitOpRules
pklimit_op_rules(PklimitOpKind kind)
{
	static const PklimitOpRules rules[] = {
		/* writes, folds, in_batch */
		[PKLIMIT_OP_HIT] = {true, true, true},
		[PKLIMIT_OP_COUNT] = {false, false, true},
		[PKLIMIT_OP_FORGET] = {true, false, true},
		[PKLIMIT_OP_PURGE] = {true, false, false},
	};

	return rules[kind];
}

/* The answer to one operation. */
typedef struct PklimitResult
{
	bool		found;			/* a row existed (count, forget); purge ran */
	int64		count;			/* count after the operation; rows purged */
	TimestampTz window_end;		/* end of the window the count belongs to */
	TimestampTz event_at;		/* server clock when the event was recorded */
} PklimitResult;

/* Why an operation was not applied; PKLIMIT_OK when it was. */
typedef enum PklimitStatus
{
	PKLIMIT_OK = 0,
	PKLIMIT_TIMEOUT,			/* no answer within pklimit.timeout */
	PKLIMIT_QUEUE_FULL,			/* every queue slot in use */
	PKLIMIT_NO_WORKER,			/* no worker could be started */
	PKLIMIT_READ_ONLY,			/* hot standby: writes go to the primary */
	PKLIMIT_LOCK_TIMEOUT,		/* the budget ran out waiting for a row lock */
	PKLIMIT_NO_TABLE,			/* platformkit_limits is missing */
	PKLIMIT_STORE_ERROR			/* any other error while applying */
} PklimitStatus;

/* One request as the caller hands it to a worker. */
typedef struct PklimitRequest
{
	PklimitOpKind kind;
	Oid			dboid;			/* database the caller is connected to */
	Oid			nspid;			/* schema of the extension's table */
	int64		window_usec;	/* window length, for a hit */
	TimestampTz deadline;		/* the caller stops waiting at this moment */
	TimestampTz cutoff;			/* for a purge */
	char		key[PKLIMIT_MAX_READABLE_KEY + 1];	/* stored key */
} PklimitRequest;

/* The worker's answer to one request. */
typedef struct PklimitAnswer
{
	PklimitStatus status;
	bool		unreplicated;	/* committed locally, not confirmed by the
								 * synchronous standbys */
	int			sqlstate;		/* for a store error */
	char		message[128];	/* for a store error */
	PklimitResult result;
} PklimitAnswer;

/* What a pklimit process waits for (pg_stat_activity.wait_event). */
typedef enum PklimitWait
{
	PKLIMIT_WAIT_ANSWER,		/* a caller waits for its answer */
	PKLIMIT_WAIT_IDLE,			/* a worker waits for requests */
	PKLIMIT_WAIT_RETRY			/* a worker waits to try a locked row again */
} PklimitWait;

/*
 * One request of the batch a worker works on (worker.c), with its slot in
 * the queue, its answer and its state.
 */
typedef enum PklimitEntryState
{
	ENTRY_NEW,					/* taken from the queue this round: to try */
	ENTRY_RETRY,				/* set aside before: tried again this round */
	ENTRY_SET_ASIDE,			/* waits for a locked row: a later round */
	ENTRY_ANSWERED				/* has its answer, for its caller */
} PklimitEntryState;

typedef struct PklimitEntry
{
	PklimitRequest request;
	int			slot;			/* its queue slot */
	PklimitEntryState state;
	PklimitAnswer answer;
	/* apply.c's, within one list of entries */
	int			unit;			/* the statement that applies it */
	bool		unfold;			/* apply one statement per event */
	bool		locked;			/* met a row locked by another transaction */
} PklimitEntry;

/* Which call found the store unavailable, for pklimit_unavailable(). */
typedef enum PklimitCall
{
	PKLIMIT_CALL_DECIDES,		/* allow, check: as on_unavailable says */
	PKLIMIT_CALL_READS,			/* count, forget: return NULL */
	PKLIMIT_CALL_PURGES			/* purge: always an error */
} PklimitCall;

/* pklimit.on_unavailable */
typedef enum PklimitOnUnavailable
{
	PKLIMIT_ON_UNAVAILABLE_ALLOW,
	PKLIMIT_ON_UNAVAILABLE_DENY,
	PKLIMIT_ON_UNAVAILABLE_ERROR
} PklimitOnUnavailable;

/*
 * The worker's tunables.  A batch waits PKLIMIT_BATCH_LOCK_MS for a row
 * lock before setting the requests on that key aside; set-aside requests
 * are tried again every PKLIMIT_RETRY_MS, in a transaction that waits only
 * PKLIMIT_RETRY_LOCK_MS for the lock, so a row that stays locked costs the
 * other keys little.  A purge held up by locked rows for
 * PKLIMIT_PURGE_LOCK_SECONDS fails.
 */
#define PKLIMIT_BATCH_LOCK_MS 20
#define PKLIMIT_RETRY_MS 20
#define PKLIMIT_RETRY_LOCK_MS 2
#define PKLIMIT_PURGE_LOCK_SECONDS 5

/* What is wrong with a window (api.c checks it). */
typedef enum PklimitWindowCheck
{
	PKLIMIT_WINDOW_OK,
	PKLIMIT_WINDOW_INFINITE,
	PKLIMIT_WINDOW_MONTHS,
	PKLIMIT_WINDOW_TOO_LONG,
	PKLIMIT_WINDOW_NOT_POSITIVE
} PklimitWindowCheck;

/* pklimit.c: settings, the shared lock, wait events */
extern int	pklimit_default_max;
extern int64 pklimit_default_window_usec;
extern int	pklimit_timeout;
extern int	pklimit_on_unavailable;
extern int	pklimit_queue_size;
extern int	pklimit_max_workers;
extern int	pklimit_worker_idle_timeout;
extern LWLock *pklimit_lock;
extern bool pklimit_preloaded(void);
extern uint32 pklimit_wait_event(PklimitWait wait);

/* api.c: the SQL functions' common steps */
extern void pklimit_check_preloaded(void);
extern void pklimit_run(FunctionCallInfo fcinfo, PklimitRequest *request,
						PklimitAnswer *answer);
extern bool pklimit_unavailable(const PklimitAnswer *answer, PklimitCall call);
extern const char *pklimit_status_name(PklimitStatus status);
extern PklimitWindowCheck pklimit_window_usec(const Interval *window,
											  int64 *usec);
extern void pklimit_window_guc_error(PklimitWindowCheck problem);

/* key.c */
extern char *pklimit_stored_key(text *key);

/* queue.c: the request slots */
extern Size pklimit_queue_shmem_size(void);
extern void pklimit_queue_shmem_init(void);
extern void pklimit_submit(const PklimitRequest *request, PklimitAnswer *answer);
extern int	pklimit_queue_take(Oid dboid, int worker, PklimitEntry *entries,
							   int max);
extern void pklimit_queue_answer(PklimitEntry *const *entries, int n);
extern void pklimit_queue_note_locked(PklimitEntry *const *entries, int n);
extern bool pklimit_queue_abandoned(int slot);
extern bool pklimit_queue_has_work(Oid dboid);
extern void pklimit_queue_release_worker(int worker);

/* registry.c: the workers, one per database */
extern Size pklimit_registry_shmem_size(void);
extern void pklimit_registry_shmem_init(void);
extern void pklimit_register_static_workers(const char *setting);
extern const char *pklimit_registry_static_database(int index);
extern int	pklimit_registry_static_index(void);
extern int	pklimit_registry_ensure(Oid dboid, int static_index,
									TimestampTz now, bool *start_failed);
extern void pklimit_registry_report_start_failure(void);
extern int	pklimit_registry_procno(int worker);
extern Oid	pklimit_registry_attach(int worker, Oid static_dboid);
extern void pklimit_registry_served(Oid dboid);
extern bool pklimit_registry_retire(void);
extern void pklimit_terminate_workers(Oid dboid);

/* worker.c */
extern PGDLLEXPORT void pklimit_worker_main(Datum main_arg);

/* apply.c: the worker's transactions */
extern void pklimit_apply(PklimitEntry **entries, int n, int lock_wait_ms,
						  MemoryContext memory_context);
extern void pklimit_entry_answer(PklimitEntry *entry, PklimitStatus status);
extern bool pklimit_same_key(const PklimitRequest *a, const PklimitRequest *b);
extern bool pklimit_worth_retrying(TimestampTz deadline);
extern void pklimit_set_lock_wait(int ms);
extern void pklimit_begin_transaction(const char *activity);
extern bool pklimit_commit_transaction(void);
extern ErrorData *pklimit_abort_transaction(MemoryContext memory_context);
extern void pklimit_report_idle(void);
extern void pklimit_answer_error(PklimitAnswer *answer, const ErrorData *edata);

/* store.c: the statements on platformkit_limits, in the current transaction */
extern void pklimit_store_apply(Oid nspid, PklimitOpKind kind,
								const char *stored_key, int64 window_usec,
								int64 events, PklimitResult *result);
extern int64 pklimit_store_purge(Oid nspid, TimestampTz cutoff, int64 limit,
								 TimestampTz *from);
extern Oid	pklimit_store_owner(Oid nspid);
extern bool pklimit_store_table_free(Oid nspid);
extern bool pklimit_in_system;

/* purge.c: the worker's side of the purge */
extern Size pklimit_purge_shmem_size(void);
extern void pklimit_purge_shmem_init(void);
extern void pklimit_purge_take(const PklimitEntry *entry);
extern bool pklimit_purge_due(void);
extern bool pklimit_purge_step(MemoryContext memory_context);
extern bool pklimit_purge_running(void);
extern void pklimit_purge_fail_running(void);

/* hooks.c */
extern void pklimit_install_hooks(void);

#endif							/* PKLIMIT_H */
