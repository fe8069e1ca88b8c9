/*-------------------------------------------------------------------------
 *
 * apply.c
 *		Applies a list of batch entries in the worker's own transactions and
 *		gives each its answer, or sets it aside for a locked row.  Owns the
 *		worker's transactions (begin, commit, abort) and its lock wait; the
 *		statements themselves are store.c's, and which entries to try when is
 *		worker.c's.
 *
 * Entries are applied in one transaction, unit by unit (unit.c):
 * consecutive hits on one key fold into one row update, the requests of one
 * call on several keys are applied together (the rules of each kind are in
 * pklimit.h), and each caller gets exactly the answer serial execution in
 * arrival order would give.  Units go in the global order of their keys
 * (units on one key in arrival order).  Every statement touches one key, so
 * the table stays distributable by key; each transaction is a transaction
 * block, so on Citus it is one distributed transaction.
 *
 * A row lock is waited for only as long as the lock wait the worker set:
 * PKLIMIT_BATCH_LOCK_MS for new entries, PKLIMIT_RETRY_LOCK_MS for a retry
 * and after the first lock timeout.  The entries on a locked key are set
 * aside and the rest commits without them.  A table locked as a whole sets
 * aside the writes.  A group is set aside, or tried, as a whole.  After any
 * other failure each entry (each group) is tried in a transaction of its
 * own, so one bad request cannot spoil its neighbours' answers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "pklimit.h"

/* Time kept in hand for an answer to reach a caller before its deadline. */
#define ANSWER_MS 5

/* The units of one transaction, each applied by unit.c. */
typedef struct Unit
{
	PklimitEntry *head;			/* its first entry */
	const PklimitRequest *least;	/* its first key in the global order */
	int			index;			/* its place in arrival order */
	bool		open;			/* a later entry may still fold into it */
} Unit;

/* What became of one transaction of apply_in_transaction. */
typedef enum Outcome
{
	APPLY_COMMITTED,
	APPLY_LOCKED,				/* a row lock was not granted in time */
	APPLY_TABLE_LOCKED,			/* another transaction locks the whole table */
	APPLY_CONFLICT,				/* another writer came between: another node's
								 * worker created a row, or a deadlock (across
								 * nodes, Citus cancels one) ended the
								 * transaction; to be tried again, a few times */
	APPLY_FAILED,				/* any other error */
	APPLY_UNFOLD				/* rolled back: folded hits reached the
								 * maximum */
} Outcome;

/*
 * On Citus a unit's statements wait for another node's answer; a node that
 * does not answer (stopped, or cut off without its connection being closed)
 * would hold up every key of every batch.  Its wait ends after
 * PKLIMIT_NODE_WAIT_MS, as a lock wait does: the unit's entries are set
 * aside and the rest of the batch goes on.
 */
static TimeoutId node_timeout = MAX_TIMEOUTS;
static volatile sig_atomic_t node_wait_over = false;

static void
node_wait_handler(void)
{
	node_wait_over = true;
	InterruptPending = true;
	QueryCancelPending = true;
	SetLatch(MyLatch);
}

/* The worker's lock wait, in ms: lock_timeout in its session. */
static int	session_lock_wait_ms = -1;

/*
 * For a Citus table, in a transaction: its rows are written by other nodes'
 * backends, which connect as the table's owner with that role's settings,
 * not the worker's.  Citus sends a transaction's SET LOCAL commands on to
 * every node it writes (worker.c sets citus.propagate_set_commands to
 * local): the worker's lock wait and no timeout but that, its commit mode
 * (a batch that wrote on one node commits there without two-phase commit),
 * and read-write.
 */
