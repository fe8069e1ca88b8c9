/*-------------------------------------------------------------------------
 *
 * purge.c
 *		The purge, from request to status: pklimit_purge() turns its
 *		retention into a cutoff and queues one request; the worker takes it
 *		and deletes in batches, each committed on its own, serving queued
 *		calls between two batches; pklimit_purge_status() shows the last
 *		purge of the database, and how long the row it should have deleted
 *		first has waited (read from the table, whoever purges).  The
 *		statement is store.c's, the transactions xact.c's.
 *
 * A batch is bounded in time whatever the table's statistics say: its plan
 * is forced onto the indexes (no sequential or bitmap scan of the whole
 * table), and a batch that takes longer than PURGE_SLICE_MS is cancelled,
 * rolled back and tried again at half the size, down to PURGE_MIN_BATCH
 * rows, so the worker's callers never wait long behind it.  A batch that
 * meets a locked row is tried again every PKLIMIT_RETRY_MS, waiting
 * PKLIMIT_RETRY_LOCK_MS for the lock; the purge fails only if that goes on
 * for PKLIMIT_PURGE_LOCK_SECONDS.  A purge requested while one of the same
 * database runs returns at once.  The batches run as the table's owner:
 * EXECUTE on pklimit_purge is the privilege that decides who may purge.
 *
 * Locking: the statuses are protected by pklimit_lock (see
 * settings.h): exclusive to change one, shared to read one.  The running
 * purge itself is the worker's own state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "api.h"
#include "purge.h"
#include "queue.h"
#include "settings.h"
#include "store.h"

/* Rows a purge batch deletes at first, at least, and its time slice. */
#define PURGE_BATCH 1000
#define PURGE_MIN_BATCH 10
#define PURGE_SLICE_MS 200

/* What a database's last purge did, since the server started. */
typedef struct PurgeStatus
{
	Oid			dboid;			/* InvalidOid: unused */
	bool		running;
	TimestampTz started_at;
	TimestampTz finished_at;	/* 0 while the first purge runs */
	TimestampTz cutoff;			/* rows that ended before this */
	int64		deleted;		/* rows deleted so far, or in all */
	bool		failed;
} PurgeStatus;

static PurgeStatus *statuses;	/* pklimit_max_workers of them */

/* The purge a worker runs. */
typedef struct RunningPurge
{
	bool		running;
	PklimitEntry entry;			/* its request, slot and answer */
	int64		deleted;
	TimestampTz from;			/* the next batch starts at this row end */
	TimestampTz blocked_since;	/* 0, or when a locked row stopped it */
	TimestampTz last_try;
	int			batch;			/* rows the next batch deletes at most */
} RunningPurge;

static RunningPurge purge;		/* in the worker */

Size
pklimit_purge_shmem_size(void)
{
	return mul_size(pklimit_max_workers, sizeof(PurgeStatus));
}

/* In shmem_startup, with AddinShmemInitLock held. */
void
pklimit_purge_shmem_init(void)
{
	bool		found;

	statuses = ShmemInitStruct("pklimit purges", pklimit_purge_shmem_size(),
							   &found);
	if (!found)
		memset(statuses, 0, pklimit_purge_shmem_size());
}

/*
 * This database's status.  Each database keeps one; when all are
 * taken, the one whose purge finished longest ago is reused.  Lock held.
 */
static PurgeStatus *
my_status(void)
{
	PurgeStatus *oldest = NULL;

	for (int i = 0; i < pklimit_max_workers; i++)
		if (statuses[i].dboid == MyDatabaseId)
			return &statuses[i];
	for (int i = 0; i < pklimit_max_workers; i++)
	{
		PurgeStatus *s = &statuses[i];

		if (s->dboid == InvalidOid)
			return s;
		if (!s->running &&
			(oldest == NULL || s->finished_at < oldest->finished_at))
			oldest = s;
	}
	/* running purges hold at most max_workers - 1 statuses besides ours */
	return oldest ? oldest : &statuses[0];
}

