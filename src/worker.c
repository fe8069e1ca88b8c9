/*-------------------------------------------------------------------------
 *
 * worker.c
 *		pklimit's background worker: one per database, started on demand by
 *		the first call that needs it (registry.c), gone after
 *		pklimit.worker_idle_timeout without work.  It applies queued requests
 *		in its own transactions, so an event is committed whatever becomes of
 *		the caller's transaction, and answers each caller after the commit.
 *		This file is the worker's loop over batches; applying one list of
 *		entries is apply.c's, an entry's state entry.c's, the purge's steps
 *		purge.c's, the memory path's flush memory/flush.c's.
 *
 * Each round gathers every request queued for the database into the batch,
 * behind the requests set aside in earlier rounds, and goes through these
 * steps:
 *
 *	gather		take the queued requests (a purge goes to purge.c)
 *	set aside	new writes on a key whose requests are set aside join them,
 *				untried: they would only wait for the same locked row
 *	apply		apply the new requests in one transaction (those whose keys
 *				are in memory are decided there, or their keys written and
 *				taken out of memory first: memory/batch.c); those on a row
 *				locked by another transaction are set aside
 *	answer		send the new requests' answers at once
 *	retry		every PKLIMIT_RETRY_MS, try the set-aside requests again,
 *				while their callers' budget lasts
 *	keep		answer what is done, keep what is still set aside (at most
 *				half a batch) in front for the next round
 *	wait		for new requests, a retry, a purge step or a flush
 *
 * Between rounds, every pklimit.flush_interval, the worker writes the keys
 * its database holds in memory to the table (memory/flush.c), and before
 * each purge step too; and when it exits for any reason but a crash, it
 * closes its database's memory and writes them a last time (final_flush).
 *
 * The worker starts a batch at once, without waiting for more requests:
 * those arriving during its commit flush make up the next batch, which
 * measured faster than any pause (bench/RESULTS.md).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/pmsignal.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "memory.h"
#include "purge.h"
#include "queue.h"
#include "registry.h"
#include "settings.h"
#include "stats.h"
#include "worker.h"

/*
 * The requests the worker works on: set-aside ones first, oldest first.  It
 * holds at most its database's share of the queue (and PKLIMIT_BATCH_MAX):
 * requests the worker has taken cannot make room for another database
 * (queue.c), so they must fit in the share.
 */
typedef struct Batch
{
	PklimitEntry entries[PKLIMIT_BATCH_MAX];
	int			capacity;		/* entries it may hold */
	int			n;				/* entries in use */
	int			nold;			/* of them, set aside in an earlier round */
	bool		retry_due;		/* this round tries the set-aside ones again */
	TimestampTz tried;			/* when set-aside entries were last tried */
	MemoryContext context;		/* reset after every round */
} Batch;

/* The group of entry i of a batch b (pklimit_foreach_in_group). */
#define BATCH_GROUP(i) (b->entries[(i)].request.group)

/* Is this the static worker of a database in pklimit.databases? */
static bool static_worker = false;

/* The session its transactions run in (xact.c). */
static PklimitSession session = {.lock_wait_ms = -1};

/*
 * An acknowledged event survives a crash, whatever the database says
 * (synchronous_commit on), unless pklimit.asynchronous_commit trades that
 * for a commit that does not wait for its flush, nor for a synchronous
 * standby.  Set at start and after every reload.
 */
