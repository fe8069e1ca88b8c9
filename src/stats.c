/*-------------------------------------------------------------------------
 *
 * stats.c
 *		The counters behind the pklimit_stats view: per database, the
 *		recording calls and how they were answered, the events and batches
 *		recorded, worker starts, the callers' waiting time and the memory
 *		path's calls, reads, fallbacks, evictions and flushes, kept in
 *		shared memory from server start (a crash restart re-initialises
 *		them) until pklimit_stats_reset(), the SQL function that resets
 *		them here; and their reading, which statsfuncs.c shows.  What counts
 *		where is decided by the callers, one place a counter (stats.h says
 *		which): check.c (calls, waits, shadow mode), apply.c (events,
 *		batches), worker.c (starts), and for the memory path memory/keys.c
 *		(calls decided in memory and their events), memory/batch.c (reads,
 *		fallbacks), memory/databases.c (evictions) and memory/flush.c
 *		(flushes).  Nothing here touches the table, the queue or the
 *		memory path.
 *
 * A call adds 1 to exactly one counter of its answer (allowed, shadow
 * refused, refused, or one per unavailable reason): calls and unavailable
 * are their sums, made when read, so allowed + refused + unavailable =
 * calls holds in every reading, and a reset while calls count can only
 * miss whole calls.  An unavailable call answered allowed also adds 1 to
 * failed_open, after its reason; read first, it is never above unavailable
 * (but across a reset, as any other pair of counters).
 *
 * Locking: a set of counters' dboid, in_use and stats_reset are protected
 * by pklimit_lock (settings.h).  A process claims its database's counters
 * before its first request or count, holding the lock exclusively, and
 * remembers them; they go back only when their database is dropped, when
 * no process of that database is left.  The counters are atomics, added to
 * without any lock, so counting costs a call no lock after the first.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "settings.h"
#include "stats.h"

/*
 * The counters of one database.  PKLIMIT_STATS_DATABASES databases have
 * their own; the databases beyond share one set more, shown with dbid 0.
 * Once that one is in use, it is used by every database without counters
 * of its own until the server restarts, even when a dropped database frees
 * its own: one database's counts are never split between two rows.
 */
typedef struct StatsCounters
{
	Oid			dboid;			/* InvalidOid: the shared counters */
	bool		in_use;
	TimestampTz stats_reset;	/* when its counting started */
	pg_atomic_uint64 counters[PKLIMIT_STAT_COUNT];
} StatsCounters;

/* Each database's counters a cache line apart: databases do not share one. */
typedef union StatsCountersPadded
{
	StatsCounters d;
	char		pad[TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(StatsCounters))];
} StatsCountersPadded;

/* The index of the shared counters, after every database's own. */
#define SHARED_COUNTERS PKLIMIT_STATS_DATABASES

static StatsCountersPadded *databases = NULL;	/* SHARED_COUNTERS + 1 */
static StatsCounters *my_counters = NULL;	/* this process's database's */

Size
pklimit_stats_shmem_size(void)
{
	return mul_size(SHARED_COUNTERS + 1, sizeof(StatsCountersPadded));
}

/* In shmem_startup, with AddinShmemInitLock held. */
void
pklimit_stats_shmem_init(void)
{
	bool		found;

	databases = ShmemInitStruct("pklimit stats", pklimit_stats_shmem_size(),
								&found);
	if (found)
		return;
	memset(databases, 0, pklimit_stats_shmem_size());
	for (int i = 0; i <= SHARED_COUNTERS; i++)
		for (int c = 0; c < PKLIMIT_STAT_COUNT; c++)
			pg_atomic_init_u64(&databases[i].d.counters[c], 0);
}

static void
zero_counters(StatsCounters *e)
{
	for (int c = 0; c < PKLIMIT_STAT_COUNT; c++)
		pg_atomic_write_u64(&e->counters[c], 0);
}

/*
 * The counters of this process's database, claimed on first use: its own,
 * a free set, or the shared counters once every other set is taken.
 */