/* Record the running purge's progress; at its end, whether it failed. */
static void
report(bool failed)
{
	PurgeStatus *s;

	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	s = my_status();
	s->deleted = purge.deleted;
	s->running = purge.running;
	s->failed = failed;
	if (!purge.running)
		s->finished_at = GetCurrentTimestamp();
	LWLockRelease(pklimit_lock);
}

/*
 * In the worker, a purge request taken from the queue: it starts a purge
 * unless one runs, in which case it is answered at once as not run.
 */
void
pklimit_purge_take(const PklimitEntry *entry)
{
	PurgeStatus *s;

	if (purge.running)
	{
		PklimitEntry other = *entry;
		PklimitEntry *list[1] = {&other};

		memset(&other.answer, 0, sizeof(other.answer));
		other.answer.status = PKLIMIT_OK;
		other.answer.result.found = false;	/* another purge is running */
		pklimit_queue_answer(list, 1);
		return;
	}
	purge.running = true;
	purge.entry = *entry;
	memset(&purge.entry.answer, 0, sizeof(purge.entry.answer));
	purge.deleted = 0;
	purge.from = DT_NOBEGIN;
	purge.blocked_since = 0;
	purge.batch = PURGE_BATCH;

	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	s = my_status();
	memset(s, 0, sizeof(*s));
	s->dboid = MyDatabaseId;
	s->running = true;
	s->started_at = GetCurrentTimestamp();
	s->cutoff = entry->request.cutoff;
	LWLockRelease(pklimit_lock);
}

bool
pklimit_purge_running(void)
{
	return purge.running;
}

/*
 * Is a purge step due?  A purge goes on at once, but one held up by a
 * locked row tries again only every PKLIMIT_RETRY_MS.
 */
bool
pklimit_purge_due(void)
{
	return purge.running &&
		(purge.blocked_since == 0 ||
		 GetCurrentTimestamp() - purge.last_try >= PKLIMIT_RETRY_MS * 1000);
}

/* The worker exits while its purge runs: the purge failed.  Lock held. */
void
pklimit_purge_fail_running(void)
{
	PurgeStatus *s;

	if (!purge.running)
		return;
	s = my_status();
	s->running = false;
	s->failed = true;
	s->finished_at = GetCurrentTimestamp();
}

/* Answer the running purge's caller and forget the purge. */
static void
finish(bool failed)
{
	PklimitEntry *list[1] = {&purge.entry};

	purge.running = false;
	report(failed);
	pklimit_queue_answer(list, 1);
}

/*
 * The planner settings of a batch, for its transaction only: index scans
 * whatever the statistics say, which after a crash or before autovacuum's
 * next ANALYZE can make a scan of the whole table look cheap.
 */
