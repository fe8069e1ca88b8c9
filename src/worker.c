/*-------------------------------------------------------------------------
 *
 * worker.c
 *		pklimit's background worker: one per database, started on demand by
 *		the first call that needs it, gone after pklimit.worker_idle_timeout
 *		without work.  It applies queued requests in its own transactions, so
 *		an event is committed whatever becomes of the caller's transaction,
 *		and answers each caller after the commit.
 *
 * Every request queued when the worker is free goes into one transaction
 * (one commit flush for the lot), applied in arrival order, so each caller
 * gets exactly the answer serial execution would give.  The hits on one key
 * fold into one row update; every statement touches one key, so the table
 * stays distributable by key.  The worker starts a batch at once, without
 * waiting for more requests: those arriving during its commit flush make up
 * the next batch, which measured faster than any pause (bench/RESULTS.md).
 *
 * A row lock is waited for only BATCH_LOCK_MS (lock_timeout): the requests
 * on that key are set aside, and the rest of the batch commits without them.
 * Set-aside requests are tried again every RETRY_MS, in a transaction that
 * waits only RETRY_LOCK_MS, while their callers' budget lasts, and new
 * requests on their key join them untried, so a row locked by anyone, even
 * by a waiting caller's own open transaction, holds up neither the worker
 * nor other keys.  A table locked as a whole sets aside a batch's writes.
 * After any other failure each request is tried in a transaction of its
 * own, so one bad request cannot spoil its neighbours' answers.
 *
 * A purge deletes in batches of PKLIMIT_PURGE_BATCH rows, each committed on
 * its own, and the worker serves queued requests between two batches, so a
 * million expired rows neither hold locks for long nor stall the callers.
 * A batch that meets a locked row is tried again on a later round; the
 * purge fails only if that goes on for PURGE_LOCK_USEC.  A purge requested
 * while one runs returns at once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "pklimit.h"

/* Longest a batch waits for a row lock before setting its key aside. */
#define BATCH_LOCK_MS 20

/*
 * Requests set aside by a locked row are tried again every RETRY_MS, in a
 * transaction of their own that waits only RETRY_LOCK_MS for the lock, so a
 * row that stays locked costs the other keys little.
 */
#define RETRY_MS 20
#define RETRY_LOCK_MS 2

/* Time kept in hand for an answer to reach a caller before its deadline. */
#define ANSWER_MS 5

/* Longest a purge keeps meeting a locked row before it fails. */
#define PURGE_LOCK_USEC (5 * USECS_PER_SEC)

static MemoryContext batch_context;

/* The purge in progress, if purge_slot >= 0. */
static int	purge_slot = -1;
static PklimitRequest purge_request;
static int64 purge_deleted;
static TimestampTz purge_from;	/* the next batch starts at this window end */
static TimestampTz purge_blocked_since;	/* 0, or when a locked row stopped it */
static TimestampTz purge_last_try;

/* Start one of the worker's transactions, with SPI and a snapshot. */
static void
begin_transaction(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, activity);
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

static void
commit_transaction(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * In PG_CATCH: keep the error, in the batch's memory, and roll back.  The
 * abort also restores the user id, SPI and the snapshot stack.
 */
static ErrorData *
abort_transaction(void)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(batch_context);
	edata = CopyErrorData();
	FlushErrorState();
	AbortCurrentTransaction();
	return edata;
}

/* The caller's view of a failed transaction, from the error's SQLSTATE. */
static void
answer_error(PklimitAnswer *answer, ErrorData *edata)
{
	memset(answer, 0, sizeof(*answer));
	switch (edata->sqlerrcode)
	{
		case ERRCODE_LOCK_NOT_AVAILABLE:
			answer->status = PKLIMIT_LOCK_TIMEOUT;
			break;
		case ERRCODE_UNDEFINED_TABLE:
			answer->status = PKLIMIT_NO_TABLE;
			break;
		case ERRCODE_READ_ONLY_SQL_TRANSACTION:
			answer->status = PKLIMIT_READ_ONLY;
			break;
		default:
			answer->status = PKLIMIT_STORE_ERROR;
			break;
	}
	answer->sqlstate = edata->sqlerrcode;
	strlcpy(answer->message, edata->message ? edata->message : "",
			sizeof(answer->message));
}

static bool
same_key(const PklimitRequest *a, const PklimitRequest *b)
{
	return a->nspid == b->nspid && strcmp(a->key, b->key) == 0;
}

