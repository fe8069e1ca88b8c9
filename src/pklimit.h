/*-------------------------------------------------------------------------
 *
 * pklimit.h
 *		The interfaces between pklimit's source files, and the shared state
 *		they exchange.
 *
 * A call travels caller -> queue -> worker -> store -> answer.  The map of
 * the source files is in CONTRIBUTING.md ("Code layout"); each file's
 * header says what it owns and what it must not do.
 *
 * Locking: every piece of pklimit's shared memory (queue slots, worker
 * registry and back-offs, purge status, the statistics' entries) but the
 * statistics' counters, which are atomics, and the memory path's table, is
 * protected by the one LWLock pklimit_lock, taken exclusively by whoever
 * changes any of it and shared by whoever only reads.  It is held for short
 * scans only, never across a latch wait, I/O or a transaction, and nothing
 * that can raise an error runs while it is held, so no error path needs to
 * release it.  Functions that expect it held say "Lock held"; each file says
 * which fields it owns.
 *
 * The memory path's table (src/memory/, docs/memory.md) has locks of its
 * own (memory/memory_private.h): one per partition of its keys (tranche
 * pklimit_memory) and a control lock (pklimit_memory_control).  Order:
 * pklimit_lock, then the control lock, then partition locks in ascending
 * order; none is held across I/O, a transaction or a wait.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_H
#define PKLIMIT_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "nodes/nodes.h"
#include "storage/lwlock.h"

/* Longest stored key kept readable; longer ones are stored as a digest. */
#define PKLIMIT_MAX_READABLE_KEY 256

/* Most requests a worker applies in one transaction. */
#define PKLIMIT_BATCH_MAX 256

/* Most keys one call on several limits (pklimit_check_all) can name. */
#define PKLIMIT_GROUP_MAX 16

/* What one request asks of the table. */
typedef enum PklimitOpKind
{
	PKLIMIT_OP_HIT,				/* record events (a cost, every attempt
								 * counts, no block): one upsert */
	PKLIMIT_OP_LIMIT,			/* record under any other rules, or as one key
								 * of several: the row is locked, the call
								 * decided (limit.c), the row written;
								 * consecutive ones on a key (not of a group)
								 * share the read and the write */
	PKLIMIT_OP_PEEK,			/* cost 0: decide without recording */
	PKLIMIT_OP_COUNT,			/* read the count of the open window */
	PKLIMIT_OP_FORGET,			/* delete the key's row */
	PKLIMIT_OP_DECREMENT,		/* take events back from the key's open state */
	PKLIMIT_OP_PURGE			/* delete rows whose window ended before
								 * cutoff */
} PklimitOpKind;

/* The rules of each kind, kept here and nowhere else. */
typedef struct PklimitOpRules
{
	bool		writes;			/* changes the row: can meet a row lock, and
								 * waits behind writes set aside on its key */
	bool		folds;			/* consecutive ones on a key (not of a group):
								 * applied together, each answered as if alone */
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
		[PKLIMIT_OP_LIMIT] = {true, true, true},
		[PKLIMIT_OP_PEEK] = {false, false, true},
		[PKLIMIT_OP_COUNT] = {false, false, true},
		[PKLIMIT_OP_FORGET] = {true, false, true},
		[PKLIMIT_OP_DECREMENT] = {true, false, true},
		[PKLIMIT_OP_PURGE] = {true, false, false},
	};

	return rules[kind];
}

/* How a limit counts a key's events (limit.c; docs/algorithms.md). */
typedef enum PklimitAlgorithm
{
	PKLIMIT_FIXED,				/* fixed windows aligned to the Unix epoch */
	PKLIMIT_GCRA,				/* the generic cell rate algorithm */
	PKLIMIT_SLIDING				/* the sliding window counter */
} PklimitAlgorithm;

/*
 * Where a fixed window starts (limit.c; docs/algorithms.md, "Anchors"): a
 * key's window is started by the event that finds none open, and lasts its
 * window from its start.
 */
