/*-------------------------------------------------------------------------
 *
 * stats.c
 *		The statistics behind the pklimit_stats view: per-database counters
 *		of recording calls and how they were answered, the events and
 *		batches the worker recorded, worker starts and the callers' waiting
 *		time, kept in shared memory from server start (a crash restart
 *		re-initialises them) until pklimit_stats_reset(); and the SQL
 *		functions that read and reset them.  What counts where is decided by
 *		the callers (check.c, apply.c, worker.c); nothing here touches the
 *		table.
 *
 * A call adds 1 to exactly one counter of its answer (allowed, shadow
 * refused, refused, or one per unavailable reason): calls and unavailable
 * are their sums, made when read, so allowed + refused + unavailable =
 * calls holds in every reading, and a reset while calls count can only
 * miss whole calls.  An unavailable call answered allowed also adds 1 to
 * failed_open, after its reason; read first, it is never above unavailable
 * (but across a reset, as any other pair of counters).
 *
 * Locking: an entry's dboid, in_use and stats_reset are protected by
 * pklimit_lock (see pklimit.h).  A process claims its database's entry
 * before its first request or count, holding the lock exclusively, and
 * remembers it; the
 * entry goes back only when its database is dropped, when no process of
 * that database is left.  The counters are atomics, added to without any
 * lock, so counting costs a call no lock after the first.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xlog.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "commands/dbcommands.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "pklimit.h"

/*
 * Databases with an entry of their own; the databases beyond share one
 * more, shown with dbid 0.  Once that one is in use, it is used by every
 * database without an entry of its own until the server restarts, even
 * when a dropped database frees an entry: one database's counts are never
 * split between two rows.
 */
#define STATS_DATABASES 63

/* Columns of pklimit_stats(). */
#define STATS_COLUMNS 24

typedef struct StatsEntryData
{
	Oid			dboid;			/* InvalidOid: the shared entry */
	bool		in_use;
	TimestampTz stats_reset;	/* when its counting started */
	pg_atomic_uint64 counters[PKLIMIT_STAT_COUNT];
} StatsEntryData;

/* Entries a cache line apart: databases do not share one. */
typedef union StatsEntry
{
	StatsEntryData d;
	char		pad[TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(StatsEntryData))];
} StatsEntry;

static StatsEntry *entries = NULL;	/* STATS_DATABASES + 1 */
static StatsEntryData *my_entry = NULL; /* this process's database's */

Size
pklimit_stats_shmem_size(void)
{
	return mul_size(STATS_DATABASES + 1, sizeof(StatsEntry));
}

/* In shmem_startup, with AddinShmemInitLock held. */
void
pklimit_stats_shmem_init(void)
{
	bool		found;

	entries = ShmemInitStruct("pklimit stats", pklimit_stats_shmem_size(),
							  &found);
	if (found)
		return;
	memset(entries, 0, pklimit_stats_shmem_size());
	for (int i = 0; i <= STATS_DATABASES; i++)
		for (int c = 0; c < PKLIMIT_STAT_COUNT; c++)
			pg_atomic_init_u64(&entries[i].d.counters[c], 0);
}

static void
zero_counters(StatsEntryData *e)
{
	for (int c = 0; c < PKLIMIT_STAT_COUNT; c++)
		pg_atomic_write_u64(&e->counters[c], 0);
}

/*
 * The entry of this process's database, claimed on first use: its own, a
 * free one, or the shared one once every other is taken.
 */
