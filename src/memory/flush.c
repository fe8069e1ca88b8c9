/*-------------------------------------------------------------------------
 *
 * flush.c
 *		The memory path's writes to platformkit_limits, in the worker's
 *		transactions: the flush, which writes its database's changed keys
 *		every pklimit.flush_interval and when the worker exits, and opens
 *		memory for calls once it committed; and the take-out, the same
 *		transaction for the keys of durable calls, which leave memory after
 *		its commit (batch.c asks for it).  The keys are collected by
 *		inout.c, the statements are store.c's, the transactions xact.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guards.h"
#include "memory_private.h"
#include "stats.h"

/* Rows one statement of a flush writes. */
#define FLUSH_ROWS 1000

/* When the last flush started; 0: none yet, so one is due. */
static TimestampTz last_flush = 0;

/*
 * Microseconds since the last flush started; a clock stepped back before it
 * counts as a whole interval, so the flush runs at once and its start sets
 * flushed_through by the new clock (memory calls fall back meanwhile).
 */
static int64
since_last_flush(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (now < last_flush)
		return (int64) pklimit_flush_interval * 1000;
	return now - last_flush;
}

bool
pklimit_flush_due(void)
{
	return pklimit_memory_keys > 0 &&
		since_last_flush() >= (int64) pklimit_flush_interval * 1000;
}

/* Milliseconds until the next flush is due; -1: never (no memory path). */
long
pklimit_flush_wait_ms(void)
{
	int64		left;

	if (pklimit_memory_keys == 0)
		return -1;
	left = (int64) pklimit_flush_interval * 1000 - since_last_flush();
	return (long) Max(left / 1000, 0);
}

/*
 * Write the copies to be written, FLUSH_ROWS a statement; returns how many.
 * With shard (on Citus), only those whose keys that shard holds (shard_of
 * says which holds each), each only over the row version this node last
 * had: a copy whose row another node wrote meanwhile is not written, and is
 * marked in dropped[].  A copy written records the version it wrote.
 */
static int
write_copies(const PklimitTable *table, const PklimitShard *shard,
			 PklimitShard *const *shard_of, MemoryCopy *copies, int n,
			 bool *dropped)
{
	const char **keys = palloc(sizeof(char *) * FLUSH_ROWS);
	PklimitRow *rows = palloc(sizeof(PklimitRow) * FLUSH_ROWS);
	bool	   *synced = palloc(sizeof(bool) * FLUSH_ROWS);
	TransactionId *synced_xmin = palloc(sizeof(TransactionId) * FLUSH_ROWS);
	bool	   *written = palloc(sizeof(bool) * FLUSH_ROWS);
	int		   *index = palloc(sizeof(int) * FLUSH_ROWS);
	int			nwritten = 0;
	int			m = 0;

	for (int i = 0; i <= n; i++)
	{
		if (i < n)
		{
			if (!copies[i].write || (shard != NULL && shard_of[i] != shard))
				continue;
			keys[m] = copies[i].stored_key;
			rows[m] = copies[i].row;
			synced[m] = copies[i].synced;
			synced_xmin[m] = copies[i].synced_xmin;
			index[m++] = i;
		}
		if (m == FLUSH_ROWS || (i == n && m > 0))
		{
			pklimit_store_flush(table, shard, keys, rows, m,
								shard ? synced : NULL, synced_xmin, written);
			for (int j = 0; j < m; j++)
			{
				MemoryCopy *c = &copies[index[j]];

				if (shard == NULL || written[j])
				{
					nwritten++;
					c->synced_xmin = GetCurrentTransactionId();
				}
				else
				{
					c->write = false;
					dropped[index[j]] = true;
				}
			}
			m = 0;
		}
	}
	pfree(keys);
	pfree(rows);
	pfree(synced);
	pfree(synced_xmin);
	pfree(written);
	pfree(index);
	return nwritten;
}

/*
 * On a table Citus distributes by key: the copies written on the shards of
 * this node that hold them, each shard held here for the transaction
 * (citus.c), and each row only over the version this node last had.  A key
 * whose shard is no longer here (moved to another node since it was read
 * in), or whose row was written meanwhile by a call made on another node
 * (through Citus), or deleted (a purge, a forget), is not written: a write
 * of this state would overwrite counts this node has not seen.  Its copy
 * is marked in *dropped, and it leaves memory after the commit: its events
 * since the last flush are lost, as at a crash.  Returns how many were
 * written.
 */