typedef enum PklimitAnchor
{
	PKLIMIT_ANCHOR_EPOCH,		/* at a multiple of the window since the Unix
								 * epoch: the window that holds the event */
	PKLIMIT_ANCHOR_FIRST		/* at the event itself */
} PklimitAnchor;

/*
 * A key's row, as limit.c decides on it; what the columns hold for each
 * algorithm is in docs/algorithms.md ("The row").  0 stands for NULL.
 */
typedef struct PklimitRow
{
	bool		exists;
	int64		count;
	TimestampTz window_start;
	TimestampTz window_end;
	TimestampTz updated_at;
	TimestampTz blocked_until;	/* 0: no block */
	PklimitAlgorithm algorithm; /* the table of 0.3.0; before, fixed */
	int64		max_count;		/* the last call's */
	bool		no_max_count;	/* max_count is NULL (none recorded since
								 * 0.3.0): kept so when written back */
	int64		previous_count; /* sliding: the count of the window before */
	TimestampTz expires_at;		/* sliding: when its count stops weighing */
} PklimitRow;

/* One call on a limit: its arguments. */
typedef struct PklimitCall
{
	int64		max_count;
	int64		window_usec;
	int64		cost;			/* events; 0: a peek */
	bool		record_refused; /* a refused call records its events too */
	int64		block_usec;		/* a refusal blocks the key this long; 0: no */
	PklimitAlgorithm algorithm; /* of a state the call starts */
	PklimitAnchor anchor;		/* of a fixed window the call starts */
	bool		memory;			/* durable => false: the memory path
								 * (src/memory/, docs/memory.md) */
} PklimitCall;

/* The decision of one call (limit.c). */
typedef struct PklimitDecision
{
	bool		allowed;		/* by the key's own limit */
	bool		blocked;		/* the key is (now) blocked */
	int64		count;			/* the key's count after the call */
	TimestampTz reset_at;		/* when the key is back to zero */
	TimestampTz retry_at;		/* refused: when a call like it would next be
								 * allowed */
} PklimitDecision;

/* The answer to one operation. */
typedef struct PklimitResult
{
	bool		found;			/* a row existed (count, forget); purge ran */
	bool		allowed;		/* a recording call: the key's limit allows */
	int64		count;			/* count after the operation; rows purged */
	TimestampTz event_at;		/* server clock when the event was recorded */
	TimestampTz reset_at;		/* a recording call: the key back to zero */
	TimestampTz retry_at;		/* a refused call: when to try again */
	int64		recorded;		/* events it added to the count */
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
	PKLIMIT_APPLY_ERROR			/* any other error while applying */
} PklimitStatus;

/*
 * One request as the caller hands it to a worker.  A call on several keys
 * makes one request per key, queued together and applied together: the
 * requests of one group.
 */
typedef struct PklimitRequest
{
	PklimitOpKind kind;
	Oid			dboid;			/* database the caller is connected to */
	Oid			nspid;			/* schema of the extension's table */
	PklimitCall call;			/* for a hit, a limit, a peek; a decrement's
								 * cost */
	uint64		group;			/* 0, or the group of requests it is one of */
	int			group_size;		/* requests in its group (1 if none) */
	bool		track_stats;	/* its events count in pklimit_stats */
	TimestampTz deadline;		/* the caller stops waiting at this moment */
	TimestampTz cutoff;			/* for a purge */
	char		key[PKLIMIT_MAX_READABLE_KEY + 1];	/* stored key */
} PklimitRequest;

/*
 * The requests of a group are queued, taken, applied and kept next to each
 * other, in arrival order.  Walks int i over the run of one group's
 * requests that starts at index first, of n; group_of(i) is the group of
 * request i (0: in none, a run of one).
 */
