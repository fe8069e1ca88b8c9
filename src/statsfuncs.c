/*-------------------------------------------------------------------------
 *
 * statsfuncs.c
 *		The SQL functions that show the statistics: pklimit_stats, each
 *		database's counters (stats.c) beside its queue depth (queue.c) and
 *		its worker (registry.c), and pklimit_memory_stats, the memory
 *		path's counters beside the keys its database holds in memory and
 *		its flush lag (memory.h).  They only read; the counters are kept
 *		and reset by stats.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "commands/dbcommands.h"
#include "fmgr.h"
#include "funcapi.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "memory.h"
#include "queue.h"
#include "registry.h"
#include "settings.h"
#include "stats.h"

/* Rows pklimit_stats() can show: every database's counters and the shared. */
#define STATS_ROWS (PKLIMIT_STATS_DATABASES + 1)

/* Columns of pklimit_stats(). */
#define STATS_COLUMNS 24

/* One database's row of pklimit_stats(), copied under the lock. */
typedef struct StatsRow
{
	PklimitCounts counts;
	char	   *datname;		/* NULL: the shared counters */
	int64		queue_depth;
	pid_t		worker_pid;
} StatsRow;

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
	const uint64 *c = row->counts.counters;
	uint64		calls = counters_sum(c, PKLIMIT_STAT_ALLOWED,
									 PKLIMIT_STAT_ERRORS);
	int			i = 0;

	values[i++] = ObjectIdGetDatum(row->counts.dboid);
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
	values[i++] = TimestampTzGetDatum(row->counts.stats_reset);
	Assert(i == STATS_COLUMNS);
}

/*
 * The rows of pklimit_stats(), copied under the lock, held shared, in one
 * pass over the queue.  Returns how many.
 */
static int
read_rows(StatsRow *rows)
{
	PklimitCounts counts[STATS_ROWS];
	Oid			dboids[STATS_ROWS];
	int64		depths[STATS_ROWS];
	int			n;

	LWLockAcquire(pklimit_lock, LW_SHARED);
	n = pklimit_stats_read(counts);
	for (int r = 0; r < n; r++)
	{
		rows[r].counts = counts[r];
		dboids[r] = counts[r].dboid;
		rows[r].worker_pid = OidIsValid(counts[r].dboid) ?
			pklimit_registry_worker_pid(counts[r].dboid) : 0;
	}
	pklimit_queue_depths(dboids, depths, n);
	LWLockRelease(pklimit_lock);
	for (int r = 0; r < n; r++)
		rows[r].queue_depth = depths[r];
	return n;
}

/*
 * pklimit_stats(): a row per database that has counted anything since the
 * server started or the last reset, or has a worker or waiting requests
 * now, with its name (none for the shared counters).  The rows are made
 * after the lock is released.
 */
PG_FUNCTION_INFO_V1(pklimit_stats);
Datum
pklimit_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StatsRow   *rows = palloc0(sizeof(StatsRow) * STATS_ROWS);
	int			n;

	pklimit_check_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	n = read_rows(rows);
	for (int r = 0; r < n; r++)
	{
		Datum		values[STATS_COLUMNS];
		bool		nulls[STATS_COLUMNS] = {0};
		bool		counted = false;
		Oid			dboid = rows[r].counts.dboid;

		for (int c = 0; c < PKLIMIT_STAT_COUNT; c++)
			counted |= (rows[r].counts.counters[c] != 0);
		if (!counted && rows[r].queue_depth == 0 && rows[r].worker_pid == 0)
			continue;
		if (OidIsValid(dboid))
		{
			rows[r].datname = get_database_name(dboid);
			if (rows[r].datname == NULL)
				continue;		/* dropped, as a standby replayed it */
		}
		stats_columns(&rows[r], values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * Columns of pklimit_memory_stats(): 0.3.0's nine, then 0.4.0's hits,
 * misses and admissions refused, which its function of 0.4.0 has.
 */
#define MEMORY_STATS_COLUMNS_0_3 9
#define MEMORY_STATS_COLUMNS 12

/*
 * pklimit_memory_stats(): the memory path's columns of pklimit_stats, per
 * database with counters in use (docs/memory.md): calls decided in memory,
 * keys read in, memory calls applied durably, keys given back, flushes and
 * the rows they wrote, the keys held now and the flush lag (NULL while
 * memory is closed or unused); from 0.4.0 also the memory calls that found
 * their keys in memory (hits) and those that did not (misses), and the
 * keys the admission rule kept out.  A database still at 0.3.0 declares
 * the first nine columns: its rows are formed of those alone.
 */
PG_FUNCTION_INFO_V1(pklimit_memory_stats);
Datum
pklimit_memory_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	PklimitCounts *counts = palloc0(sizeof(PklimitCounts) * STATS_ROWS);
	int			n;

	pklimit_check_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(pklimit_lock, LW_SHARED);
	n = pklimit_stats_read(counts);
	LWLockRelease(pklimit_lock);

	for (int r = 0; r < n; r++)
	{
		Datum		values[MEMORY_STATS_COLUMNS];
		bool		nulls[MEMORY_STATS_COLUMNS] = {0};
		int64		held;
		double		lag_ms;
		int			i = 0;

		pklimit_memory_database_stats(counts[r].dboid, &held, &lag_ms);
		values[i++] = ObjectIdGetDatum(counts[r].dboid);
		for (int c = PKLIMIT_STAT_MEMORY_CALLS; c <= PKLIMIT_STAT_ROWS_FLUSHED; c++)
			values[i++] = counter_datum(counts[r].counters[c]);
		values[i++] = Int64GetDatum(held);
		nulls[i] = (lag_ms < 0);
		values[i++] = Float8GetDatum(Max(lag_ms, 0));
		Assert(i == MEMORY_STATS_COLUMNS_0_3);
		for (int c = PKLIMIT_STAT_MEMORY_HITS; c < PKLIMIT_STAT_COUNT; c++)
			values[i++] = counter_datum(counts[r].counters[c]);
		Assert(i == MEMORY_STATS_COLUMNS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