void
pklimit_set_node_settings(void)
{
	char		lock_wait[64];
	const char *settings[] = {
		lock_wait,
		"SET LOCAL statement_timeout = 0",
		"SET LOCAL idle_in_transaction_session_timeout = 0",
#ifdef PKLIMIT_HAS_TRANSACTION_TIMEOUT
		"SET LOCAL transaction_timeout = 0",
#endif
		pklimit_asynchronous_commit ?
		"SET LOCAL synchronous_commit = off" :
		"SET LOCAL synchronous_commit = on",
		"SET LOCAL transaction_read_only = off",
	};

	snprintf(lock_wait, sizeof(lock_wait), "SET LOCAL lock_timeout = %d",
			 session_lock_wait_ms > 0 ? session_lock_wait_ms :
			 PKLIMIT_BATCH_LOCK_MS);
	/* one command a string: Citus sends on the text of each */
	for (int i = 0; i < lengthof(settings); i++)
		if (SPI_execute(settings[i], false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "pklimit: could not set the nodes' settings");
}

/*
 * Start one of the worker's transactions, with SPI and a snapshot.  Its
 * memory context on return is the transaction's.
 */
void
pklimit_begin_transaction(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();

	/*
	 * A transaction block, as after BEGIN: Citus then makes the transaction
	 * one distributed transaction, whose writes on every node commit together
	 * or not at all.
	 */
	BeginTransactionBlock();
	CommitTransactionCommand();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, activity);
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

/*
 * Has the commit that ended at commit_end reached the synchronous standbys?
 * Only not if synchronous replication is configured and the wait for it was
 * cut short (the worker is terminating, or its wait was cancelled): the
 * commit is then local only.
 */
static bool
commit_replicated(XLogRecPtr commit_end)
{
	bool		replicated;

	if (!SyncRepRequested() || SyncRepStandbyNames == NULL ||
		SyncRepStandbyNames[0] == '\0')
		return true;
	LWLockAcquire(SyncRepLock, LW_SHARED);
	replicated = (WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH] >= commit_end);
	LWLockRelease(SyncRepLock);
	return replicated;
}

/*
 * Commit one of the worker's transactions.  Returns false if it wrote and
 * its commit is local only, not confirmed by the synchronous standbys
 * (commit_replicated), as PostgreSQL warns a client in the same case.
 */
bool
pklimit_commit_transaction(void)
{
	XLogRecPtr	before = XactLastCommitEnd;

	SPI_finish();
	PopActiveSnapshot();
	if (!EndTransactionBlock(false))
		elog(ERROR, "pklimit: the worker's transaction block was aborted");
	CommitTransactionCommand();
	return XactLastCommitEnd == before || commit_replicated(XactLastCommitEnd);
}

/* Roll back a transaction that raised no error. */
static void
rollback_transaction(void)
{
	SPI_finish();
	PopActiveSnapshot();
	AbortOutOfAnyTransaction();
}

/*
 * In PG_CATCH: keep the error, in memory_context, and roll back, out of the
 * transaction block too.  The abort also restores the user id, SPI and the
 * snapshot stack.
 */
ErrorData *
pklimit_abort_transaction(MemoryContext memory_context)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(memory_context);
	edata = CopyErrorData();
	FlushErrorState();
	AbortOutOfAnyTransaction();
	return edata;
}