#define pklimit_foreach_in_group(i, first, n, group_of) \
	for (int i = (first); \
		 i < (n) && (i == (first) || \
					 (group_of(first) != 0 && group_of(i) == group_of(first))); \
		 i++)

/*
 * The longest message of a worker's error that reaches its caller, in bytes
 * of the database encoding; a longer one is cut at a character boundary and
 * ends in PKLIMIT_MESSAGE_CUT.  The worker logs it whole.
 */
#define PKLIMIT_MESSAGE_MAX 512
#define PKLIMIT_MESSAGE_CUT " [...]"

/* The worker's answer to one request. */
typedef struct PklimitAnswer
{
	PklimitStatus status;
	bool		unreplicated;	/* committed locally, not confirmed by the
								 * synchronous standbys */
	int			sqlstate;		/* for an error while applying */
	char		message[PKLIMIT_MESSAGE_MAX + 1];	/* for the same error */
	PklimitResult result;
} PklimitAnswer;

/* What a pklimit process waits for (pg_stat_activity.wait_event). */
typedef enum PklimitWait
{
	PKLIMIT_WAIT_ANSWER,		/* a caller waits for its answer */
	PKLIMIT_WAIT_IDLE,			/* a worker waits for requests */
	PKLIMIT_WAIT_RETRY,			/* a worker waits to try a locked row again */
	PKLIMIT_WAIT_CRON_CONNECT	/* a backend connects as pg_cron would */
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
	bool		met_lock;		/* met a row locked by another transaction */
	/* the memory path's (memory/batch.c) */
	bool		memory_read;	/* memory_row holds its key's row as the
								 * transaction that applied it left it, to
								 * read in after the commit */
	bool		memory_fell_back;	/* counted as a fallback already */
	PklimitRow	memory_row;
} PklimitEntry;

/* Which caller found the store unavailable, for pklimit_unavailable(). */
typedef enum PklimitCaller
{
	PKLIMIT_CALL_DECIDES,		/* allow, check: as on_unavailable says */
	PKLIMIT_CALL_READS,			/* count, forget, decrement: return NULL */
	PKLIMIT_CALL_PURGES			/* purge: always an error */
} PklimitCaller;

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

/*
 * A transaction that another writer came between (apply.c) is tried again
 * at once, this many times.
 */
#define PKLIMIT_CONFLICT_TRIES 3

/*
 * On Citus, how long a unit's statements wait for another node's answer
 * before its entries are set aside as for a locked row (apply.c).
 */
#define PKLIMIT_NODE_WAIT_MS 50
#define PKLIMIT_PURGE_LOCK_SECONDS 5

/* What is wrong with a window (limit.c checks it). */
typedef enum PklimitWindowCheck
{
	PKLIMIT_WINDOW_OK,
	PKLIMIT_WINDOW_INFINITE,
	PKLIMIT_WINDOW_MONTHS,
	PKLIMIT_WINDOW_TOO_LONG,
	PKLIMIT_WINDOW_NOT_POSITIVE
} PklimitWindowCheck;

/* stats.c: the counters of pklimit_stats, per database */
/*
 * Databases with counters of their own; the databases beyond share one set
 * more, shown with dbid 0.
 */
#define PKLIMIT_STATS_DATABASES 63

/*
 * The counters: each call adds to exactly one of the first ten, whose sums
 * are calls and unavailable.  Who counts what is said at each counter; the
 * memory path's counters are each added in one place.
 */
