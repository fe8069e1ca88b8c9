/*-------------------------------------------------------------------------
 *
 * apply.c
 *		Applies a list of batch entries in the worker's own transactions and
 *		gives each its answer, or sets it aside for a locked row: the batch
 *		algorithm.  The transactions themselves (begin, commit, abort, the
 *		lock wait, the owner) are xact.c's, the statements store.c's, the
 *		entries' state entry.c's, which entries to try when worker.c's; the
 *		memory path meets each list through one seam (memory/batch.c).
 *
 * Entries are applied in one transaction, unit by unit (unit.c):
 * consecutive hits on one key fold into one row update, the requests of one
 * call on several keys are applied together (the rules of each kind are in
 * request.h), and each caller gets exactly the answer serial execution in
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

#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "memory.h"
#include "settings.h"
#include "stats.h"
#include "worker.h"

/*
 * A transaction that another writer came between is tried again at once,
 * this many times.
 */
#define CONFLICT_TRIES 3

/*
 * On Citus, how long a unit's statements wait for another node's answer
 * before its entries are set aside as for a locked row.
 */
#define NODE_WAIT_MS 50

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
 * Group the n entries into units applied together (unit.c): consecutive
 * entries of a folding kind on one key, of no group, fold, as long as no
 * other entry on that key comes between them and none is marked unfold
 * (their window lengths may differ: a key has one state at a time, so they
 * all count in the one the first of them finds open or starts); the
 * requests of one group make one unit.  Each entry's unit is set; returns the number of
 * units, which keep the order of their first entry.
 */