static StatsEntryData *
entry(void)
{
	StatsEntryData *e = NULL;

	if (my_entry != NULL)
		return my_entry;
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int i = 0; i < STATS_DATABASES && e == NULL; i++)
		if (entries[i].d.in_use && entries[i].d.dboid == MyDatabaseId)
			e = &entries[i].d;
	for (int i = 0; i < STATS_DATABASES && e == NULL &&
		 !entries[STATS_DATABASES].d.in_use; i++)
		if (!entries[i].d.in_use)
			e = &entries[i].d;
	if (e == NULL)
		e = &entries[STATS_DATABASES].d;
	if (!e->in_use)
	{
		zero_counters(e);
		e->in_use = true;
		e->dboid = (e == &entries[STATS_DATABASES].d) ? InvalidOid :
			MyDatabaseId;
		e->stats_reset = GetCurrentTimestamp();
	}
	LWLockRelease(pklimit_lock);
	my_entry = e;
	return e;
}

/*
 * Claim this process's database's entry before its first request is
 * queued, so that pklimit_stats shows a database whose requests wait (its
 * queue_depth) before any of them is answered.
 */
void
pklimit_stats_claim(void)
{
	if (pklimit_preloaded())
		(void) entry();
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
	counter = &entry()->counters[stat];
	old = pg_atomic_read_u64(counter);
	while (!pg_atomic_compare_exchange_u64(counter, &old,
										   old > PG_UINT64_MAX - n ?
										   PG_UINT64_MAX : old + n))
		;						/* old now holds the value another wrote */
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
	counters = entry()->counters;
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

/* Free an entry of its own.  Lock held exclusively. */
static void
free_entry(StatsEntryData *e)
{
	zero_counters(e);
	e->in_use = false;
	e->dboid = InvalidOid;
}

/*
 * After DROP DATABASE: its entry is free again, its counts gone (a new
 * database could be given its OID).  No process of it is left to count.
 */
void
pklimit_stats_forget_database(Oid dboid)
{
	if (!pklimit_preloaded() || !OidIsValid(dboid))
		return;
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int i = 0; i < STATS_DATABASES; i++)
		if (entries[i].d.in_use && entries[i].d.dboid == dboid)
			free_entry(&entries[i].d);
	LWLockRelease(pklimit_lock);
}

/*
 * pklimit_stats_reset(dbid oid DEFAULT NULL): the counters of one database
 * (0: of the databases that share an entry), or of every database if NULL,
 * start again at 0 (a database counted in the shared entry is reset with
 * it: dbid 0).  On a standby, which replays DROP DATABASE without running
 * it, the entries of databases that no longer exist are freed.
 */
PG_FUNCTION_INFO_V1(pklimit_stats_reset);
Datum
pklimit_stats_reset(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		all = PG_ARGISNULL(0);
	Oid			dboid = all ? InvalidOid : PG_GETARG_OID(0);
	Oid			gone[STATS_DATABASES];
	int			ngone = 0;

	pklimit_check_preloaded();

	/*
	 * Catalog lookups before the lock: nothing may raise an error under it.
	 * Only a standby needs them (a primary frees an entry at DROP DATABASE).
	 */
	LWLockAcquire(pklimit_lock, LW_SHARED);
	for (int i = 0; i < STATS_DATABASES && RecoveryInProgress(); i++)
		if (entries[i].d.in_use)
			gone[ngone++] = entries[i].d.dboid;
	LWLockRelease(pklimit_lock);
	for (int g = 0; g < ngone;)
		if (SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(gone[g])))
			gone[g] = gone[--ngone];
		else
			g++;

	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int i = 0; i <= STATS_DATABASES; i++)
	{
		StatsEntryData *e = &entries[i].d;

		if (!e->in_use)
			continue;
		for (int g = 0; g < ngone && i < STATS_DATABASES; g++)
			if (e->dboid == gone[g])
				free_entry(e);
		if (!e->in_use || (!all && e->dboid != dboid))
			continue;
		zero_counters(e);
		e->stats_reset = now;
	}
	LWLockRelease(pklimit_lock);
	PG_RETURN_VOID();
}

/* One entry as pklimit_stats() shows it, copied under the lock. */
typedef struct StatsRow
{
	Oid			dboid;
	char	   *datname;		/* NULL: the shared entry */
	TimestampTz stats_reset;
	uint64		counters[PKLIMIT_STAT_COUNT];
	int64		queue_depth;
	pid_t		worker_pid;
} StatsRow;