typedef enum PklimitStat
{
	PKLIMIT_STAT_ALLOWED,		/* allowed by the store (check.c) */
	PKLIMIT_STAT_SHADOW_REFUSED,	/* refused by it, allowed by shadow mode */
	PKLIMIT_STAT_REFUSED,		/* refused by the store */
	PKLIMIT_STAT_TIMEOUTS,		/* the store was not reached, because: */
	PKLIMIT_STAT_QUEUE_FULL,
	PKLIMIT_STAT_NO_WORKER,
	PKLIMIT_STAT_LOCK_TIMEOUTS,
	PKLIMIT_STAT_READ_ONLY,
	PKLIMIT_STAT_NO_TABLE,
	PKLIMIT_STAT_ERRORS,
	PKLIMIT_STAT_FAILED_OPEN,	/* of the unavailable, those answered allowed */
	PKLIMIT_STAT_EVENTS,		/* events recorded: the costs added (apply.c;
								 * in memory, memory/keys.c) */
	PKLIMIT_STAT_BATCHES,		/* committed transactions that recorded
								 * (apply.c) */
	PKLIMIT_STAT_WORKER_STARTS, /* (worker.c) */
	PKLIMIT_STAT_WAIT_USEC,		/* callers' waits, summed (check.c) */
	PKLIMIT_STAT_MAX_WAIT_USEC, /* the longest wait */
	PKLIMIT_STAT_MEMORY_CALLS,	/* memory calls decided in memory
								 * (memory/keys.c) */
	PKLIMIT_STAT_MEMORY_READS,	/* keys read into memory (memory/batch.c) */
	PKLIMIT_STAT_MEMORY_FALLBACKS,	/* memory calls applied durably
									 * (memory/batch.c) */
	PKLIMIT_STAT_MEMORY_EVICTIONS,	/* keys given back (memory/databases.c) */
	PKLIMIT_STAT_FLUSHES,		/* flushes committed that wrote rows
								 * (memory/flush.c) */
	PKLIMIT_STAT_ROWS_FLUSHED,	/* rows they wrote */
	PKLIMIT_STAT_COUNT
} PklimitStat;

/* settings.c: settings, the shared lock, wait events */
extern int	pklimit_default_max;
extern int64 pklimit_default_window_usec;
extern int	pklimit_timeout;
extern int	pklimit_on_unavailable;
extern int	pklimit_queue_size;
extern int	pklimit_max_workers;
extern int	pklimit_worker_idle_timeout;
extern char *pklimit_databases;
extern bool pklimit_shadow_mode;
extern bool pklimit_asynchronous_commit;
extern bool pklimit_track_stats;
extern int	pklimit_memory_keys;
extern int	pklimit_flush_interval;
extern void pklimit_define_settings(bool preload);
extern LWLock *pklimit_lock;
extern bool pklimit_preloaded(void);
extern void pklimit_check_preloaded(void);
extern uint32 pklimit_wait_event(PklimitWait wait);

/* api.c: the SQL functions' common steps */
extern TimestampTz pklimit_run(FunctionCallInfo fcinfo,
							   PklimitRequest *requests,
							   PklimitAnswer *answers, int n);
extern void pklimit_arg_not_null(FunctionCallInfo fcinfo, int argno,
								 const char *what);
extern char *pklimit_key_value(text *key, const char *what);
extern int64 pklimit_max_count_value(int64 max_count, const char *what);
extern bool pklimit_unavailable(const PklimitAnswer *answer,
								PklimitCaller caller);
extern bool pklimit_unavailable_allows(void);
extern const char *pklimit_status_name(PklimitStatus status);

/* key.c: the stored key, and the order of keys */
extern char *pklimit_stored_key(text *key);
extern bool pklimit_same_key(const PklimitRequest *a, const PklimitRequest *b);
extern int	pklimit_key_order(const PklimitRequest *a, const PklimitRequest *b);

/* queue.c: the request slots */
extern Size pklimit_queue_shmem_size(void);
extern void pklimit_queue_shmem_init(void);
extern void pklimit_submit(const PklimitRequest *requests,
						   PklimitAnswer *answers, int n);
extern int	pklimit_queue_take(Oid dboid, int worker, PklimitEntry *entries,
							   int max);
