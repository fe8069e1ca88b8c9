/*-------------------------------------------------------------------------
 *
 * unit.c
 *		Applies one unit of the worker's transaction and answers its entries
 *		as serial execution would: a run of folded hits on one key (one
 *		upsert), a run of calls decided in C on one locked row (limit.c),
 *		the calls on several keys of one group (all recorded or none), a
 *		peek, a count, a forget or a decrement.  Runs in apply.c's
 *		transactions, as the table's owner; the statements are store.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "utils/timestamp.h"

#include "lease.h"
#include "worker.h"

/* The entries of unit u, in the order they arrived. */
static int
members_of(PklimitEntry **entries, int n, int u, PklimitEntry **members)
{
	int			m = 0;

	for (int j = 0; j < n; j++)
		if (entries[j]->unit == u)
			members[m++] = entries[j];
	return m;
}

/* An entry's answer: applied, with the result of its call. */
static void
answer_applied(PklimitEntry *e, const PklimitResult *result)
{
	memset(&e->answer, 0, sizeof(e->answer));
	e->answer.status = PKLIMIT_OK;
	e->answer.result = *result;
}

/*
 * Calls on one key (of no group) decided in C, in order, each on the row the
 * calls before it left, from *row, and each recorded as its own decision
 * says; *row becomes the row after them.
 */
static void
decide_in_order(PklimitEntry **members, int m, PklimitRow *row,
				TimestampTz now)
{
	for (int k = 0; k < m; k++)
	{
		PklimitResult result;

		pklimit_decide_call(row, &members[k]->request.call, now, &result);
		answer_applied(members[k], &result);
	}
}

/*
 * Folded hits: their events in one upsert, each call then decided in order
 * on the row the calls before it left (limit.c), so answered the count after
 * its own events.  If the upsert left the row unchanged (a blocked key, or
 * another algorithm's state), the calls are decided on it in C, and what
 * they change written after them.  If the fold cannot tell each call its
 * count, its members are marked unfold instead, and false is returned.
 */
static bool
apply_hits(PklimitEntry **members, int m, const PklimitTable *table)
{
	const PklimitRequest *head = &members[0]->request;
	TimestampTz now = GetCurrentTimestamp();
	int64		events = 0;
	PklimitRow	row;
	PklimitRow	before;
	bool		counted;

	for (int k = 0; k < m; k++)
		if (pg_add_s64_overflow(events, members[k]->request.call.cost, &events))
		{
			/* more events than a count can hold: one statement each */
			for (int j = 0; j < m; j++)
				members[j]->unfold = true;
			return false;
		}
	pklimit_store_hit(table, head->key, &head->call,
					  members[m - 1]->request.call.max_count, events, now, &row);
	if (!pklimit_fold_known(row.count, m))
	{
		for (int k = 0; k < m; k++)
			members[k]->unfold = true;
		return false;
	}
	counted = pklimit_fold_start(&row, events, now, &before);
	decide_in_order(members, m, &before, now);
	if (!counted && pklimit_rows_differ(&row, &before))
		pklimit_store_write(table, head->key, &before, true);
	return true;
}

static int
compare_keys(const void *a, const void *b)
{
	return pklimit_key_order(&(*(PklimitEntry *const *) a)->request,
							 &(*(PklimitEntry *const *) b)->request);
}

/*
 * Calls decided in C on their locked rows: consecutive calls on one key
 * (read once, decided in order, written once), or the calls on the keys of
 * one group, whose rows are locked in the order of their stored keys (so two
 * groups over the same keys never wait on each other in a circle), then
 * decided together: a key is recorded if every key of the group allows, or
 * if record_refused.
 */
static void
apply_limits(PklimitEntry **members, int m, const PklimitTable *table,
			 const PklimitRequest *volatile *running)
{
	PklimitRow	before[PKLIMIT_GROUP_MAX];
	PklimitRow	rows[PKLIMIT_GROUP_MAX];
	PklimitCall calls[PKLIMIT_GROUP_MAX];
	PklimitResult results[PKLIMIT_GROUP_MAX];
	TimestampTz now;

	if (members[0]->request.group == 0)
	{
		PklimitRow	row;

		(void) pklimit_store_read(table, members[0]->request.key, true,
								  &before[0]);
		now = GetCurrentTimestamp();
		row = before[0];
		decide_in_order(members, m, &row, now);
		if (pklimit_rows_differ(&before[0], &row))
			pklimit_store_write(table, members[0]->request.key, &row,
								before[0].exists);
		return;
	}

	/* a group is applied whole or not at all, never a part of it */
	if (m > PKLIMIT_GROUP_MAX || m != members[0]->request.group_size)
		elog(ERROR, "pklimit: a call on %d keys has %d in this transaction",
			 members[0]->request.group_size, m);
	qsort(members, m, sizeof(PklimitEntry *), compare_keys);
	for (int k = 0; k < m; k++)
	{
		*running = &members[k]->request;
		(void) pklimit_store_read(table, members[k]->request.key, true,
								  &before[k]);
		rows[k] = before[k];
		calls[k] = members[k]->request.call;
	}
	now = GetCurrentTimestamp();
	pklimit_decide_group(rows, calls, m, now, results);
	for (int k = 0; k < m; k++)
	{
		if (pklimit_rows_differ(&before[k], &rows[k]))
		{
			*running = &members[k]->request;
			pklimit_store_write(table, members[k]->request.key, &rows[k],
								before[k].exists);
		}
		answer_applied(members[k], &results[k]);
	}
}