/*
 * The counters of every database entry in use into rows[] (dboid,
 * stats_reset, counters) and their dboids into dboids[] (InvalidOid: the
 * shared entry).  Returns how many.  pklimit_lock held.
 */
static int
read_entries(StatsRow *rows, Oid *dboids)
{
	int			n = 0;

	for (int i = 0; i <= STATS_DATABASES; i++)
	{
		StatsEntryData *e = &entries[i].d;

		if (!e->in_use)
			continue;
		rows[n].dboid = e->dboid;
		rows[n].stats_reset = e->stats_reset;
		/* failed_open is added after its reason: read first, never above it */
		rows[n].counters[PKLIMIT_STAT_FAILED_OPEN] =
			pg_atomic_read_u64(&e->counters[PKLIMIT_STAT_FAILED_OPEN]);
		pg_read_barrier();
		for (int c = 0; c < PKLIMIT_STAT_COUNT; c++)
			if (c != PKLIMIT_STAT_FAILED_OPEN)
				rows[n].counters[c] = pg_atomic_read_u64(&e->counters[c]);
		dboids[n] = e->dboid;
		n++;
	}
	return n;
}

static Datum
counter_datum(uint64 value)
{
	return Int64GetDatum((int64) Min(value, (uint64) PG_INT64_MAX));
}

/* Sum of the counters from first to last, saturating. */
static uint64
counters_sum(const uint64 *c, PklimitStat first, PklimitStat last)
{
	uint64		sum = 0;

	for (int s = first; s <= last; s++)
		sum = (sum > PG_UINT64_MAX - c[s]) ? PG_UINT64_MAX : sum + c[s];
	return sum;
}

/* The columns of one row of pklimit_stats(). */
static void
stats_columns(const StatsRow *row, Datum *values, bool *nulls)
{
	const uint64 *c = row->counters;
	uint64		calls = counters_sum(c, PKLIMIT_STAT_ALLOWED,
									 PKLIMIT_STAT_ERRORS);
	int			i = 0;

	values[i++] = ObjectIdGetDatum(row->dboid);
	if (row->datname == NULL)
		nulls[i++] = true;
	else
	{
		NameData   *datname = palloc(sizeof(NameData));

		namestrcpy(datname, row->datname);
		values[i++] = NameGetDatum(datname);
	}
	values[i++] = counter_datum(calls);
	values[i++] = counter_datum(counters_sum(c, PKLIMIT_STAT_ALLOWED,
											 PKLIMIT_STAT_SHADOW_REFUSED));
	values[i++] = counter_datum(c[PKLIMIT_STAT_REFUSED]);
	values[i++] = counter_datum(counters_sum(c, PKLIMIT_STAT_TIMEOUTS,
											 PKLIMIT_STAT_ERRORS));
	values[i++] = counter_datum(c[PKLIMIT_STAT_FAILED_OPEN]);
	for (int s = PKLIMIT_STAT_TIMEOUTS; s <= PKLIMIT_STAT_ERRORS; s++)
		values[i++] = counter_datum(c[s]);
	values[i++] = counter_datum(c[PKLIMIT_STAT_SHADOW_REFUSED]);
	values[i++] = counter_datum(c[PKLIMIT_STAT_EVENTS]);
	values[i++] = counter_datum(c[PKLIMIT_STAT_BATCHES]);
	values[i++] = counter_datum(c[PKLIMIT_STAT_WORKER_STARTS]);
	values[i++] = Int64GetDatum(row->queue_depth);
	nulls[i] = (row->worker_pid == 0);
	values[i++] = Int32GetDatum(row->worker_pid);
	values[i++] = Float8GetDatum((double) c[PKLIMIT_STAT_WAIT_USEC] / 1000.0);
	nulls[i] = (calls == 0);
	/* to the microsecond, as the others */
	values[i++] = Float8GetDatum(calls == 0 ? 0.0 :
								 rint((double) c[PKLIMIT_STAT_WAIT_USEC] / calls) / 1000.0);
	nulls[i] = (calls == 0);
	values[i++] = Float8GetDatum((double) c[PKLIMIT_STAT_MAX_WAIT_USEC] / 1000.0);
	values[i++] = TimestampTzGetDatum(row->stats_reset);
	Assert(i == STATS_COLUMNS);
}