extern void pklimit_queue_answer(PklimitEntry *const *entries, int n);
extern void pklimit_queue_note_set_aside(PklimitEntry *const *entries, int n);
extern bool pklimit_queue_abandoned(int slot);
extern bool pklimit_queue_has_work(Oid dboid);
extern void pklimit_queue_release_worker(int worker);
extern void pklimit_queue_depths(const Oid *dboids, int64 *depths, int n);
extern int	pklimit_queue_share(void);

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
extern void pklimit_registry_retire(void);
extern bool pklimit_registry_detach(bool failed);
extern void pklimit_terminate_workers(Oid dboid);
extern pid_t pklimit_registry_worker_pid(Oid dboid);
extern int	pklimit_registry_sharers(int *entries);

/*
 * The worker's session, as its transactions need it: set up by worker.c,
 * passed to apply.c and purge.c, used by xact.c.
 */
typedef struct PklimitSession
{
	int			lock_wait_ms;	/* lock_timeout in force; -1: not set yet */
	bool		on_citus;		/* Citus is loaded: its tables' rows live on
								 * other nodes */
} PklimitSession;

/* worker.c */
extern PGDLLEXPORT void pklimit_worker_main(Datum main_arg);

/* apply.c: a batch's entries in the worker's transactions */
extern void pklimit_apply(PklimitEntry **entries, int n, int lock_wait_ms,
						  PklimitSession *session,
						  MemoryContext memory_context);

/* entry.c: the rules of a batch entry's state */
extern void pklimit_answer_unapplied(PklimitEntry *entry, PklimitStatus status);
extern void pklimit_set_aside(PklimitEntry *entry, TimestampTz now);
extern bool pklimit_waits_with(const PklimitRequest *r,
							   const PklimitRequest *set_aside);
extern bool pklimit_worth_retrying(TimestampTz deadline, TimestampTz now);

/* xact.c: the worker's transactions */
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

/* table.c: pklimit's table, found and checked for one transaction */
typedef struct PklimitTable
{
	Oid			nspid;
	Oid			relid;
	Oid			owner;			/* pklimit's statements run as this role */
	int			version;		/* 1: the table of 0.1.0; 2: of 0.2.0; 3: of
								 * 0.3.0 */
	bool		citus;			/* distributed or replicated by Citus */
} PklimitTable;

extern void pklimit_table_open(Oid nspid, bool on_citus, PklimitTable *table);
extern bool pklimit_table_free(Oid nspid);
extern bool pklimit_table_oldest_end(Oid nspid, TimestampTz *oldest,
									 bool *found);

/* store.c: the statements on platformkit_limits, in the current transaction */
extern void pklimit_store_hit(const PklimitTable *table, const char *stored_key,
							  const PklimitCall *starts, int64 max_count,
							  int64 events, TimestampTz now, PklimitRow *row);
extern bool pklimit_store_read(const PklimitTable *table, const char *stored_key,
							   bool lock, PklimitRow *row);
extern void pklimit_store_write(const PklimitTable *table,
								const char *stored_key, const PklimitRow *row,
								bool existed);
extern bool pklimit_store_forget(const PklimitTable *table,
								 const char *stored_key);
extern void pklimit_store_flush(const PklimitTable *table,
								const char *const *keys,
								const PklimitRow *rows, int n);
extern int64 pklimit_store_purge(const PklimitTable *table, TimestampTz cutoff,
								 int64 limit, TimestampTz *from);
extern bool pklimit_in_system;

/* unit.c: one unit of the worker's transaction */
extern bool pklimit_apply_unit(PklimitEntry **entries, int n, int u,
							   const PklimitTable *table,
							   const PklimitRequest *volatile *running);

/* limit.c: the rules of a limit */
extern PklimitWindowCheck pklimit_window_usec(const Interval *window,
											  int64 *usec);
extern void pklimit_window_guc_error(PklimitWindowCheck problem);
extern int64 pklimit_window_value(const Interval *window, const char *what);
extern PklimitAlgorithm pklimit_algorithm_value(text *name, const char *what);
extern PklimitAnchor pklimit_anchor_value(text *name, PklimitAlgorithm algorithm);
extern const char *pklimit_algorithm_name(PklimitAlgorithm algorithm);
extern bool pklimit_algorithm_of_name(const char *name,
									  PklimitAlgorithm *algorithm);