static StatsCounters *
my_database_counters(void)
{
	StatsCounters *e = NULL;

	if (my_counters != NULL)
		return my_counters;
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int i = 0; i < PKLIMIT_STATS_DATABASES && e == NULL; i++)
		if (databases[i].d.in_use && databases[i].d.dboid == MyDatabaseId)
			e = &databases[i].d;
	for (int i = 0; i < PKLIMIT_STATS_DATABASES && e == NULL &&
		 !databases[SHARED_COUNTERS].d.in_use; i++)
		if (!databases[i].d.in_use)
			e = &databases[i].d;
	if (e == NULL)
		e = &databases[SHARED_COUNTERS].d;
	if (!e->in_use)
	{
		zero_counters(e);
		e->in_use = true;
		e->dboid = (e == &databases[SHARED_COUNTERS].d) ? InvalidOid :
			MyDatabaseId;
		e->stats_reset = GetCurrentTimestamp();
	}
	LWLockRelease(pklimit_lock);
	my_counters = e;
	return e;
}

/*
 * Claim this process's database's counters before its first request is
 * queued, so that pklimit_stats shows a database whose requests wait (its
 * queue_depth) before any of them is answered.
 */
void
pklimit_stats_claim(void)
{
	if (pklimit_preloaded())
		(void) my_database_counters();
}

/*
 * Add n to a counter of this database, saturating: the costs of a few calls
 * can add up to more than any counter holds.  For the worker's counters, a
 * few times per batch; the worker counts events only of the calls whose
 * caller had pklimit.track_stats on.
 */
void
pklimit_stats_add(PklimitStat stat, uint64 n)
{
	pg_atomic_uint64 *counter;
	uint64		old;

	if (!pklimit_preloaded() || n == 0)
		return;
	counter = &my_database_counters()->counters[stat];
	old = pg_atomic_read_u64(counter);
	while (!pg_atomic_compare_exchange_u64(counter, &old,
										   old > PG_UINT64_MAX - n ?
										   PG_UINT64_MAX : old + n))
		;						/* old now holds the value another wrote */
}

/* A counter of this database, as it is now. */
uint64
pklimit_stats_get(PklimitStat stat)
{
	if (!pklimit_preloaded())
		return 0;
	return pg_atomic_read_u64(&my_database_counters()->counters[stat]);
}

/* The counter of a call's answer, by the store's status. */
static PklimitStat
answer_counter(PklimitStatus status, bool allowed, bool shadow)
{
	switch (status)
	{
		case PKLIMIT_OK:
			return allowed ? PKLIMIT_STAT_ALLOWED :
				shadow ? PKLIMIT_STAT_SHADOW_REFUSED : PKLIMIT_STAT_REFUSED;
		case PKLIMIT_TIMEOUT:
			return PKLIMIT_STAT_TIMEOUTS;
		case PKLIMIT_QUEUE_FULL:
			return PKLIMIT_STAT_QUEUE_FULL;
		case PKLIMIT_NO_WORKER:
			return PKLIMIT_STAT_NO_WORKER;
		case PKLIMIT_READ_ONLY:
			return PKLIMIT_STAT_READ_ONLY;
		case PKLIMIT_LOCK_TIMEOUT:
			return PKLIMIT_STAT_LOCK_TIMEOUTS;
		case PKLIMIT_NO_TABLE:
			return PKLIMIT_STAT_NO_TABLE;
		case PKLIMIT_APPLY_ERROR:
			break;
	}
	return PKLIMIT_STAT_ERRORS;
}

/*
 * Count one recording call (nothing with pklimit.track_stats off), however
 * many keys it named: the store's status (PKLIMIT_OK: it answered), whether
 * it was allowed (by the store, or by pklimit.on_unavailable when the store
 * was not reached: it failed open), whether shadow mode allowed it instead
 * of refusing, and when the caller started waiting.
 */
void
pklimit_stats_call(PklimitStatus status, bool allowed, bool shadow,
				   TimestampTz started)
{
	pg_atomic_uint64 *counters;
	uint64		waited;
	uint64		max;

	if (!pklimit_track_stats || !pklimit_preloaded())
		return;
	waited = (uint64) Max(GetCurrentTimestamp() - started, 0);
	counters = my_database_counters()->counters;
	pg_atomic_fetch_add_u64(&counters[answer_counter(status, allowed, shadow)], 1);
	if (status != PKLIMIT_OK && allowed)
		pg_atomic_fetch_add_u64(&counters[PKLIMIT_STAT_FAILED_OPEN], 1);
	pg_atomic_fetch_add_u64(&counters[PKLIMIT_STAT_WAIT_USEC], waited);
	max = pg_atomic_read_u64(&counters[PKLIMIT_STAT_MAX_WAIT_USEC]);
	while (max < waited &&
		   !pg_atomic_compare_exchange_u64(&counters[PKLIMIT_STAT_MAX_WAIT_USEC],
										   &max, waited))
		;						/* max now holds the value another wrote */
}