static void
set_commit_mode(void)
{
	SetConfigOption("synchronous_commit",
					pklimit_asynchronous_commit ? "off" : "on",
					PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * Between transactions there is nothing to cancel: a cancel
 * (pg_cancel_backend) that arrives now would only end the worker.  SIGINT
 * stays handled, since lock_timeout works through it.  A termination
 * (SIGTERM, handled by die() as in any backend, so that it also ends a wait
 * for a synchronous standby or a lock) or the postmaster's death ends the
 * worker here, between two transactions, after it answered its callers.  A
 * static worker exits with 1, so the postmaster starts it again.
 */
static void
take_interrupts(void)
{
	if (ProcDiePending)
		proc_exit(static_worker ? 1 : 0);
	if (!PostmasterIsAlive())
		proc_exit(1);
	QueryCancelPending = false;
	(void) get_timeout_indicator(LOCK_TIMEOUT, true);
	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
		set_commit_mode();
	}
}

/*
 * Take the requests queued for the database behind the set-aside ones; a
 * purge request goes to purge.c.  Returns how many new entries the batch
 * has.  The set-aside ones are tried again this round if PKLIMIT_RETRY_MS
 * has passed since their last try.
 */
static int
gather(Batch *b, Oid dboid, int worker)
{
	int			ntaken;
	int			nnew = 0;

	b->nold = b->n;
	ntaken = pklimit_queue_take(dboid, worker, &b->entries[b->n],
								b->capacity - b->n);
	for (int i = b->n; i < b->n + ntaken; i++)
	{
		PklimitEntry *e = &b->entries[i];

		if (!pklimit_op_rules(e->request.kind).in_batch)
			pklimit_purge_take(e);
		else
		{
			b->entries[b->n + nnew] = *e;
			b->entries[b->n + nnew++].state = ENTRY_NEW;
		}
	}
	b->n += nnew;
	b->retry_due = (b->nold > 0 &&
					GetCurrentTimestamp() - b->tried >= PKLIMIT_RETRY_MS * 1000);
	return nnew;
}

/* Must new entry e wait with the set-aside entries? */
static bool
joins_set_aside(const Batch *b, const PklimitEntry *e)
{
	for (int d = 0; d < b->n; d++)
	{
		const PklimitEntry *o = &b->entries[d];

		if (o == e || (d >= b->nold && o->state != ENTRY_SET_ASIDE))
			continue;
		if (pklimit_waits_with(&e->request, &o->request))
			return true;
	}
	return false;
}

/*
 * New writes on a key with set-aside requests join them, untried, and so do
 * the other requests of their group, and the writes on those keys.
 */
static void
join_set_aside(Batch *b)
{
	bool		changed = (b->nold > 0);
	TimestampTz now = GetCurrentTimestamp();

	while (changed)
	{
		changed = false;
		for (int i = b->nold; i < b->n; i++)
		{
			PklimitEntry *e = &b->entries[i];

			if (e->state == ENTRY_NEW && joins_set_aside(b, e))
			{
				pklimit_set_aside(e, now);
				changed = true;
			}
		}
	}
}

/* Apply the entries of the batch in state, from first on. */
static void
apply(Batch *b, int first, PklimitEntryState state, int lock_wait_ms)
{
	PklimitEntry *list[PKLIMIT_BATCH_MAX];
	int			n = 0;

	for (int i = first; i < b->n; i++)
		if (b->entries[i].state == state)
			list[n++] = &b->entries[i];
	if (n > 0)
		pklimit_apply(list, n, lock_wait_ms, &session, b->context);
}

/*
 * Send the answers of the answered entries from first on to their callers
 * and take those entries out, keeping the order of the rest.
 */
static void
send_answers(Batch *b, int first)
{
	PklimitEntry *list[PKLIMIT_BATCH_MAX];
	int			n = 0;
	int			kept = first;

	for (int i = first; i < b->n; i++)
		if (b->entries[i].state == ENTRY_ANSWERED)
			list[n++] = &b->entries[i];
	if (n == 0)
		return;
	pklimit_queue_answer(list, n);
	for (int i = first; i < b->n; i++)
		if (b->entries[i].state != ENTRY_ANSWERED)
			b->entries[kept++] = b->entries[i];
	b->n = kept;
}

/*
 * The requests set aside in earlier rounds: tried again if it is time,
 * except those whose caller gave up, and answered lock_timeout once their
 * caller's budget allows no further try.
 */
static void
retry(Batch *b)
{
	TimestampTz now = GetCurrentTimestamp();

	if (b->retry_due)
		for (int d = 0; d < b->nold; d++)
			if (pklimit_queue_abandoned(b->entries[d].slot))
				b->entries[d].request.deadline = 0;
	/* a group whose caller gave up on one request gave up on all of them */
	for (int first = 0, next; first < b->nold; first = next)
	{
		TimestampTz deadline = b->entries[first].request.deadline;

		next = first + 1;
		pklimit_foreach_in_group(d, first, b->nold, BATCH_GROUP)
		{
			deadline = Min(deadline, b->entries[d].request.deadline);
			next = d + 1;
		}
		for (int d = first; d < next; d++)
			b->entries[d].request.deadline = deadline;
	}
	for (int d = 0; d < b->nold; d++)
	{
		PklimitEntry *e = &b->entries[d];

		pklimit_set_aside(e, now);
		if (e->state == ENTRY_SET_ASIDE && b->retry_due)
			e->state = ENTRY_RETRY;
	}
	apply(b, 0, ENTRY_RETRY, PKLIMIT_RETRY_LOCK_MS);
	if (b->retry_due)
		b->tried = GetCurrentTimestamp();
}

/*
 * Answer what is done and keep the set-aside entries in front for the next
 * round, at most half a batch so that keys that are not locked always have
 * room.  Their callers learn that a locked row holds them up.
 */
static void
keep(Batch *b)
{
	int			kept = 0;

	for (int i = 0, size; i < b->n; i += size)
	{
		PklimitEntry *e = &b->entries[i];

		size = 0;
		pklimit_foreach_in_group(k, i, b->n, BATCH_GROUP)
			size++;
		/* a group is kept, or answered, whole: its requests are together */
		if (e->state == ENTRY_SET_ASIDE &&
			kept + size > b->capacity / 2)
			pklimit_foreach_in_group(k, i, b->n, BATCH_GROUP)
				pklimit_answer_unapplied(&b->entries[k], PKLIMIT_LOCK_TIMEOUT);
		if (e->state == ENTRY_SET_ASIDE)
			kept += size;
	}
	send_answers(b, 0);
	if (b->n > 0)
	{
		PklimitEntry *list[PKLIMIT_BATCH_MAX];

		for (int i = 0; i < b->n; i++)
			list[i] = &b->entries[i];
		pklimit_queue_note_set_aside(list, b->n);
		if (b->nold == 0)
			b->tried = GetCurrentTimestamp();	/* newly set aside */
	}
}

/*
 * An idle worker leaves the registry, unless a request for its database
 * arrived meanwhile.  Returns true if the worker should now exit.
 */
static bool
retire(void)
{
	bool		idle;

	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	idle = !pklimit_queue_has_work(MyDatabaseId);
	if (idle)
		pklimit_registry_retire();
	LWLockRelease(pklimit_lock);
	return idle;
}

/*
 * Worker exit: answer what it had taken (no_worker), fail its running
 * purge, and leave the registry; a worker that retired holds no slot, and
 * its registration may be reused.  arg is its registry index.
 */
static void
detach(int code, Datum arg)
{
	LWLockReleaseAll();
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	if (pklimit_registry_detach(code != 0))
	{
		pklimit_queue_release_worker(DatumGetInt32(arg));
		pklimit_purge_fail_running();
	}
	LWLockRelease(pklimit_lock);
}

/* Claim the worker's registration (registry.c), and detach on exit. */
static Oid
attach(int worker, Oid static_dboid)
{
	Oid			dboid = pklimit_registry_attach(worker, static_dboid);

	if (OidIsValid(dboid))
		before_shmem_exit(detach, Int32GetDatum(worker));
	return dboid;
}

/*
 * Sleep until a request comes, a set-aside request or a purge step is due,
 * or the worker has been idle for pklimit.worker_idle_timeout, in which
 * case it leaves unless a request came meanwhile.
 */
static void
wait_for_work(const Batch *b, TimestampTz last_work)
{
	long		wait_ms;
	PklimitWait wait = PKLIMIT_WAIT_IDLE;

	wait_ms = (long) pklimit_worker_idle_timeout * 1000 -
		(GetCurrentTimestamp() - last_work) / 1000;
	if (b->n > 0 || pklimit_purge_running())
	{
		wait_ms = PKLIMIT_RETRY_MS; /* a locked row: try again soon */
		wait = PKLIMIT_WAIT_RETRY;
	}
	else if (pklimit_worker_idle_timeout == 0 || static_worker)
		wait_ms = -1;			/* never exit for idleness */
	else if (wait_ms <= 0)
	{
		if (retire())
			proc_exit(0);
		wait_ms = 1000;
	}
	if (pklimit_flush_wait_ms() >= 0 &&
		(wait_ms < 0 || pklimit_flush_wait_ms() < wait_ms))
		wait_ms = pklimit_flush_wait_ms();	/* the next flush */
	(void) WaitLatch(MyLatch,
					 WL_LATCH_SET | (wait_ms >= 0 ? WL_TIMEOUT : 0) |
					 WL_EXIT_ON_PM_DEATH,
					 wait_ms, pklimit_wait_event(wait));
	ResetLatch(MyLatch);
}

/*
 * On any exit but a crash (a termination, a shutdown, idleness, an error):
 * the database's memory is closed, so no memory call is acknowledged after
 * this, and what it holds is written a last time, committed locally (a
 * synchronous standby that is gone must not hold up the exit), before the
 * worker leaves the registry (detach runs after this), so that no successor
 * flushes beside it.  As PostgreSQL removes a session's temporary tables:
 * in a transaction of its own, with interrupts held (so nothing cancels it;
 * an error here ends the exit as FATAL, and the callbacks after it still
 * run).  Keys a take-out was writing when the exit cut it short are written
 * too.
 */
static void
final_flush(int code, Datum arg)
{
	LWLockReleaseAll();
	pklimit_memory_close();
	AbortOutOfAnyTransaction();
	pklimit_memory_stay_all();
	SetConfigOption("synchronous_commit", "local", PGC_SUSET, PGC_S_OVERRIDE);
	MemoryContextSwitchTo(AllocSetContextCreate(TopMemoryContext,
												"pklimit final flush",
												ALLOCSET_DEFAULT_SIZES));
	(void) pklimit_flush(&session, CurrentMemoryContext);
}

/* After the last flush, done or failed: the database has no worker now. */
static void
leave_memory(int code, Datum arg)
{
	pklimit_memory_detach();
}

/*
 * The worker's session: search_path pinned, and none of the database's or
 * role's settings that would change how events are kept.
 */
static void
set_up_session(void)
{
	/* pinned for the kept plans, and so no planted object is ever found */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET,
					PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET,
					PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET,
					PGC_S_OVERRIDE);
	SetConfigOption("row_security", "on", PGC_SUSET, PGC_S_OVERRIDE);
	/* an error on one batch, a lock timeout above all, must not end it */
	SetConfigOption("exit_on_error", "off", PGC_SUSET, PGC_S_OVERRIDE);
#ifdef PKLIMIT_HAS_TRANSACTION_TIMEOUT
	SetConfigOption("transaction_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
#endif
	/* Citus is loaded: its nodes get the worker's settings by SET LOCAL */
	if (GetConfigOption("citus.propagate_set_commands", true, false) != NULL)
	{
		SetConfigOption("citus.propagate_set_commands", "local", PGC_SUSET,
						PGC_S_OVERRIDE);
		session.on_citus = true;
	}
	set_commit_mode();
}

/*
 * Connect to the database that registry index worker serves: a static
 * worker's, named in pklimit.databases, or the one a caller registered it
 * for (the worker exits if that registration was given up meanwhile).
 */
static Oid
connect_to_database(int worker)
{
	Oid			dboid;

	if (pklimit_registry_static_database(worker) != NULL)
	{
		static_worker = true;
		BackgroundWorkerInitializeConnection(MyBgworkerEntry->bgw_extra,
											 NULL, 0);
		return attach(worker, MyDatabaseId);
	}
	dboid = attach(worker, InvalidOid);
	if (!OidIsValid(dboid))
		proc_exit(0);
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	return dboid;
}

/*
 * Between rounds: the flush, when due and before each purge step, so the
 * purge judges keys in memory by their state there; after a failed one,
 * the purge waits for the next that works, every flush interval.  Then a
 * purge step, if due.  *last_work moves on with work done; returns true if
 * the purge goes on at once.
 */
static bool
flush_and_purge(Batch *b, TimestampTz *last_work, bool *flushed)
{
	if (pklimit_flush_due() || (pklimit_purge_due() && *flushed))
	{
		int			written;

		MemoryContextSwitchTo(b->context);
		written = pklimit_flush(&session, b->context);
		*flushed = (written >= 0);
		if (written > 0)
			*last_work = GetCurrentTimestamp();
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(b->context);
	}
	if (pklimit_purge_due() && *flushed)
	{
		bool		goes_on = pklimit_purge_step(&session, b->context);

		*last_work = GetCurrentTimestamp();
		return goes_on;
	}
	return false;
}

void
pklimit_worker_main(Datum main_arg)
{
	int			worker = DatumGetInt32(main_arg);
	Oid			dboid;
	Batch	   *batch;
	TimestampTz last_work;
	bool		flushed = true; /* the last flush committed */

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	dboid = connect_to_database(worker);
	pgstat_report_appname("pklimit worker");
	set_up_session();
	pklimit_stats_add(PKLIMIT_STAT_WORKER_STARTS, 1);
	pklimit_memory_attach();
	before_shmem_exit(leave_memory, (Datum) 0);
	before_shmem_exit(final_flush, (Datum) 0);

	batch = MemoryContextAllocZero(TopMemoryContext, sizeof(Batch));
	batch->capacity = Min(PKLIMIT_BATCH_MAX, pklimit_queue_share());
	batch->context = AllocSetContextCreate(TopMemoryContext, "pklimit batch",
										   ALLOCSET_DEFAULT_SIZES);
	last_work = GetCurrentTimestamp();
	for (;;)
	{
		int			nnew;

		take_interrupts();
		nnew = gather(batch, dboid, worker);
		if (batch->n > 0)
		{
			MemoryContextSwitchTo(batch->context);
			join_set_aside(batch);
			apply(batch, batch->nold, ENTRY_NEW, PKLIMIT_BATCH_LOCK_MS);
			send_answers(batch, batch->nold);
			retry(batch);
			keep(batch);
			MemoryContextSwitchTo(TopMemoryContext);
			MemoryContextReset(batch->context);
			last_work = GetCurrentTimestamp();
		}
		if (flush_and_purge(batch, &last_work, &flushed))
			continue;
		if (nnew == 0)
			wait_for_work(batch, last_work);
	}
}