extern void pklimit_new_window(TimestampTz now, const PklimitCall *call,
							   PklimitRow *row);
extern int64 pklimit_add_events(int64 count, int64 events);
extern void pklimit_decide(const PklimitRow *before, const PklimitCall *call,
						   TimestampTz now, PklimitDecision *decision);
extern bool pklimit_state_count(const PklimitRow *row, TimestampTz now,
								int64 *count);
extern bool pklimit_take_back(const PklimitRow *before, int64 cost,
							  TimestampTz now, PklimitRow *after,
							  int64 *count);
extern bool pklimit_records(const PklimitCall *call, bool allowed);
extern bool pklimit_rows_differ(const PklimitRow *a, const PklimitRow *b);
extern void pklimit_decide_call(PklimitRow *row, const PklimitCall *call,
								TimestampTz now, PklimitResult *result);
extern void pklimit_decide_peek(const PklimitRow *row, const PklimitCall *call,
								TimestampTz now, PklimitResult *result);
extern void pklimit_decide_group(PklimitRow *rows, const PklimitCall *calls,
								 int m, TimestampTz now,
								 PklimitResult *results);
extern void pklimit_decide_decrement(PklimitRow *row, int64 cost,
									 TimestampTz now, PklimitResult *result);
extern int64 pklimit_apply_decision(const PklimitRow *before,
									const PklimitCall *call, TimestampTz now,
									bool record, PklimitDecision *decision,
									PklimitRow *after);
extern bool pklimit_folds(const PklimitCall *call);
extern bool pklimit_fold_known(int64 count, int calls);
extern bool pklimit_fold_start(const PklimitRow *after, int64 events,
							   TimestampTz now, PklimitRow *before);
extern const char pklimit_hit_rules_sql[];
extern const char pklimit_hit_rules_no_block_sql[];
extern const char pklimit_hit_rules_fixed_sql[];

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

/* purge.c: the worker's side of the purge */
extern Size pklimit_purge_shmem_size(void);
extern void pklimit_purge_shmem_init(void);
extern void pklimit_purge_take(const PklimitEntry *entry);
extern bool pklimit_purge_due(void);
extern bool pklimit_purge_step(PklimitSession *session,
							   MemoryContext memory_context);
extern bool pklimit_purge_running(void);
extern void pklimit_purge_fail_running(void);

/* stats.c: counting */
extern Size pklimit_stats_shmem_size(void);
extern void pklimit_stats_shmem_init(void);
extern void pklimit_stats_claim(void);
extern void pklimit_stats_add(PklimitStat stat, uint64 n);
extern void pklimit_stats_call(PklimitStatus status, bool allowed, bool shadow,
							   TimestampTz started);
extern void pklimit_stats_forget_database(Oid dboid);

/* One database's counters as read at one moment (for statsfuncs.c). */
typedef struct PklimitCounts
{
	Oid			dboid;			/* InvalidOid: the shared counters */
	TimestampTz stats_reset;	/* when their counting started */
	uint64		counters[PKLIMIT_STAT_COUNT];
} PklimitCounts;

extern int	pklimit_stats_read(PklimitCounts *counts);

/* hooks.c */
extern void pklimit_install_hooks(void);

/* guards.c: the guards of pklimit's table and names, run by hooks.c */
extern bool pklimit_grants_on_tables(Node *parsetree);
extern void pklimit_guard_grant(void);
extern void pklimit_guard_table(Node *parsetree);
extern void pklimit_guard_name(Oid classId, Oid objectId);
extern Oid	pklimit_extension_namespace(void);

/* cron.c: what pklimit needs of pg_cron */
extern void pklimit_cron_unschedule(void);

#endif							/* PKLIMIT_H */