/* Free a database's own counters.  Lock held exclusively. */
static void
free_counters(StatsCounters *e)
{
	zero_counters(e);
	e->in_use = false;
	e->dboid = InvalidOid;
}

/*
 * After DROP DATABASE: its counters are free again, its counts gone (a new
 * database could be given its OID).  No process of it is left to count.
 */
void
pklimit_stats_forget_database(Oid dboid)
{
	if (!pklimit_preloaded() || !OidIsValid(dboid))
		return;
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int i = 0; i < PKLIMIT_STATS_DATABASES; i++)
		if (databases[i].d.in_use && databases[i].d.dboid == dboid)
			free_counters(&databases[i].d);
	LWLockRelease(pklimit_lock);
}

/*
 * pklimit_stats_reset(dbid oid DEFAULT NULL): the counters of one database
 * (0: of the databases that share the shared counters), or of every
 * database if NULL, start again at 0 (a database counted in the shared
 * counters is reset with them: dbid 0).  On a standby, which replays DROP
 * DATABASE without running it, the counters of databases that no longer
 * exist are freed.
 */
PG_FUNCTION_INFO_V1(pklimit_stats_reset);
Datum
pklimit_stats_reset(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		all = PG_ARGISNULL(0);
	Oid			dboid = all ? InvalidOid : PG_GETARG_OID(0);
	Oid			gone[PKLIMIT_STATS_DATABASES];
	int			ngone = 0;

	pklimit_check_preloaded();

	/*
	 * Catalog lookups before the lock: nothing may raise an error under it.
	 * Only a standby needs them (a primary frees counters at DROP DATABASE).
	 */
	LWLockAcquire(pklimit_lock, LW_SHARED);
	for (int i = 0; i < PKLIMIT_STATS_DATABASES && RecoveryInProgress(); i++)
		if (databases[i].d.in_use)
			gone[ngone++] = databases[i].d.dboid;
	LWLockRelease(pklimit_lock);
	for (int g = 0; g < ngone;)
		if (SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(gone[g])))
			gone[g] = gone[--ngone];
		else
			g++;

	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int i = 0; i <= SHARED_COUNTERS; i++)
	{
		StatsCounters *e = &databases[i].d;

		if (!e->in_use)
			continue;
		for (int g = 0; g < ngone && i < SHARED_COUNTERS; g++)
			if (e->dboid == gone[g])
				free_counters(e);
		if (!e->in_use || (!all && e->dboid != dboid))
			continue;
		zero_counters(e);
		e->stats_reset = now;
	}
	LWLockRelease(pklimit_lock);
	PG_RETURN_VOID();
}


/*
 * The counters of every database in use into counts[] (at most
 * PKLIMIT_STATS_DATABASES + 1).  Returns how many.  Lock held.
 */
int
pklimit_stats_read(PklimitCounts *counts)
{
	int			n = 0;

	for (int i = 0; i <= SHARED_COUNTERS; i++)
	{
		StatsCounters *e = &databases[i].d;

		if (!e->in_use)
			continue;
		counts[n].dboid = e->dboid;
		counts[n].stats_reset = e->stats_reset;
		/* failed_open is added after its reason: read first, never above it */
		counts[n].counters[PKLIMIT_STAT_FAILED_OPEN] =
			pg_atomic_read_u64(&e->counters[PKLIMIT_STAT_FAILED_OPEN]);
		pg_read_barrier();
		for (int c = 0; c < PKLIMIT_STAT_COUNT; c++)
			if (c != PKLIMIT_STAT_FAILED_OPEN)
				counts[n].counters[c] = pg_atomic_read_u64(&e->counters[c]);
		n++;
	}
	return n;
}