static void
force_index_plans(void)
{
	(void) set_config_option("enable_seqscan", "off", PGC_SUSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	(void) set_config_option("enable_bitmapscan", "off", PGC_SUSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * Delete one batch, as the table's owner, in a transaction of its own and
 * within PURGE_SLICE_MS (the statement timer).  Returns rows deleted, or -1
 * on an error, which is in *edata (*sliced: the slice was over).
 */
static int64
delete_batch(PklimitSession *session, MemoryContext memory_context,
			 ErrorData **edata, bool *sliced)
{
	volatile int64 deleted = -1;
	const PklimitRequest *r = &purge.entry.request;

	pklimit_timer_reset();
	PG_TRY();
	{
		PklimitTable table;
		PklimitUser worker;

		/* a lock that held up the last try is waited for briefly */
		pklimit_set_lock_wait(session, purge.blocked_since != 0 ?
							  PKLIMIT_RETRY_LOCK_MS : PKLIMIT_BATCH_LOCK_MS);
		pklimit_begin_transaction("pklimit: purge");
		force_index_plans();
		pklimit_table_open(r->nspid, session->on_citus, &table);
		if (table.citus)
			pklimit_set_node_settings(session);
		pklimit_remember_user(&worker);
		pklimit_become_owner(&worker, table.owner);
		pklimit_timer_start(PURGE_SLICE_MS);
		deleted = pklimit_store_purge(&table, r->cutoff, purge.batch,
									  &purge.from);
		/* then the leases, with what is left of the batch */
		deleted += pklimit_store_lease_purge(&table, r->cutoff,
											 purge.batch - deleted);
		pklimit_timer_stop();
		pklimit_restore_user(&worker);
		(void) pklimit_commit_transaction();
	}
	PG_CATCH();
	{
		pklimit_timer_stop();
		*edata = pklimit_abort_transaction(memory_context);
		deleted = -1;
	}
	PG_END_TRY();
	*sliced = pklimit_timer_ran_out();
	pklimit_report_idle();
	return deleted;
}

/*
 * One step of the running purge: one batch deleted and committed.  A batch
 * over its time slice is tried again at half the size; one that meets a
 * locked row is tried again on a later step, for a while.  Returns true if
 * the purge goes on at once (not held up by a lock).
 */
bool
pklimit_purge_step(PklimitSession *session, MemoryContext memory_context)
{
	ErrorData  *edata = NULL;
	bool		sliced = false;
	int64		deleted;
	TimestampTz now;

	purge.last_try = GetCurrentTimestamp();
	if (pklimit_queue_abandoned(purge.entry.slot))
	{
		finish(false);
		return false;
	}

	deleted = delete_batch(session, memory_context, &edata, &sliced);
	now = GetCurrentTimestamp();
	if (deleted < 0 && sliced && purge.batch > PURGE_MIN_BATCH)
		purge.batch = Max(PURGE_MIN_BATCH, purge.batch / 2);
	else if (deleted < 0 && edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE &&
			 (purge.blocked_since == 0 ||
			  now - purge.blocked_since < PKLIMIT_PURGE_LOCK_SECONDS * USECS_PER_SEC))
	{
		if (purge.blocked_since == 0)
			purge.blocked_since = now;
	}
	else if (deleted < 0)
	{
		ereport(LOG,
				(errmsg("pklimit purge failed after deleting " INT64_FORMAT " rows: %s",
						purge.deleted, edata->message)));
		pklimit_answer_error(&purge.entry.answer, edata);
		finish(true);
	}
	else
	{
		purge.blocked_since = 0;
		purge.deleted += deleted;
		if (deleted < purge.batch)
		{
			purge.entry.answer.status = PKLIMIT_OK;
			purge.entry.answer.result.found = true;
			purge.entry.answer.result.count = purge.deleted;
			finish(false);
		}
		else
			report(false);
	}
	MemoryContextSwitchTo(TopMemoryContext);
	MemoryContextReset(memory_context);
	return purge.running && purge.blocked_since == 0;
}

/*
 * SQL side.
 */

/*
 * The cutoff of a purge with this retention, measured back from now.  A
 * retention whose longest span (31-day months) reaches past the earliest
 * timestamp is older than any window: DT_NOBEGIN, nothing is deleted.
 */
static TimestampTz
cutoff_of(Interval *retention, TimestampTz now)
{
	Interval	zero = {0};
	TimestampTz cutoff;

	if (DatumGetBool(DirectFunctionCall2(interval_lt,
										 IntervalPGetDatum(retention),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retention must not be negative")));
	if ((double) retention->month * 31 * USECS_PER_DAY +
		(double) retention->day * USECS_PER_DAY + (double) retention->time >
		(double) (now - MIN_TIMESTAMP) - USECS_PER_DAY)
		return DT_NOBEGIN;
	cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
													 TimestampTzGetDatum(now),
													 IntervalPGetDatum(retention)));
	if (cutoff > now)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retention must not be negative")));
	return cutoff;
}

/*
 * Delete rows whose window closed more than retention ago, in batches that
 * the worker commits one by one.  The caller waits pklimit.timeout for a
 * worker to take it, then until the purge is done (statement_timeout and
 * cancel apply).  EXECUTE is not granted to PUBLIC.
 */
PG_FUNCTION_INFO_V1(pklimit_purge);
Datum
pklimit_purge(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	PklimitRequest request;
	PklimitAnswer answer;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("retention must not be null")));
	memset(&request, 0, sizeof(request));
	request.kind = PKLIMIT_OP_PURGE;
	request.cutoff = cutoff_of(PG_GETARG_INTERVAL_P(0), now);

	(void) pklimit_run(fcinfo, &request, &answer, 1);
	if (answer.status != PKLIMIT_OK)
		(void) pklimit_unavailable(&answer, PKLIMIT_CALL_PURGES);
	if (!answer.result.found)
	{
		ereport(NOTICE,
				(errmsg("a purge of this database is already running"),
				 errdetail("This call deleted nothing.")));
		PG_RETURN_INT64(0);
	}
	PG_RETURN_INT64(answer.result.count);
}

/* The status of the current database's last purge: false if none ran. */
static bool
last_status(PurgeStatus *status)
{
	bool		found = false;

	pklimit_check_preloaded();
	LWLockAcquire(pklimit_lock, LW_SHARED);
	for (int i = 0; i < pklimit_max_workers && !found; i++)
	{
		if (statuses[i].dboid == MyDatabaseId)
		{
			*status = statuses[i];
			found = true;
		}
	}
	LWLockRelease(pklimit_lock);
	return found;
}

/* The columns of the last purge, from values[0] on: six of them. */
static void
status_columns(const PurgeStatus *status, bool found, Datum *values,
			   bool *nulls)
{
	values[0] = BoolGetDatum(found && status->running);
	values[1] = TimestampTzGetDatum(status->started_at);
	values[2] = TimestampTzGetDatum(status->finished_at);
	values[3] = TimestampTzGetDatum(status->cutoff);
	values[4] = Int64GetDatum(status->deleted);
	values[5] = BoolGetDatum(status->failed);
	for (int i = 1; i < 6; i++)
		nulls[i] = !found;
	nulls[2] |= status->running;
}

/*
 * The last purge of the current database since the server started; no row
 * if none ran.  The SQL function of 0.1.0.
 */
PG_FUNCTION_INFO_V1(pklimit_purge_status);
Datum
pklimit_purge_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	PurgeStatus status;
	Datum		values[6];
	bool		nulls[6] = {0};

	InitMaterializedSRF(fcinfo, 0);
	if (!last_status(&status))
		return (Datum) 0;
	status_columns(&status, true, values, nulls);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * pklimit_purge_status(retention) of 0.2.0: the last purge since the server
 * started (NULL columns if none ran), and, whether or not any purge runs,
 * when the row that stopped counting first did so and how long it has
 * outlived retention: what tells that purges are not running, whoever was
 * meant to run them.
 */
PG_FUNCTION_INFO_V1(pklimit_purge_status_0_2);
Datum
pklimit_purge_status_0_2(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	PurgeStatus status = {0};
	bool		found;
	TimestampTz cutoff;
	TimestampTz oldest = 0;
	bool		any_row;
	TupleDesc	tupdesc;
	Datum		values[8];
	bool		nulls[8] = {0};

	pklimit_arg_not_null(fcinfo, 0, "retention");
	cutoff = cutoff_of(PG_GETARG_INTERVAL_P(0), now);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	found = last_status(&status);
	status_columns(&status, found, values, nulls);
	if (!pklimit_table_oldest_end(get_func_namespace(fcinfo->flinfo->fn_oid),
								  &oldest, &any_row))
		nulls[6] = nulls[7] = true; /* not known here */
	else
	{
		Interval   *overdue = palloc0(sizeof(Interval));

		if (any_row && oldest < cutoff)
			overdue->time = cutoff - oldest;
		values[6] = TimestampTzGetDatum(oldest);
		nulls[6] = !any_row;
		values[7] = IntervalPGetDatum(overdue);
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