/*
 * Group the requests listed in which[] into units applied by one statement
 * each: consecutive hits on one key with one window fold into one row
 * update, as long as no count or forget of that key comes between them and
 * neither is marked in unfold[] (indexed like requests[]).  unit_of[j] is
 * the unit of which[j]; returns the number of units, which keep the order
 * of their first request.
 */
static int
fold(const PklimitRequest *requests, const int *which, int n,
	 const bool *unfold, int *unit_of, int *unit_head, int *unit_size)
{
	int			nunits = 0;
	bool		open[PKLIMIT_BATCH_MAX];

	for (int j = 0; j < n; j++)
	{
		const PklimitRequest *r = &requests[which[j]];
		int			u = -1;

		for (int v = 0; v < nunits; v++)
		{
			const PklimitRequest *h = &requests[unit_head[v]];

			if (!open[v] || !same_key(h, r))
				continue;
			if (r->kind == PKLIMIT_OP_HIT && h->window_usec == r->window_usec &&
				!unfold[which[j]])
				u = v;
			else
				open[v] = false;	/* a later hit must not jump over r */
		}
		if (u < 0)
		{
			u = nunits++;
			unit_head[u] = which[j];
			unit_size[u] = 0;
			open[u] = (r->kind == PKLIMIT_OP_HIT && !unfold[which[j]]);
		}
		unit_of[j] = u;
		unit_size[u]++;
	}
	return nunits;
}

/* What became of one transaction of apply_in_transaction. */
typedef enum ApplyOutcome
{
	APPLY_COMMITTED,
	APPLY_LOCKED,				/* a row lock was not granted in time */
	APPLY_TABLE_LOCKED,			/* another transaction locks the whole table */
	APPLY_FAILED,				/* any other error */
	APPLY_UNFOLD				/* rolled back: folded hits reached the maximum */
} ApplyOutcome;

/*
 * Apply the requests listed in which[] in one transaction, waiting for a row
 * lock no longer than lock_timeout says (set_lock_wait), and answer each as serial
 * execution would: the k-th of m folded hits gets the count after its own
 * event.  Otherwise every listed answer says why.  On APPLY_LOCKED,
 * locked[j] is set for the requests on the key whose row was locked.  If
 * probe_table, a table locked by another transaction is found first, without
 * waiting (APPLY_TABLE_LOCKED).
 *
 * A folded unit whose count comes back at the largest bigint does not say
 * where it started, so its events could not get their own counts: the
 * transaction is rolled back, its requests are marked in unfold[] and the
 * caller applies them again one statement per event (APPLY_UNFOLD).
 */