static int
write_copies_on_shards(PklimitTable *table, MemoryCopy *copies, int n,
					   bool *dropped)
{
	const char **keys = palloc(sizeof(char *) * Max(n, 1));
	PklimitShard **shard_of = palloc(sizeof(PklimitShard *) * Max(n, 1));
	int			written = 0;

	for (int i = 0; i < n; i++)
		keys[i] = copies[i].stored_key;
	if (!pklimit_shards_prepare(table, keys, n, shard_of))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("pklimit could not hold the shards of its keys in memory: Citus moved them meanwhile")));
	for (int i = 0; i < n; i++)
	{
		/* none where the table is not distributed by key (any longer) */
		if (shard_of[i] == NULL)
		{
			dropped[i] = true;
			copies[i].write = false;
		}
	}
	for (int s = 0; table->shards != NULL && s < table->shards->nshards; s++)
	{
		const PklimitShard *shard = &table->shards->shards[s];

		if (shard->local && shard->locked)
			written += write_copies(table, shard, shard_of, copies, n, dropped);
	}
	pfree(keys);
	pfree(shard_of);
	return written;
}

/*
 * The Citus shard map as of the last committed flush that looked at every
 * key in memory (pklimit_shards_generation()): a map changed since may have
 * moved unchanged keys' shards away too.
 */
static uint64 shards_checked = PG_UINT64_MAX;

/*
 * In the transaction begun: pklimit's table found, and this database's keys
 * (every changed one, or those of the n requests) collected into *copies,
 * in memory_context so that they outlive an abort; on Citus after the shard
 * map changed, every key, so that those whose shards moved away leave
 * memory (*generation: the map's, for shards_checked).  Returns how many.
 */
static int
collect(PklimitSession *session, MemoryContext memory_context,
		const PklimitRequest *requests, int n, PklimitTable *table,
		MemoryCopy **copies, uint64 *generation)
{
	Oid			nspid = pklimit_extension_namespace();
	MemoryContext old;
	int			ncopies;

	if (OidIsValid(nspid))
		pklimit_table_open(nspid, session->on_citus, table);
	*generation = pklimit_shards_generation();
	old = MemoryContextSwitchTo(memory_context);
	ncopies = pklimit_memory_collect(copies,
									 table->version >= 3 ? table->relid :
									 InvalidOid, requests, n,
									 table->citus && requests == NULL &&
									 *generation != shards_checked);
	MemoryContextSwitchTo(old);
	return ncopies;
}

/*
 * One transaction that writes this database's keys: every changed one (the
 * flush), or (with requests: a take-out) those of the n requests' keys,
 * which leave memory after its commit.  Returns false, with *error saying
 * why, if it did not commit; keys of a table that is not pklimit's now are
 * discarded.
 */
bool
pklimit_memory_write_out(PklimitSession *session, MemoryContext memory_context,
						 const PklimitRequest *requests, int n,
						 ErrorData **error, int *nwritten)
{
	MemoryCopy *volatile copies = NULL;
	bool	   *volatile dropped = NULL;
	volatile uint64 generation = 0;
	volatile int ncopies = 0;
	volatile int written = 0;
	volatile bool committed = false;

	*error = NULL;
	pklimit_set_lock_wait(session, PKLIMIT_BATCH_LOCK_MS);
	PG_TRY();
	{
		PklimitTable table = {0};
		MemoryCopy *c;
		uint64		g;

		pklimit_begin_transaction("pklimit: writing keys in memory to the table");
		ncopies = collect(session, memory_context, requests, n, &table, &c,
						  &g);
		copies = c;
		generation = g;
		if (ncopies > 0)
		{
			PklimitUser worker;

			pklimit_remember_user(&worker);
			pklimit_become_owner(&worker, table.owner);
			if (table.citus)
			{
				dropped = MemoryContextAllocZero(memory_context,
												 sizeof(bool) * ncopies);
				written = write_copies_on_shards(&table, copies, ncopies,
												 dropped);
			}
			else
				written = write_copies(&table, NULL, NULL, copies, ncopies,
									   NULL);
			pklimit_restore_user(&worker);
		}
		(void) pklimit_commit_transaction();
		committed = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata = pklimit_abort_transaction(memory_context);

		*error = edata;
		ereport(LOG,
				(errmsg("pklimit worker could not write keys in memory to the table: %s",
						edata->message)));
	}
	PG_END_TRY();
	MemoryContextSwitchTo(memory_context);
	pklimit_report_idle();

	if (committed && dropped != NULL)
		pklimit_memory_drop(copies, dropped, ncopies);
	if (committed && requests == NULL)
		shards_checked = generation;
	if (requests != NULL)
		pklimit_memory_leave(copies, ncopies, !committed);
	else if (committed)
		pklimit_memory_written(copies, ncopies);
	*nwritten = committed ? written : 0;
	if (committed && written > 0 && requests == NULL)
	{
		pklimit_stats_add(PKLIMIT_STAT_FLUSHES, 1);
		pklimit_stats_add(PKLIMIT_STAT_ROWS_FLUSHED, written);
	}
	return committed;
}

