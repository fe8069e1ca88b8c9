/*-------------------------------------------------------------------------
 *
 * stats.h
 *		The counters of pklimit_stats, per database (stats.c), which any
 *		process adds to, and their reading for the SQL functions that show
 *		them (statsfuncs.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_STATS_H
#define PKLIMIT_STATS_H

#include "request.h"

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
	PKLIMIT_STAT_MEMORY_HITS,	/* memory calls that found every key in memory
								 * (memory/keys.c) */
	PKLIMIT_STAT_MEMORY_MISSES, /* memory calls that found one missing
								 * (memory/batch.c) */
	PKLIMIT_STAT_MEMORY_REFUSALS,	/* keys not read in, as the admission rule
									 * kept the keys in memory
									 * (memory/batch.c) */
	PKLIMIT_STAT_COUNT
} PklimitStat;

/* One database's counters as read at one moment. */
typedef struct PklimitCounts
{
	Oid			dboid;			/* InvalidOid: the shared counters */
	TimestampTz stats_reset;	/* when their counting started */
	uint64		counters[PKLIMIT_STAT_COUNT];
} PklimitCounts;

extern Size pklimit_stats_shmem_size(void);
extern void pklimit_stats_shmem_init(void);
extern void pklimit_stats_claim(void);
extern void pklimit_stats_add(PklimitStat stat, uint64 n);
extern uint64 pklimit_stats_get(PklimitStat stat);
extern void pklimit_stats_call(PklimitStatus status, bool allowed, bool shadow,
							   TimestampTz started);
extern void pklimit_stats_forget_database(Oid dboid);
extern int	pklimit_stats_read(PklimitCounts *counts);

#endif							/* PKLIMIT_STATS_H */