/*
 * Peeks: the decisions of calls that record nothing, on the rows as last
 * committed, all at one moment (the keys of one group are one unit).
 */
static void
apply_peeks(PklimitEntry **members, int m, const PklimitTable *table,
			const PklimitRequest *volatile *running)
{
	PklimitRow	rows[PKLIMIT_BATCH_MAX];
	TimestampTz now;

	for (int k = 0; k < m; k++)
	{
		*running = &members[k]->request;
		(void) pklimit_store_read(table, members[k]->request.key, false,
								  &rows[k]);
	}
	now = GetCurrentTimestamp();
	for (int k = 0; k < m; k++)
	{
		PklimitResult result;

		pklimit_decide_peek(&rows[k], &members[k]->request.call, now, &result);
		answer_applied(members[k], &result);
	}
}

/* A count: the count of the key's open state, as last committed. */
static void
apply_count(PklimitEntry *e, const PklimitTable *table)
{
	PklimitRow	row;
	PklimitResult result = {0};

	(void) pklimit_store_read(table, e->request.key, false, &row);
	result.found = pklimit_state_count(&row, GetCurrentTimestamp(),
									   &result.count);
	answer_applied(e, &result);
}

/*
 * A decrement: events taken back from the key's open state, on its locked
 * row; a key with none is left as it is (no row is created).
 */
static void
apply_decrement(PklimitEntry *e, const PklimitTable *table)
{
	PklimitRow	before;
	PklimitRow	row;
	PklimitResult result;

	(void) pklimit_store_read(table, e->request.key, true, &before);
	row = before;
	pklimit_decide_decrement(&row, e->request.call.cost, GetCurrentTimestamp(),
							 &result);
	if (pklimit_rows_differ(&before, &row))
		pklimit_store_write(table, e->request.key, &row, true);
	answer_applied(e, &result);
}

/*
 * An acquire, a release or a renewal of a lease (lease.c) on the key's
 * locked row of platformkit_leases.  A new row that another node's worker
 * created meanwhile (on Citus) is read, locked and decided on again.
 */
static void
apply_lease(PklimitEntry *e, const PklimitTable *table)
{
	const PklimitRequest *r = &e->request;
	PklimitLeaseRow *row = palloc(sizeof(PklimitLeaseRow));
	PklimitResult result;

	for (int tries = 0;; tries++)
	{
		TimestampTz now;
		bool		changed = false;

		(void) pklimit_store_lease_read(table, r->key, row);
		now = GetCurrentTimestamp();
		switch (r->kind)
		{
			case PKLIMIT_OP_ACQUIRE:
				changed = pklimit_lease_acquire(row, r->call.max_count,
												r->call.window_usec, &r->token,
												now, &result);
				break;
			case PKLIMIT_OP_RELEASE:
				changed = pklimit_lease_release(row, &r->token, now, &result);
				break;
			case PKLIMIT_OP_RENEW:
				changed = pklimit_lease_renew(row, &r->token, r->call.window_usec,
											  now, &result);
				break;
			default:
				elog(ERROR, "pklimit: request %d is not a lease's", r->kind);
		}
		if (!changed || pklimit_store_lease_write(table, r->key, row, now))
			break;
		if (tries > 0)
			elog(ERROR, "pklimit: the leases of a key were created twice");
	}
	answer_applied(e, &result);
	pfree(row);
}

/*
 * Apply unit u of the n entries, whose head's request says what it is, and
 * answer its entries.  Before each statement, *running is set to the request
 * it runs for: a lock timeout it raises is put down to that request's key
 * (apply.c).  Returns false if its hits must be applied unfolded.
 */
bool
pklimit_apply_unit(PklimitEntry **entries, int n, int u,
				   const PklimitTable *table,
				   const PklimitRequest *volatile *running)
{
	PklimitEntry *members[PKLIMIT_BATCH_MAX];
	int			m;
	PklimitResult result = {0};

	members[0] = NULL;
	if ((m = members_of(entries, n, u, members)) == 0)
		elog(ERROR, "pklimit: unit %d has no entry", u);
	*running = &members[0]->request;
	switch (members[0]->request.kind)
	{
		case PKLIMIT_OP_HIT:
			return apply_hits(members, m, table);
		case PKLIMIT_OP_LIMIT:
			apply_limits(members, m, table, running);
			break;
		case PKLIMIT_OP_PEEK:
			apply_peeks(members, m, table, running);
			break;
		case PKLIMIT_OP_COUNT:
			apply_count(members[0], table);
			break;
		case PKLIMIT_OP_FORGET:
			result.found = pklimit_store_forget(table, members[0]->request.key);
			answer_applied(members[0], &result);
			break;
		case PKLIMIT_OP_DECREMENT:
			apply_decrement(members[0], table);
			break;
		case PKLIMIT_OP_ACQUIRE:
		case PKLIMIT_OP_RELEASE:
		case PKLIMIT_OP_RENEW:
			apply_lease(members[0], table);
			break;
		case PKLIMIT_OP_PURGE:
			elog(ERROR, "pklimit: a purge is not a unit of a batch");
			break;
	}
	return true;
}