static int
fold(PklimitEntry **entries, int n, Unit *units)
{
	int			nunits = 0;

	for (int j = 0; j < n; j++)
	{
		PklimitEntry *e = entries[j];
		bool		folds = pklimit_op_rules(e->request.kind).folds &&
		!e->unfold && e->request.group == 0;
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
 * What a wait for Citus's lock on this node's shards met (a move holds
 * one): not a row, so every entry on a key of a shard on this node is set
 * aside, and the others go on (mark_met_lock).
 */
static const PklimitRequest local_shards = {0};

/*
 * After a lock timeout met by request met: mark the entries that would meet
 * the same locked row (every write on that key, and its reads too if a read
 * is what met it), or, if the wait was for this node's shards, every entry
 * on their keys; and with each marked entry those that wait with it.
 */
static void
mark_met_lock(PklimitEntry **entries, int n, const PklimitRequest *met)
{
	bool		met_by_read = met != &local_shards &&
	!pklimit_op_rules(met->kind).writes;
	bool		changed = true;

	for (int j = 0; j < n; j++)
	{
		const PklimitRequest *r = &entries[j]->request;

		if (met == &local_shards)
			entries[j]->met_lock = pklimit_key_on_this_node(r->key);
		else
			entries[j]->met_lock = pklimit_same_key(r, met) &&
				(pklimit_op_rules(r->kind).writes || met_by_read);
	}
	while (changed)
	{
		changed = false;
		for (int j = 0; j < n; j++)
		{
			const PklimitRequest *r = &entries[j]->request;

			for (int k = 0; k < n && !entries[j]->met_lock; k++)
			{
				if (entries[k]->met_lock &&
					pklimit_waits_with(r, &entries[k]->request))
					changed = entries[j]->met_lock = true;
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
 * On a table Citus distributes by key: hold here, for the transaction, the
 * shards on this node that hold keys of the entries of table's schema
 * (citus.c), so that units on those keys alone run on this node alone;
 * here[j] says whether entry j's shard is one of them.
 */
static void
hold_local_shards(PklimitEntry **entries, int n, PklimitTable *table,
				  const PklimitRequest *volatile *running, bool *here)
{
	const char *keys[PKLIMIT_BATCH_MAX];
	PklimitShard *usable[PKLIMIT_BATCH_MAX];
	int			index[PKLIMIT_BATCH_MAX];
	int			m = 0;

	for (int j = 0; j < n; j++)
	{
		here[j] = false;
		/* leases are in their own table: they go through Citus */
		if (entries[j]->request.nspid == table->nspid &&
			!pklimit_op_is_lease(entries[j]->request.kind))
		{
			index[m] = j;
			keys[m++] = entries[j]->request.key;
		}
	}
	*running = &local_shards;
	(void) pklimit_shards_prepare(table, keys, m, usable);
	for (int k = 0; k < m; k++)
		here[index[k]] = (usable[k] != NULL);
}

/*
 * Are all the keys of unit u in shards this transaction holds on this node
 * (here[])?  Then its statements run on those shards directly: no remote
 * statement, and a transaction of such units alone commits here, without
 * two-phase commit.  A unit with a key elsewhere goes through Citus whole,
 * so that Citus commits all its keys together.
 */
static bool
unit_is_local(PklimitEntry **entries, int n, int u, const bool *here)
{
	for (int j = 0; j < n; j++)
		if (entries[j]->unit == u && !here[j])
			return false;
	return true;
}

/*
 * Apply the units in order, each as the owner of its schema's table, in the
 * transaction begun.  On Citus a unit's statements wait for another node's
 * answer; a node that does not answer (stopped, or cut off without its
 * connection being closed) would hold up every key of every batch, so the
 * wait ends after NODE_WAIT_MS, as a lock wait does: the unit's entries are
 * set aside and the rest of the batch goes on.  *citus says whether a table
 * was Citus's, *running which request's statement runs (unit.c).  Once all
 * are applied, the memory calls' rows are read for the pass.  Returns false
 * if a unit's hits must be applied unfolded (the rest is not applied).
 */
static bool
apply_units(PklimitEntry **entries, int n, const Unit *units,
			const int *order, int nunits, PklimitSession *session,
			PklimitMemoryPass *pass, volatile bool *citus,
			const PklimitRequest *volatile *running)
{
	PklimitTable table = {0};
	PklimitUser worker;
	bool		applied = true;
	bool		node_settings = false;
	bool		here[PKLIMIT_BATCH_MAX];

	pklimit_remember_user(&worker);
	for (int i = 0; i < nunits && applied; i++)
	{
		int			u = order[i];
		bool		through_citus;

		if (units[u].head->request.nspid != table.nspid)
		{
			pklimit_restore_user(&worker);
			pklimit_table_open(units[u].head->request.nspid, session->on_citus,
							   &table);
			*citus |= table.citus;
			pklimit_become_owner(&worker, table.owner);
			if (table.citus)
				hold_local_shards(entries, n, &table, running, here);
		}
		table.direct = table.shards != NULL &&
			unit_is_local(entries, n, u, here);
		for (int j = 0; j < n; j++)
			if (entries[j]->unit == u)
				entries[j]->direct = table.direct;

		/*
		 * The other nodes' settings go with the first statement Citus may
		 * send them: none for units on this node's shards alone.
		 */
		through_citus = table.citus && !table.direct;
		if (through_citus && !node_settings)
		{
			pklimit_restore_user(&worker);
			pklimit_set_node_settings(session);
			pklimit_become_owner(&worker, table.owner);
			node_settings = true;
		}
		if (through_citus)
			pklimit_timer_start(NODE_WAIT_MS);
		applied = pklimit_apply_unit(entries, n, u, &table, running);
		if (through_citus)
			pklimit_timer_stop();
	}
	if (applied)
		pklimit_memory_pass_read_rows(pass, entries, n, &table);
	pklimit_restore_user(&worker);
	return applied;
}

/*
 * After an error: answer each entry with it and say what became of the
 * transaction.  A lock timeout, or a node's wait cut short, was met by
 * request met, and the entries that would meet the same row are marked.
 */
static Outcome
failed_outcome(PklimitEntry **entries, int n, const ErrorData *edata,
			   bool citus, const PklimitRequest *met)
{
	for (int j = 0; j < n; j++)
		pklimit_answer_error(&entries[j]->answer, edata);
	if (edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
		(pklimit_timer_ran_out() && edata->sqlerrcode == ERRCODE_QUERY_CANCELED))
	{
		mark_met_lock(entries, n, met);
		return APPLY_LOCKED;
	}
	if (edata->sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE ||
		edata->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED ||
		(citus && edata->sqlerrcode == ERRCODE_QUERY_CANCELED))
	{
		/* Citus cancels one transaction of a circle across its nodes */
		return APPLY_CONFLICT;
	}
	ereport(LOG,
			(errmsg_plural("pklimit worker could not apply %d request: %s",
						   "pklimit worker could not apply %d requests: %s",
						   n, n, edata->message)));
	return APPLY_FAILED;
}

/*
 * A transaction that holds a lease call is flushed at its commit, whatever
 * pklimit.asynchronous_commit says: a lease lost at a crash while its
 * holder runs would let one more in (docs/leases.md).  It does not wait for
 * a synchronous standby (that is the setting's other half: a standby that
 * does not answer must not hold up the database's calls).  On Citus the
 * nodes get the same (pklimit_set_node_settings).
 */
static void
leases_commit_durably(PklimitEntry **entries, int n)
{
	if (!pklimit_asynchronous_commit)
		return;
	for (int j = 0; j < n; j++)
		if (pklimit_op_is_lease(entries[j]->request.kind))
		{
			(void) set_config_option("synchronous_commit", "local", PGC_SUSET,
									 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0,
									 false);
			return;
		}
}

/*
 * Apply the n entries in one transaction and answer each.  Otherwise every
 * answer says why, and on APPLY_LOCKED the entries that met the locked row
 * are marked (met_lock).  If probe_table, a table locked by another
 * transaction is found first, without waiting (APPLY_TABLE_LOCKED).  The
 * statements run as the table's owner, so its privileges and row level
 * security apply.
 */
static Outcome
apply_in_transaction(PklimitEntry **entries, int n, bool probe_table,
					 PklimitSession *session, MemoryContext memory_context,
					 PklimitMemoryPass *pass)
{
	volatile Outcome outcome = APPLY_COMMITTED;
	volatile bool citus = false;
	const PklimitRequest *volatile running = &entries[0]->request;
	Unit		units[PKLIMIT_BATCH_MAX];
	int			order[PKLIMIT_BATCH_MAX];
	int			nunits = fold(entries, n, units);

	order_units(entries, n, units, nunits, order);
	pklimit_timer_reset();
	PG_TRY();
	{
		pklimit_begin_transaction("pklimit: applying queued requests");
		leases_commit_durably(entries, n);
		if (probe_table && !pklimit_table_free(entries[0]->request.nspid))
			outcome = APPLY_TABLE_LOCKED;
		if (outcome == APPLY_COMMITTED &&
			!apply_units(entries, n, units, order, nunits, session, pass,
						 &citus, &running))
			outcome = APPLY_UNFOLD;
		if (outcome != APPLY_COMMITTED)
			pklimit_rollback_transaction();
		else if (!pklimit_commit_transaction())
			for (int j = 0; j < n; j++)
				entries[j]->answer.unreplicated = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		pklimit_timer_stop();
		edata = pklimit_abort_transaction(memory_context);
		outcome = failed_outcome(entries, n, edata, citus, running);
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

		if (e->met_lock)
			pklimit_set_aside(e, now);
		else if (e->request.deadline <= now)
			pklimit_answer_unapplied(e, PKLIMIT_TIMEOUT);
		else
		{
			entries[kept++] = e;
			*probe_table |= (pklimit_op_rules(e->request.kind).writes &&
							 outcome == APPLY_LOCKED);
		}
	}
	return kept;
}

/* The group of entry j of a list (pklimit_foreach_in_group). */
#define LIST_GROUP(j) (entries[(j)]->request.group)

/*
 * After a failure: each entry (a group as one) in a transaction of its own,
 * so one bad request spoils no other's answer.
 */
static void
apply_one_by_one(PklimitEntry **entries, int n, PklimitSession *session,
				 MemoryContext memory_context, PklimitMemoryPass *pass)
{
	for (int j = 0, k; j < n && n > 1; j += k)
	{
		k = 0;
		pklimit_foreach_in_group(m, j, n, LIST_GROUP)
			k++;
		(void) apply_in_transaction(&entries[j], k, false, session,
									memory_context, pass);
	}
}

/*
 * Apply the n entries (all of them being tried now) and leave each answered
 * or set aside.  Entries whose caller's budget has already run out are
 * answered without being applied; those whose keys are in memory are
 * decided there, or their keys taken out of memory first, so that no row
 * is written while its key is in memory.  The memory calls' keys are read
 * in after the one commit that applied them (not after the one-by-one
 * transactions of a failure, where a later one may change the row).  The
 * first transaction waits for a lock as long as lock_wait_ms, later ones
 * PKLIMIT_RETRY_LOCK_MS, so several locked rows cost one long wait.
 * memory_context is the batch's, where errors are kept.
 */
void
pklimit_apply(PklimitEntry **entries, int n, int lock_wait_ms,
			  PklimitSession *session, MemoryContext memory_context)
{
	TimestampTz now = GetCurrentTimestamp();
	PklimitMemoryPass pass;
	bool		probe_table = false;
	int			nlive = 0;
	int			conflicts = 0;

	for (int j = 0; j < n; j++)
	{
		entries[j]->unfold = false;
		entries[j]->met_lock = false;
		entries[j]->direct = false;
		if (entries[j]->request.deadline <= now)
			pklimit_answer_unapplied(entries[j], PKLIMIT_TIMEOUT);
		else
			entries[nlive++] = entries[j];
	}

	/* keys in memory: decided there, or taken out first */
	pklimit_memory_pass_begin(&pass, session, memory_context);
	nlive = pklimit_memory_pass_take(&pass, entries, nlive);

	pklimit_set_lock_wait(session, lock_wait_ms);
	while (nlive > 0)
	{
		Outcome		outcome = apply_in_transaction(entries, nlive, probe_table,
												   session, memory_context,
												   &pass);

		if (outcome == APPLY_COMMITTED)
		{
			/* the memory calls' keys, as this one commit left them */
			pklimit_memory_pass_read_in(&pass, entries, nlive);
			break;
		}
		if (outcome == APPLY_UNFOLD)
			continue;			/* again, without folding what saturated */
		if (outcome == APPLY_CONFLICT && ++conflicts > CONFLICT_TRIES)
		{
			ereport(LOG,
					(errmsg("pklimit worker met another writer in %d tries of %d requests",
							conflicts, nlive)));
			outcome = APPLY_FAILED;
		}
		if (outcome == APPLY_FAILED)
		{
			apply_one_by_one(entries, nlive, session, memory_context, &pass);
			break;
		}
		/* a table locked as a whole holds up its writes, not its reads */
		if (outcome == APPLY_TABLE_LOCKED)
			for (int j = 0; j < nlive; j++)
				entries[j]->met_lock = pklimit_op_rules(entries[j]->request.kind).writes;

		nlive = sort_out(entries, nlive, outcome, &probe_table);
		pklimit_set_lock_wait(session, PKLIMIT_RETRY_LOCK_MS);
	}
	for (int j = 0; j < nlive; j++)
		entries[j]->state = ENTRY_ANSWERED;
}
