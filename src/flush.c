/*-------------------------------------------------------------------------
 *
 * flush.c
 *		The worker's side of the memory path (docs/memory.md): the flush that
 *		writes its database's changed entries to platformkit_limits every
 *		pklimit.flush_interval and when it exits; the requests of a batch
 *		whose keys are in memory, decided there or taken out of it before a
 *		durable call is applied; and the keys memory calls read in once the
 *		worker has applied them.  The entries are memory.c's, the
 *		statements store.c's, the transactions xact.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "pklimit.h"

/* Rows one statement of a flush writes. */
#define FLUSH_ROWS 1000

/* When the last flush started; 0: none yet, so one is due. */
static TimestampTz last_flush = 0;

/* The table and generation the rows read this transaction are of. */
static Oid	read_relid = InvalidOid;
static uint32 read_generation = 0;

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

/* Write the copies to be written, FLUSH_ROWS a statement; returns how many. */
static int
write_copies(const PklimitTable *table, const PklimitMemoryCopy *copies, int n)
{
	const char **keys = palloc(sizeof(char *) * FLUSH_ROWS);
	PklimitRow *rows = palloc(sizeof(PklimitRow) * FLUSH_ROWS);
	int			written = 0;
	int			m = 0;

	for (int i = 0; i < n; i++)
	{
		if (!copies[i].write)
			continue;
		keys[m] = copies[i].key;
		rows[m++] = copies[i].row;
		if (m == FLUSH_ROWS)
		{
			pklimit_store_flush(table, keys, rows, m);
			written += m;
			m = 0;
		}
	}
	if (m > 0)
	{
		pklimit_store_flush(table, keys, rows, m);
		written += m;
	}
	pfree(keys);
	pfree(rows);
	return written;
}

/*
 * One transaction that writes this database's entries: every changed one,
 * or (with requests) those of the n requests' keys, which leave memory
 * after its commit.  Returns false, with *error saying why, if it did not
 * commit; entries of a table that is not pklimit's now are discarded.
 */