/* The end of any of the worker's transactions, for the statistics views. */
void
pklimit_report_idle(void)
{
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* The caller's view of a failed transaction, from the error's SQLSTATE. */
void
pklimit_answer_error(PklimitAnswer *answer, const ErrorData *edata)
{
	int			len;

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
	if (edata->message == NULL)
		return;
	len = strlen(edata->message);
	if (len <= PKLIMIT_MESSAGE_MAX)
		memcpy(answer->message, edata->message, len + 1);
	else
	{
		len = pg_mbcliplen(edata->message, len,
						   PKLIMIT_MESSAGE_MAX - strlen(PKLIMIT_MESSAGE_CUT));
		memcpy(answer->message, edata->message, len);
		strcpy(answer->message + len, PKLIMIT_MESSAGE_CUT);
	}
}

/* Answer an entry without applying it. */
void
pklimit_entry_answer(PklimitEntry *entry, PklimitStatus status)
{
	memset(&entry->answer, 0, sizeof(entry->answer));
	entry->answer.status = status;
	entry->state = ENTRY_ANSWERED;
}

bool
pklimit_same_key(const PklimitRequest *a, const PklimitRequest *b)
{
	return a->nspid == b->nspid && strcmp(a->key, b->key) == 0;
}

/*
 * The global order of keys, the same in every worker of every node: by
 * schema, then by stored key, byte by byte.
 */
int
pklimit_key_order(const PklimitRequest *a, const PklimitRequest *b)
{
	if (a->nspid != b->nspid)
		return a->nspid < b->nspid ? -1 : 1;
	return strcmp(a->key, b->key);
}

/*
 * Is there budget left before deadline for another try at a locked row, with
 * time to spare for the answer to reach the caller?  The next try comes
 * within PKLIMIT_RETRY_MS, give or take a round of the worker (a new batch
 * may wait PKLIMIT_BATCH_LOCK_MS for a lock first), and the answer after it.
 */
bool
pklimit_worth_retrying(TimestampTz deadline, TimestampTz now)
{
	return (deadline - now) / 1000 >
		2 * PKLIMIT_RETRY_MS + PKLIMIT_BATCH_LOCK_MS + ANSWER_MS;
}

/* Set how long a statement waits for a lock (lock_timeout), in ms. */
void
pklimit_set_lock_wait(int ms)
{
	char		value[16];

	if (ms == session_lock_wait_ms)
		return;
	snprintf(value, sizeof(value), "%d", ms);
	SetConfigOption("lock_timeout", value, PGC_SUSET, PGC_S_OVERRIDE);
	session_lock_wait_ms = ms;
}

/*
 * Group the n entries into units applied together (unit.c): consecutive
 * entries of a folding kind on one key fold, as long as no other entry on
 * that key comes between them and none is marked unfold (their window
 * lengths may differ: a key has one window at a time, so they all count in
 * the window the first of them finds open or starts); the requests of one
 * group make one unit.  Each entry's unit is set; returns the number of
 * units, which keep the order of their first entry.
 */
static int
fold(PklimitEntry **entries, int n, Unit *units)
{
	int			nunits = 0;

	for (int j = 0; j < n; j++)
	{
		PklimitEntry *e = entries[j];
		bool		folds = pklimit_op_rules(e->request.kind).folds && !e->unfold;
		int			u = -1;

		for (int v = 0; v < nunits; v++)
		{
			const PklimitRequest *head = &units[v].head->request;

			if (e->request.group != 0 && head->group == e->request.group)
				u = v;			/* one group, one unit */
			else if (!units[v].open || !pklimit_same_key(head, &e->request))
				continue;
			else if (folds && head->kind == e->request.kind)
				u = v;
			else
				units[v].open = false;	/* a later entry must not jump over e */
		}
		if (u < 0)
		{
			u = nunits++;
			units[u].head = e;
			units[u].least = &e->request;
			units[u].index = u;
			units[u].open = folds;
		}
		else if (pklimit_key_order(&e->request, units[u].least) < 0)
			units[u].least = &e->request;
		e->unit = u;
	}
	return nunits;
}

/* Two units by their first key in the global order, then by arrival. */
static int
compare_units(const void *a, const void *b)
{
	const Unit *ua = (const Unit *) a;
	const Unit *ub = (const Unit *) b;
	int			c = pklimit_key_order(ua->least, ub->least);

	return c != 0 ? c : ua->index - ub->index;
}

/* Two entries by key in the global order, then by unit. */
static int
compare_entries(const void *a, const void *b)
{
	const PklimitEntry *ea = *(PklimitEntry *const *) a;
	const PklimitEntry *eb = *(PklimitEntry *const *) b;
	int			c = pklimit_key_order(&ea->request, &eb->request);

	return c != 0 ? c : ea->unit - eb->unit;
}

/*
 * The order in which the n entries' units are applied: by key, in one
 * order every worker on every node follows, so that two transactions that
 * lock the same rows take them in the same order and never wait on each
 * other in a circle.  A group takes its own keys in that order (unit.c) but
 * is placed at its first key, so a key of another unit can come between its
 * keys; and units on one key must keep their arrival order, which sorting by
 * key keeps unless a group and a unit on one of its other keys would swap
 * (such a transaction keeps arrival order).  A circle those close with
 * another node's transaction ends at the lock wait, or by Citus's deadlock
 * detection, and is tried again.  Fills order[] with unit numbers.
 */
static void
order_units(PklimitEntry **entries, int n, Unit *units, int nunits,
			int *order)
{
	Unit		sorted[PKLIMIT_BATCH_MAX];
	int			place[PKLIMIT_BATCH_MAX];
	PklimitEntry *by_key[PKLIMIT_BATCH_MAX];
	bool		keeps = true;
	bool		groups = false;

	memcpy(sorted, units, nunits * sizeof(Unit));
	qsort(sorted, nunits, sizeof(Unit), compare_units);
	for (int i = 0; i < nunits; i++)
		place[sorted[i].index] = i;
	for (int j = 0; j < n; j++)
		groups |= (entries[j]->request.group_size > 1);
	if (groups)
	{
		/* each key's units, in arrival order, must come in that order */
		memcpy(by_key, entries, n * sizeof(PklimitEntry *));
		qsort(by_key, n, sizeof(PklimitEntry *), compare_entries);
		for (int j = 1; j < n && keeps; j++)
			if (by_key[j]->unit != by_key[j - 1]->unit &&
				pklimit_same_key(&by_key[j]->request, &by_key[j - 1]->request))
				keeps = place[by_key[j - 1]->unit] < place[by_key[j]->unit];
	}
	for (int i = 0; i < nunits; i++)
		order[i] = keeps ? sorted[i].index : i;
}

/*
 * After a lock timeout met by request met: mark the entries that would meet
 * the same locked row (every write on that key, and its reads too if a read
 * is what met it), and with each marked entry the rest of its group and the
 * writes on their keys, so no write jumps over one set aside.
 */
static void
mark_locked(PklimitEntry **entries, int n, const PklimitRequest *met)
{
	bool		met_by_read = !pklimit_op_rules(met->kind).writes;
	bool		changed = true;

	for (int j = 0; j < n; j++)
	{
		const PklimitRequest *r = &entries[j]->request;

		entries[j]->locked = pklimit_same_key(r, met) &&
			(pklimit_op_rules(r->kind).writes || met_by_read);
	}
	while (changed)
	{
		changed = false;
		for (int j = 0; j < n; j++)
		{
			const PklimitRequest *r = &entries[j]->request;

			for (int k = 0; k < n && !entries[j]->locked; k++)
			{
				const PklimitRequest *o = &entries[k]->request;

				if (entries[k]->locked &&
					((r->group != 0 && r->group == o->group) ||
					 (pklimit_op_rules(r->kind).writes &&
					  pklimit_op_rules(o->kind).writes && pklimit_same_key(r, o))))
					changed = entries[j]->locked = true;
			}
		}
	}
}

/*
 * After a commit: the events it recorded for callers whose statistics are
 * kept (pklimit.track_stats), and one batch if any.
 */
static void
count_recorded(PklimitEntry **entries, int n)
{
	uint64		events = 0;

	for (int j = 0; j < n; j++)
		if (entries[j]->answer.status == PKLIMIT_OK &&
			entries[j]->request.track_stats)
		{
			uint64		recorded = entries[j]->answer.result.recorded;

			events = (events > PG_UINT64_MAX - recorded) ? PG_UINT64_MAX :
				events + recorded;
		}
	if (events > 0)
	{
		pklimit_stats_add(PKLIMIT_STAT_EVENTS, events);
		pklimit_stats_add(PKLIMIT_STAT_BATCHES, 1);
	}
}

/*
 * Apply the n entries in one transaction and answer each.  Otherwise every
 * answer says why, and on APPLY_LOCKED the entries that met the locked row
 * are marked locked.  If probe_table, a table locked by another transaction
 * is found first, without waiting (APPLY_TABLE_LOCKED).  The statements run
 * as the table's owner, so its privileges and row level security apply.
 */
static Outcome
apply_in_transaction(PklimitEntry **entries, int n, bool probe_table,
					 MemoryContext memory_context)
{
	volatile Outcome outcome = APPLY_COMMITTED;
	volatile bool citus = false;
	Unit		units[PKLIMIT_BATCH_MAX];
	int			order[PKLIMIT_BATCH_MAX];
	int			nunits = fold(entries, n, units);

	order_units(entries, n, units, nunits, order);
	if (node_timeout == MAX_TIMEOUTS)
		node_timeout = RegisterTimeout(USER_TIMEOUT, node_wait_handler);
	node_wait_over = false;

	PG_TRY();
	{
		PklimitTable table = {0};
		Oid			save_userid;
		int			save_sec_context;

		pklimit_begin_transaction("pklimit: applying queued requests");
		if (probe_table && !pklimit_store_table_free(entries[0]->request.nspid))
			outcome = APPLY_TABLE_LOCKED;
		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		pklimit_unit_current = &entries[0]->request;
		for (int i = 0; i < nunits && outcome == APPLY_COMMITTED; i++)
		{
			int			u = order[i];

			if (units[u].head->request.nspid != table.nspid)
			{
				SetUserIdAndSecContext(save_userid, save_sec_context);
				pklimit_store_open(units[u].head->request.nspid, &table);
				if (table.citus)
				{
					citus = true;
					pklimit_set_node_settings();
				}
				SetUserIdAndSecContext(table.owner,
									   save_sec_context |
									   SECURITY_LOCAL_USERID_CHANGE |
									   SECURITY_RESTRICTED_OPERATION);
			}
			if (citus)
				enable_timeout_after(node_timeout, PKLIMIT_NODE_WAIT_MS);
			if (!pklimit_apply_unit(entries, n, u, &table))
				outcome = APPLY_UNFOLD;
			if (citus)
				disable_timeout(node_timeout, false);
		}
		SetUserIdAndSecContext(save_userid, save_sec_context);

		if (outcome != APPLY_COMMITTED)
			rollback_transaction();
		else if (!pklimit_commit_transaction())
			for (int j = 0; j < n; j++)
				entries[j]->answer.unreplicated = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		disable_timeout(node_timeout, false);
		edata = pklimit_abort_transaction(memory_context);
		for (int j = 0; j < n; j++)
			pklimit_answer_error(&entries[j]->answer, edata);
		if (edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
			(node_wait_over && edata->sqlerrcode == ERRCODE_QUERY_CANCELED))
		{
			outcome = APPLY_LOCKED;
			mark_locked(entries, n, pklimit_unit_current);
		}
		else if (edata->sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE ||
				 edata->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED ||
				 (citus && edata->sqlerrcode == ERRCODE_QUERY_CANCELED))
		{
			/* Citus cancels one transaction of a circle across its nodes */
			outcome = APPLY_CONFLICT;
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

	MemoryContextSwitchTo(memory_context);
	if (outcome == APPLY_COMMITTED)
		count_recorded(entries, n);
	pklimit_report_idle();
	return outcome;
}

/*
 * After a transaction that did not commit: entries that met a locked row are
 * set aside while their budget allows another try (answered lock_timeout
 * otherwise), entries whose caller's budget has run out are answered
 * timeout, and the rest stay in entries[] for another transaction.  Returns
 * how many stay; *probe_table says whether the next one looks for a table
 * lock first (a row lock may have been the whole table's).
 */
static int
sort_out(PklimitEntry **entries, int n, Outcome outcome, bool *probe_table)
{
	TimestampTz now = GetCurrentTimestamp();
	int			kept = 0;

	*probe_table = false;
	for (int j = 0; j < n; j++)
	{
		PklimitEntry *e = entries[j];

		if (e->locked)
		{
			pklimit_entry_answer(e, PKLIMIT_LOCK_TIMEOUT);
			if (pklimit_worth_retrying(e->request.deadline, now))
				e->state = ENTRY_SET_ASIDE;
		}
		else if (e->request.deadline <= now)
			pklimit_entry_answer(e, PKLIMIT_TIMEOUT);
		else
		{
			entries[kept++] = e;
			*probe_table |= (pklimit_op_rules(e->request.kind).writes &&
							 outcome == APPLY_LOCKED);
		}
	}
	return kept;
}

/*
 * Apply the n entries (all of them being tried now) and leave each answered
 * or set aside.  Entries whose caller's budget has already run out are
 * answered without being applied.  The first transaction waits for a lock
 * as long as lock_wait_ms, later ones PKLIMIT_RETRY_LOCK_MS, so several
 * locked rows cost one long wait.  memory_context is the batch's, where
 * errors are kept.
 */
void
pklimit_apply(PklimitEntry **entries, int n, int lock_wait_ms,
			  MemoryContext memory_context)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		probe_table = false;
	int			nlive = 0;
	int			conflicts = 0;

	for (int j = 0; j < n; j++)
	{
		entries[j]->unfold = false;
		entries[j]->locked = false;
		if (entries[j]->request.deadline <= now)
			pklimit_entry_answer(entries[j], PKLIMIT_TIMEOUT);
		else
			entries[nlive++] = entries[j];
	}

	pklimit_set_lock_wait(lock_wait_ms);
	while (nlive > 0)
	{
		Outcome		outcome = apply_in_transaction(entries, nlive, probe_table,
												   memory_context);

		if (outcome == APPLY_COMMITTED)
			break;
		if (outcome == APPLY_UNFOLD)
			continue;			/* again, without folding what saturated */
		if (outcome == APPLY_CONFLICT && ++conflicts > PKLIMIT_CONFLICT_TRIES)
		{
			ereport(LOG,
					(errmsg("pklimit worker met another writer in %d tries of %d requests",
							conflicts, nlive)));
			outcome = APPLY_FAILED;
		}
		if (outcome == APPLY_FAILED)
		{
			/*
			 * One by one (a group as one), so one bad request spoils no
			 * other's answer.
			 */
			for (int j = 0, k; j < nlive && nlive > 1; j += k)
			{
				for (k = 1; j + k < nlive && entries[j]->request.group != 0 &&
					 entries[j + k]->request.group == entries[j]->request.group;)
					k++;
				(void) apply_in_transaction(&entries[j], k, false,
											memory_context);
			}
			break;
		}
		/* a table locked as a whole holds up its writes, not its reads */
		if (outcome == APPLY_TABLE_LOCKED)
			for (int j = 0; j < nlive; j++)
				entries[j]->locked = pklimit_op_rules(entries[j]->request.kind).writes;

		nlive = sort_out(entries, nlive, outcome, &probe_table);
		pklimit_set_lock_wait(PKLIMIT_RETRY_LOCK_MS);
	}
	for (int j = 0; j < nlive; j++)
		entries[j]->state = ENTRY_ANSWERED;
}