static ApplyOutcome
apply_in_transaction(const PklimitRequest *requests, PklimitAnswer *answers,
					 const int *which, int n, bool probe_table, bool *unfold,
					 bool *locked)
{
	volatile ApplyOutcome outcome = APPLY_COMMITTED;
	volatile int current = 0;
	Oid			owner_nspid = InvalidOid;
	Oid			owner = InvalidOid;
	int			unit_of[PKLIMIT_BATCH_MAX];
	int			unit_head[PKLIMIT_BATCH_MAX];
	int			unit_size[PKLIMIT_BATCH_MAX];
	int			nunits = fold(requests, which, n, unfold, unit_of, unit_head,
							  unit_size);

	PG_TRY();
	{
		begin_transaction("pklimit: applying queued requests");
		if (probe_table && !pklimit_store_table_free(requests[which[0]].nspid))
			outcome = APPLY_TABLE_LOCKED;

		for (int u = 0; u < nunits && outcome == APPLY_COMMITTED; u++)
		{
			const PklimitRequest *r = &requests[unit_head[u]];
			PklimitResult result;
			Oid			save_userid;
			int			save_sec_context;
			int			k = 0;

			current = u;
			if (r->nspid != owner_nspid)
			{
				owner = pklimit_store_owner(r->nspid);
				owner_nspid = r->nspid;
			}
			/* run as the table's owner, so row level security applies */
			GetUserIdAndSecContext(&save_userid, &save_sec_context);
			SetUserIdAndSecContext(owner,
								   save_sec_context |
								   SECURITY_LOCAL_USERID_CHANGE |
								   SECURITY_RESTRICTED_OPERATION);
			pklimit_store_apply(r->nspid, r->kind, r->key, r->window_usec,
								unit_size[u], &result);
			SetUserIdAndSecContext(save_userid, save_sec_context);
			SPI_freetuptable(SPI_tuptable);

			if (r->kind == PKLIMIT_OP_HIT && unit_size[u] > 1 &&
				result.count == PG_INT64_MAX)
			{
				for (int j = 0; j < n; j++)
					if (unit_of[j] == u)
						unfold[which[j]] = true;
				outcome = APPLY_UNFOLD;
				break;
			}
			for (int j = 0; j < n; j++)
			{
				PklimitAnswer *a = &answers[which[j]];

				if (unit_of[j] != u)
					continue;
				memset(a, 0, sizeof(*a));
				a->status = PKLIMIT_OK;
				a->result = result;
				if (r->kind == PKLIMIT_OP_HIT)
					a->result.count = result.count - unit_size[u] + (++k);
			}
		}

		if (outcome == APPLY_COMMITTED)
			commit_transaction();
		else
		{
			SPI_finish();
			PopActiveSnapshot();
			AbortCurrentTransaction();
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata = abort_transaction();

		for (int j = 0; j < n; j++)
			answer_error(&answers[which[j]], edata);
		if (edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
		{
			const PklimitRequest *r = &requests[unit_head[current]];

			/*
			 * Every write on that key would meet the same locked row; its
			 * counts only read, unless a count is what met the lock.
			 */
			outcome = APPLY_LOCKED;
			for (int j = 0; j < n; j++)
				locked[j] = same_key(&requests[which[j]], r) &&
					(requests[which[j]].kind != PKLIMIT_OP_COUNT ||
					 r->kind == PKLIMIT_OP_COUNT);
		}
		else
		{
			outcome = APPLY_FAILED;
			ereport(LOG,
					(errmsg_plural("pklimit worker could not apply %d request: %s",
								   "pklimit worker could not apply %d requests: %s",
								   n, n, edata->message)));
		}
	}
	PG_END_TRY();

	MemoryContextSwitchTo(batch_context);
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	return outcome;
}

/*
 * Is there budget left before deadline for another try at a locked row, with
 * time to spare for the answer to reach the caller?  The next try comes
 * within RETRY_MS, give or take a round of the worker (a new batch may wait
 * BATCH_LOCK_MS for a lock first), and the answer after it.
 */
static bool
worth_retrying(TimestampTz deadline)
{
	return (deadline - GetCurrentTimestamp()) / 1000 >
		2 * RETRY_MS + BATCH_LOCK_MS + ANSWER_MS;
}

/* Set how long a statement waits for a lock (lock_timeout), in ms. */
static void
set_lock_wait(int ms)
{
	static int	current = -1;
	char		value[16];

	if (ms == current)
		return;
	snprintf(value, sizeof(value), "%d", ms);
	SetConfigOption("lock_timeout", value, PGC_SUSET, PGC_S_OVERRIDE);
	current = ms;
}

/*
 * Apply a batch of n requests; if set_aside, all of them have met a locked
 * row before.  Those marked in skip[] (if not NULL) are set aside untried:
 * their key has requests set aside already, so they would only wait for the
 * same locked row, and they keep their order behind them.  Requests whose
 * caller has given up are answered without being applied.  A batch waits
 * for a row lock only briefly: the requests on a key whose row is locked are
 * taken out, marked in retry[] to be tried again later, and the rest is
 * committed without them, so a locked row holds up neither the worker nor
 * other keys.  A table locked by another transaction sets aside the
 * batch's writes.  After any other failure each request is tried in a
 * transaction of its own, so one bad request cannot spoil its neighbours'
 * answers.  Every transaction's lock wait is set here.
 */
static void
apply_batch(const PklimitRequest *requests, PklimitAnswer *answers,
			bool *retry, int n, bool set_aside, const bool *skip)
{
	int			live[PKLIMIT_BATCH_MAX];
	int			nlive = 0;
	ApplyOutcome outcome;
	bool		unfold[PKLIMIT_BATCH_MAX];
	bool		probe_table = false;
	TimestampTz now = GetCurrentTimestamp();

	set_lock_wait(set_aside ? RETRY_LOCK_MS : BATCH_LOCK_MS);
	for (int i = 0; i < n; i++)
	{
		retry[i] = false;
		unfold[i] = false;
		memset(&answers[i], 0, sizeof(answers[i]));
		if ((set_aside || (skip && skip[i])) &&
			!worth_retrying(requests[i].deadline))
			answers[i].status = PKLIMIT_LOCK_TIMEOUT;
		else if (skip && skip[i])
		{
			answers[i].status = PKLIMIT_LOCK_TIMEOUT;
			retry[i] = true;
		}
		else if (requests[i].deadline <= now)
			answers[i].status = PKLIMIT_TIMEOUT;
		else
			live[nlive++] = i;
	}

	while (nlive > 0)
	{
		bool		locked[PKLIMIT_BATCH_MAX];
		int			kept = 0;

		outcome = apply_in_transaction(requests, answers, live, nlive,
									   probe_table, unfold, locked);
		if (outcome == APPLY_COMMITTED)
			break;
		if (outcome == APPLY_UNFOLD)
			continue;			/* again, without folding what saturated */
		if (outcome == APPLY_FAILED)
		{
			if (nlive > 1)
				for (int j = 0; j < nlive; j++)
					(void) apply_in_transaction(requests, answers, &live[j], 1,
												false, unfold, locked);
			break;
		}
		/* a table locked as a whole holds up its writes, not its reads */
		if (outcome == APPLY_TABLE_LOCKED)
		{
			for (int j = 0; j < nlive; j++)
			{
				locked[j] = (requests[live[j]].kind != PKLIMIT_OP_COUNT);
				if (locked[j])
				{
					memset(&answers[live[j]], 0, sizeof(answers[live[j]]));
					answers[live[j]].status = PKLIMIT_LOCK_TIMEOUT;
				}
			}
		}

		/*
		 * Try those again later, while budget is left.  The rest goes on,
		 * without the callers that have given up meanwhile, and waits only
		 * briefly for any other lock, so several locked rows cost one long
		 * wait.  Was it the whole table?  The next round finds out.
		 */
		now = GetCurrentTimestamp();
		probe_table = false;
		for (int j = 0; j < nlive; j++)
		{
			const PklimitRequest *r = &requests[live[j]];

			if (locked[j])
				retry[live[j]] = worth_retrying(r->deadline);
			else if (r->deadline <= now)
			{
				memset(&answers[live[j]], 0, sizeof(answers[live[j]]));
				answers[live[j]].status = PKLIMIT_TIMEOUT;
			}
			else
			{
				live[kept++] = live[j];
				probe_table |= (r->kind != PKLIMIT_OP_COUNT &&
								outcome == APPLY_LOCKED);
			}
		}
		nlive = kept;
		set_lock_wait(RETRY_LOCK_MS);
	}
}

/* Answer the running purge's caller and forget the purge. */
static void
purge_finish(PklimitAnswer *answer, bool failed)
{
	pklimit_purge_progress(purge_deleted, false, failed);
	pklimit_worker_answer(&purge_slot, answer, 1);
	purge_slot = -1;
}

/* Delete one batch of the running purge, in a transaction of its own. */
static void
purge_step(void)
{
	PklimitAnswer answer;
	volatile int64 deleted = 0;

	memset(&answer, 0, sizeof(answer));
	if (pklimit_worker_abandoned(purge_slot))
	{
		purge_finish(&answer, false);
		return;
	}

	PG_TRY();
	{
		Oid			save_userid;
		int			save_sec_context;

		/* a lock that held up the last try is waited for briefly */
		set_lock_wait(purge_blocked_since != 0 ? RETRY_LOCK_MS : BATCH_LOCK_MS);
		begin_transaction("pklimit: purge");
		/* the extension's own table only; the caller's privileges decide */
		(void) pklimit_store_owner(purge_request.nspid);
		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		SetUserIdAndSecContext(purge_request.userid,
							   save_sec_context |
							   SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		deleted = pklimit_store_purge(purge_request.nspid, purge_request.cutoff,
									  PKLIMIT_PURGE_BATCH, &purge_from);
		SetUserIdAndSecContext(save_userid, save_sec_context);
		commit_transaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata = abort_transaction();

		deleted = -1;
		/* a locked row: try the batch again on a later round, for a while */
		if (edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE &&
			(purge_blocked_since == 0 ||
			 GetCurrentTimestamp() - purge_blocked_since < PURGE_LOCK_USEC))
		{
			if (purge_blocked_since == 0)
				purge_blocked_since = GetCurrentTimestamp();
		}
		else
		{
			ereport(LOG,
					(errmsg("pklimit purge failed after deleting " INT64_FORMAT " rows: %s",
							purge_deleted, edata->message)));
			answer_error(&answer, edata);
			purge_finish(&answer, true);
		}
	}
	PG_END_TRY();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(TopMemoryContext);
	MemoryContextReset(batch_context);
	if (deleted < 0)
		return;

	purge_blocked_since = 0;
	purge_deleted += deleted;
	if (deleted < PKLIMIT_PURGE_BATCH)
	{
		answer.status = PKLIMIT_OK;
		answer.result.found = true;
		answer.result.count = purge_deleted;
		purge_finish(&answer, false);
	}
	else
		pklimit_purge_progress(purge_deleted, true, false);
}

/*
 * Take purge requests out of a batch: the first starts a purge if none
 * runs, any other is answered at once as not run.  Returns the number of
 * requests left, compacted at the front.
 */
static int
take_purges(PklimitRequest *requests, int *slots, int n)
{
	int			left = 0;

	for (int i = 0; i < n; i++)
	{
		if (requests[i].kind != PKLIMIT_OP_PURGE)
		{
			requests[left] = requests[i];
			slots[left++] = slots[i];
		}
		else if (purge_slot < 0)
		{
			purge_slot = slots[i];
			purge_request = requests[i];
			purge_deleted = 0;
			purge_from = DT_NOBEGIN;
			purge_blocked_since = 0;
			pklimit_purge_begin(purge_request.cutoff);
		}
		else
		{
			PklimitAnswer answer;

			memset(&answer, 0, sizeof(answer));
			answer.status = PKLIMIT_OK;
			answer.result.found = false;	/* another purge is running */
			pklimit_worker_answer(&slots[i], &answer, 1);
		}
	}
	return left;
}

void
pklimit_worker_main(Datum main_arg)
{
	Oid			dboid;
	TimestampTz last_work;
	PklimitRequest *requests;
	PklimitAnswer *answers;
	PklimitAnswer *answers_out;
	int		   *slots;
	int			answered[PKLIMIT_BATCH_MAX];
	bool	   *retry;
	int			ndeferred = 0;
	TimestampTz deferred_tried = 0;	/* when set-aside requests were tried */

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	/* leave between two transactions, answering nobody wrongly */
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	dboid = pklimit_worker_attach(DatumGetInt32(main_arg));
	if (!OidIsValid(dboid))
		proc_exit(0);

	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pgstat_report_appname("pklimit worker");
	/* pinned for the saved plans, and so no planted object is ever found */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET,
					PGC_S_OVERRIDE);
	/* settings of the database or role must not change how events are kept */
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET,
					PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET,
					PGC_S_OVERRIDE);
	SetConfigOption("row_security", "on", PGC_SUSET, PGC_S_OVERRIDE);
	/* an acknowledged event survives a crash, whatever the database says */
	SetConfigOption("synchronous_commit", "on", PGC_SUSET, PGC_S_OVERRIDE);
	/* a locked row defers its request rather than holding up the worker */
	set_lock_wait(BATCH_LOCK_MS);

	batch_context = AllocSetContextCreate(TopMemoryContext, "pklimit batch",
										  ALLOCSET_DEFAULT_SIZES);
	requests = MemoryContextAlloc(TopMemoryContext, sizeof(PklimitRequest) * PKLIMIT_BATCH_MAX);
	answers = MemoryContextAlloc(TopMemoryContext, sizeof(PklimitAnswer) * PKLIMIT_BATCH_MAX);
	answers_out = MemoryContextAlloc(TopMemoryContext, sizeof(PklimitAnswer) * PKLIMIT_BATCH_MAX);
	slots = MemoryContextAlloc(TopMemoryContext, sizeof(int) * PKLIMIT_BATCH_MAX);
	retry = MemoryContextAlloc(TopMemoryContext, sizeof(bool) * PKLIMIT_BATCH_MAX);

	last_work = GetCurrentTimestamp();
	for (;;)
	{
		int			n;
		int			nnew;
		long		wait_ms;

		/*
		 * Between transactions there is nothing to cancel: a cancel
		 * (pg_cancel_backend) that arrives now would only end the worker.
		 * SIGINT stays handled, since lock_timeout works through it.
		 */
		QueryCancelPending = false;
		(void) get_timeout_indicator(LOCK_TIMEOUT, true);
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			proc_exit(0);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		/* requests deferred by a locked row stay in front, oldest first */
		nnew = pklimit_worker_take(requests + ndeferred, slots + ndeferred,
								   PKLIMIT_BATCH_MAX - ndeferred);
		nnew = take_purges(requests + ndeferred, slots + ndeferred, nnew);
		n = ndeferred + nnew;
		if (n > 0)
		{
			int			nanswered = 0;
			bool		skip[PKLIMIT_BATCH_MAX];
			bool		done[PKLIMIT_BATCH_MAX];
			bool		retry_now;
			bool		had_deferred = (ndeferred > 0);

			MemoryContextSwitchTo(batch_context);

			/*
			 * Requests set aside by a locked row are tried every RETRY_MS;
			 * new writes on their keys join them untried.
			 */
			retry_now = (ndeferred > 0 &&
						 GetCurrentTimestamp() - deferred_tried >= RETRY_MS * 1000);
			for (int i = 0; i < n; i++)
			{
				skip[i] = (i < ndeferred && !retry_now);
				for (int d = 0; d < ndeferred && i >= ndeferred && !skip[i] &&
					 requests[i].kind != PKLIMIT_OP_COUNT; d++)
					skip[i] = same_key(&requests[i], &requests[d]);
			}

			/* new requests first; their answers go out at once */
			apply_batch(requests + ndeferred, answers + ndeferred,
						retry + ndeferred, nnew, false, skip + ndeferred);
			for (int i = 0; i < n; i++)
			{
				done[i] = (i >= ndeferred && !retry[i]);
				if (done[i])
				{
					answers_out[nanswered] = answers[i];
					answered[nanswered++] = slots[i];
				}
			}
			if (nanswered > 0)
				pklimit_worker_answer(answered, answers_out, nanswered);
			nanswered = 0;

			/* then the set-aside ones, but for those whose caller gave up */
			if (retry_now)
				for (int i = 0; i < ndeferred; i++)
					if (pklimit_worker_abandoned(slots[i]))
						requests[i].deadline = 0;
			apply_batch(requests, answers, retry, ndeferred, true, skip);
			if (retry_now)
				deferred_tried = GetCurrentTimestamp();

			/* answer the rest; keep the deferred ones in front */
			ndeferred = 0;
			for (int i = 0; i < n; i++)
			{
				if (done[i])
					continue;
				/* keep half a batch for keys that are not locked */
				if (retry[i] && ndeferred >= PKLIMIT_BATCH_MAX / 2)
				{
					retry[i] = false;
					answers[i].status = PKLIMIT_LOCK_TIMEOUT;
				}
				if (retry[i])
				{
					requests[ndeferred] = requests[i];
					slots[ndeferred++] = slots[i];
				}
				else
				{
					answers_out[nanswered] = answers[i];
					answered[nanswered++] = slots[i];
				}
			}
			if (nanswered > 0)
				pklimit_worker_answer(answered, answers_out, nanswered);
			if (ndeferred > 0)
				pklimit_worker_note_locked(slots, ndeferred);
			if (ndeferred > 0 && !had_deferred)
				deferred_tried = GetCurrentTimestamp(); /* newly set aside */
			MemoryContextSwitchTo(TopMemoryContext);
			MemoryContextReset(batch_context);
			last_work = GetCurrentTimestamp();
		}
		/* a purge held up by a locked row tries again every RETRY_MS */
		if (purge_slot >= 0 &&
			(purge_blocked_since == 0 ||
			 GetCurrentTimestamp() - purge_last_try >= RETRY_MS * 1000))
		{
			purge_last_try = GetCurrentTimestamp();
			purge_step();
			last_work = GetCurrentTimestamp();
			if (purge_slot >= 0 && purge_blocked_since == 0)
				continue;
		}
		if (nnew > 0)
			continue;			/* more may have arrived meanwhile */

		wait_ms = (long) pklimit_worker_idle_timeout * 1000 -
			(GetCurrentTimestamp() - last_work) / 1000;
		if (ndeferred > 0 || purge_slot >= 0)
			wait_ms = RETRY_MS;	/* a locked row: try again soon */
		else if (pklimit_worker_idle_timeout == 0)
			wait_ms = -1;		/* never exit for idleness */
		else if (wait_ms <= 0)
		{
			if (pklimit_worker_retire())
				proc_exit(0);
			wait_ms = 1000;
		}
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | (wait_ms >= 0 ? WL_TIMEOUT : 0) |
						 WL_EXIT_ON_PM_DEATH,
						 wait_ms,
						 pklimit_wait_event(ndeferred > 0 || purge_slot >= 0 ?
											PKLIMIT_WAIT_RETRY : PKLIMIT_WAIT_IDLE));
		ResetLatch(MyLatch);
	}
}