static bool
flush_transaction(PklimitSession *session, MemoryContext memory_context,
				  const PklimitRequest *requests, int n, ErrorData **error,
				  int *nwritten)
{
	PklimitMemoryCopy *volatile copies = NULL;
	volatile int ncopies = 0;
	volatile int written = 0;
	volatile bool committed = false;

	*error = NULL;
	pklimit_set_lock_wait(session, PKLIMIT_BATCH_LOCK_MS);
	PG_TRY();
	{
		PklimitTable table = {0};
		Oid			nspid;

		pklimit_begin_transaction("pklimit: writing keys in memory to the table");
		nspid = pklimit_extension_namespace();
		if (OidIsValid(nspid))
			pklimit_table_open(nspid, session->on_citus, &table);
		{
			MemoryContext old = MemoryContextSwitchTo(memory_context);
			PklimitMemoryCopy *c;

			ncopies = pklimit_memory_collect(&c,
											 table.version >= 3 ? table.relid :
											 InvalidOid, requests, n);
			copies = c;
			MemoryContextSwitchTo(old);
		}
		if (ncopies > 0)
		{
			PklimitUser worker;

			pklimit_remember_user(&worker);
			pklimit_become_owner(&worker, table.owner);
			written = write_copies(&table, copies, ncopies);
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
 * The flush: every changed entry of this database written in one
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
	int			shed;

	last_flush = started;
	if (pklimit_memory_keys == 0)
		return 0;
	if (pklimit_memory_held() &&
		!flush_transaction(session, memory_context, NULL, 0, &error,
						   &written))
		return -1;
	if (!closing)
		pklimit_memory_flushed_through(started);
	if ((shed = pklimit_memory_shed()) > 0)
		pklimit_stats_add(PKLIMIT_STAT_MEMORY_EVICTIONS, shed);
	return written;
}

/* Is one of the m requests on a key of one of the n? */
static bool
on_a_key_of(const PklimitRequest *requests, int m,
			const PklimitRequest *others, int n)
{
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++)
			if (pklimit_same_key(&requests[i], &others[j]))
				return true;
	return false;
}

/*
 * Before the n entries of a list are applied (apply.c: every list, new
 * requests and set-aside ones tried again): a call whose keys are all in
 * memory is decided there if it is a memory call or only reads, and
 * answered; the keys in memory of the others are written and taken out of
 * memory first, so that they are applied to rows that hold every event (and
 * so is every call after them on those keys, in arrival order).  A take-out
 * held up by a locked row sets its calls aside, as apply.c does; any other
 * failure answers them with it.  Returns how many entries are left to
 * apply, moved to the front.
 */
int
pklimit_take_from_memory(PklimitEntry **entries, int n,
						 PklimitSession *session, MemoryContext memory_context)
{
	PklimitRequest *leaving;
	PklimitEntry **leaving_entries;
	int			nleaving = 0;
	ErrorData  *error;
	int			written;
	int			kept = 0;

	if (pklimit_memory_keys == 0 || n == 0)
		return n;
	leaving = palloc(sizeof(PklimitRequest) * n);
	leaving_entries = palloc(sizeof(PklimitEntry *) * n);
	for (int first = 0, next; first < n; first = next)
	{
		PklimitRequest requests[PKLIMIT_GROUP_MAX];
		PklimitAnswer answers[PKLIMIT_GROUP_MAX];
		bool		reads = true;
		int			m = 0;
		PklimitMemoryOutcome outcome;

#define ENTRY_GROUP(i) (entries[(i)]->request.group)
		pklimit_foreach_in_group(k, first, n, ENTRY_GROUP)
		{
			if (m < PKLIMIT_GROUP_MAX)
				requests[m] = entries[k]->request;
			reads &= (entries[k]->request.kind == PKLIMIT_OP_COUNT ||
					  entries[k]->request.kind == PKLIMIT_OP_PEEK);
			m++;
		}
#undef ENTRY_GROUP
		next = first + m;
		if (m > PKLIMIT_GROUP_MAX)
			continue;
		if (on_a_key_of(requests, m, leaving, nleaving))
			outcome = PKLIMIT_MEMORY_PRESENT;	/* behind a call taking it out */
		else
			outcome = pklimit_memory_find(requests, answers, m,
										  requests[0].call.memory || reads);
		if (outcome == PKLIMIT_MEMORY_DECIDED)
		{
			for (int k = 0; k < m; k++)
			{
				PklimitEntry *e = entries[first + k];

				e->answer = answers[k];
				e->state = ENTRY_ANSWERED;
				if (e->request.track_stats && e->answer.result.recorded > 0)
					pklimit_stats_add(PKLIMIT_STAT_EVENTS,
									  e->answer.result.recorded);
			}
			if (requests[0].call.memory && requests[0].track_stats)
				pklimit_stats_add(PKLIMIT_STAT_MEMORY_CALLS, 1);
		}
		else if (outcome == PKLIMIT_MEMORY_PRESENT)
		{
			for (int k = 0; k < m; k++)
			{
				leaving[nleaving] = requests[k];
				leaving_entries[nleaving++] = entries[first + k];
			}
			/* once per call, though a locked row sets it aside again */
			if (requests[0].call.memory && requests[0].track_stats &&
				!entries[first]->memory_fell_back)
			{
				pklimit_stats_add(PKLIMIT_STAT_MEMORY_FALLBACKS, 1);
				entries[first]->memory_fell_back = true;
			}
		}
	}

	/* all in one transaction; after a failure, each call's keys alone */
	if (nleaving > 0 &&
		!flush_transaction(session, memory_context, leaving, nleaving,
						   &error, &written))
	{
		for (int first = 0, next; first < nleaving; first = next)
		{
			TimestampTz now;

#define LEAVING_GROUP(i) (leaving[(i)].group)
			next = first + 1;
			pklimit_foreach_in_group(k, first, nleaving, LEAVING_GROUP)
				next = k + 1;
#undef LEAVING_GROUP
			if (flush_transaction(session, memory_context, &leaving[first],
								  next - first, &error, &written))
				continue;
			now = GetCurrentTimestamp();
			for (int k = first; k < next; k++)
			{
				PklimitEntry *e = leaving_entries[k];

				if (error->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
					pklimit_set_aside(e, now);
				else
				{
					pklimit_answer_unapplied(e, PKLIMIT_APPLY_ERROR);
					pklimit_answer_error(&e->answer, error);
				}
			}
		}
	}
	for (int j = 0; j < n; j++)
		if (entries[j]->state != ENTRY_ANSWERED &&
			entries[j]->state != ENTRY_SET_ASIDE)
			entries[kept++] = entries[j];
	pfree(leaving);
	pfree(leaving_entries);
	return kept;
}

/*
 * In the transaction that applied entries, before its commit: the rows of
 * the memory calls' keys as it leaves them, to read in after the commit.
 * Not on a Citus table (each node would count apart), nor on a table before
 * 0.3.0, nor while memory lags (a fallen-back call costs one durable call).
 */
void
pklimit_read_rows(PklimitEntry **entries, int n, const PklimitTable *table)
{
	bool		can = pklimit_memory_keys > 0 && table->version >= 3 &&
	!table->citus && !pklimit_memory_lagging();

	read_relid = table->relid;
	read_generation = can ? pklimit_memory_generation() : 0;
	for (int j = 0; j < n; j++)
	{
		PklimitEntry *e = entries[j];

		e->memory_read = false;
		if (!can || !e->request.call.memory || e->answer.status != PKLIMIT_OK)
			continue;
		for (int k = 0; k < j && !e->memory_read; k++)
			if (entries[k]->memory_read &&
				pklimit_same_key(&entries[k]->request, &e->request))
			{
				e->memory_row = entries[k]->memory_row;
				e->memory_read = true;
			}
		if (!e->memory_read)
		{
			(void) pklimit_store_read(table, e->request.key, false,
									  &e->memory_row);
			e->memory_read = true;
		}
	}
}

/*
 * After that commit: the memory calls' keys go into memory, as committed.
 * A memory call whose key could not be read in counts as a fallback.
 */
void
pklimit_read_in(PklimitEntry **entries, int n)
{
	for (int j = 0; j < n; j++)
	{
		PklimitEntry *e = entries[j];
		int			read;

		if (!e->request.call.memory || e->answer.status != PKLIMIT_OK)
			continue;
		read = e->memory_read ?
			pklimit_memory_read_in(e->request.key, e->request.nspid, read_relid,
								   read_generation, &e->memory_row) : -1;
		if (!e->request.track_stats)
			;
		else if (read > 0)
			pklimit_stats_add(PKLIMIT_STAT_MEMORY_READS, 1);
		else if (read < 0 && !e->memory_fell_back &&
				 (e->request.group == 0 || j == 0 ||
				  entries[j - 1]->request.group != e->request.group))
			pklimit_stats_add(PKLIMIT_STAT_MEMORY_FALLBACKS, 1);
		e->memory_read = false;
	}
}