/*
 * The sizing check (docs/memory.md, "Sizing"): once SIZING_CALLS memory
 * calls more have been made, if most of them missed their key, one LOG line
 * naming pklimit.memory_keys, at most once in SIZING_LOG_MS.
 */
#define SIZING_CALLS 1000
#define SIZING_LOG_MS (3600 * 1000)

static void
check_sizing(void)
{
	static uint64 hits_then = 0;
	static uint64 misses_then = 0;
	static TimestampTz logged = 0;
	uint64		hits = pklimit_stats_get(PKLIMIT_STAT_MEMORY_HITS);
	uint64		misses = pklimit_stats_get(PKLIMIT_STAT_MEMORY_MISSES);
	TimestampTz now = GetCurrentTimestamp();

	if (hits < hits_then || misses < misses_then)
	{
		/* the counters were reset: count from here */
		hits_then = hits;
		misses_then = misses;
		return;
	}
	if (hits - hits_then + misses - misses_then < SIZING_CALLS)
		return;
	if (misses - misses_then > hits - hits_then &&
		(logged == 0 || now - logged >= (int64) SIZING_LOG_MS * 1000))
	{
		MemoryContext caller = CurrentMemoryContext;
		char	   *datname;

		/* (between the worker's transactions: one to read the name) */
		StartTransactionCommand();
		datname = get_database_name(MyDatabaseId);
		datname = MemoryContextStrdup(caller, datname ? datname : "?");
		CommitTransactionCommand();
		MemoryContextSwitchTo(caller);
		ereport(LOG,
				(errmsg("pklimit: " UINT64_FORMAT " of the last " UINT64_FORMAT " memory calls of database \"%s\" did not find their key in memory",
						misses - misses_then,
						hits - hits_then + misses - misses_then, datname),
				 errdetail("pklimit.memory_keys is %d: %d keys for each of pklimit.max_workers (%d) databases.",
						   pklimit_memory_keys,
						   pklimit_memory_keys / pklimit_max_workers,
						   pklimit_max_workers),
				 errhint("Raise pklimit.memory_keys (at a server restart) to hold the keys in use; docs/memory.md, \"Sizing\", says how to size it.")));
		logged = now;
	}
	hits_then = hits;
	misses_then = misses;
}

/*
 * The flush: every changed key of this database written in one
 * transaction.  Once it committed, every change made before it started is
 * in the table, which opens memory for calls again (unless it is closing:
 * the worker exits).  Returns the rows written, or -1 if it did not commit.
 */
int
pklimit_flush(PklimitSession *session, MemoryContext memory_context)
{
	TimestampTz started = GetCurrentTimestamp();
	bool		closing = proc_exit_inprogress; /* final_flush (worker.c) */
	ErrorData  *error;
	int			written = 0;

	last_flush = started;
	if (pklimit_memory_keys == 0)
		return 0;
	if (pklimit_memory_held() &&
		!pklimit_memory_write_out(session, memory_context, NULL, 0, &error,
								  &written))
		return -1;
	if (!closing)
	{
		pklimit_memory_flushed_through(started);
		check_sizing();
	}
	pklimit_memory_shed();
	return written;
}