/*
 * pklimit_stats(): a row per database that has counted anything since the
 * server started or the last reset, or has a worker or waiting requests
 * now, with its name (none for the shared entry).  The entries are copied under the lock, held shared, in one pass
 * over the queue; the rows are made after it is released.
 */
PG_FUNCTION_INFO_V1(pklimit_stats);
Datum
pklimit_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StatsRow   *rows = palloc0(sizeof(StatsRow) * (STATS_DATABASES + 1));
	Oid			dboids[STATS_DATABASES + 1];
	int64		depths[STATS_DATABASES + 1];
	int			n = 0;

	pklimit_check_preloaded();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(pklimit_lock, LW_SHARED);
	n = read_entries(rows, dboids);
	for (int r = 0; r < n; r++)
		rows[r].worker_pid = OidIsValid(rows[r].dboid) ?
			pklimit_registry_worker_pid(rows[r].dboid) : 0;
	pklimit_queue_depths(dboids, depths, n);
	LWLockRelease(pklimit_lock);

	for (int r = 0; r < n; r++)
	{
		Datum		values[STATS_COLUMNS];
		bool		nulls[STATS_COLUMNS] = {0};
		bool		counted = false;

		rows[r].queue_depth = depths[r];
		for (int c = 0; c < PKLIMIT_STAT_COUNT; c++)
			counted |= (rows[r].counters[c] != 0);
		if (!counted && rows[r].queue_depth == 0 && rows[r].worker_pid == 0)
			continue;
		if (OidIsValid(rows[r].dboid))
		{
			rows[r].datname = get_database_name(rows[r].dboid);
			if (rows[r].datname == NULL)
				continue;		/* dropped, as a standby replayed it */
		}
		stats_columns(&rows[r], values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* Columns of pklimit_memory_stats(). */
#define MEMORY_STATS_COLUMNS 9

/*
 * pklimit_memory_stats(): the memory path's columns of pklimit_stats, per
 * database entry in use (docs/memory.md): calls decided in memory, keys
 * read in, memory calls applied durably, entries given back, flushes and
 * the rows they wrote, the entries held now and the flush lag (NULL while
 * memory is closed or unused).
 */
PG_FUNCTION_INFO_V1(pklimit_memory_stats);
Datum
pklimit_memory_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StatsRow   *rows = palloc0(sizeof(StatsRow) * (STATS_DATABASES + 1));
	Oid			dboids[STATS_DATABASES + 1];
	int			n;

	pklimit_check_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(pklimit_lock, LW_SHARED);
	n = read_entries(rows, dboids);
	LWLockRelease(pklimit_lock);

	for (int r = 0; r < n; r++)
	{
		Datum		values[MEMORY_STATS_COLUMNS];
		bool		nulls[MEMORY_STATS_COLUMNS] = {0};
		int64		held;
		double		lag_ms;
		int			i = 0;

		pklimit_memory_database_stats(dboids[r], &held, &lag_ms);
		values[i++] = ObjectIdGetDatum(dboids[r]);
		for (int c = PKLIMIT_STAT_MEMORY_CALLS; c < PKLIMIT_STAT_COUNT; c++)
			values[i++] = counter_datum(rows[r].counters[c]);
		values[i++] = Int64GetDatum(held);
		nulls[i] = (lag_ms < 0);
		values[i++] = Float8GetDatum(Max(lag_ms, 0));
		Assert(i == MEMORY_STATS_COLUMNS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
