/*-------------------------------------------------------------------------
 *
 * entry.c
 *		The rules of a batch entry's state, which every step of the batch
 *		follows: worker.c's rounds, apply.c's transactions and the memory
 *		path's pass over a list (memory/batch.c).  An entry is answered
 *		without being applied, set aside for a locked row while its
 *		caller's budget allows another try, and waits with the entries it
 *		must not jump over.  Pure: nothing here touches the queue, a
 *		transaction or the table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "entry.h"
#include "xact.h"

/* Time kept in hand for an answer to reach a caller before its deadline. */
#define ANSWER_MS 5

/* Answer an entry without applying it. */
void
pklimit_answer_unapplied(PklimitEntry *entry, PklimitStatus status)
{
	memset(&entry->answer, 0, sizeof(entry->answer));
	entry->answer.status = status;
	entry->state = ENTRY_ANSWERED;
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

/*
 * Set an entry aside while its caller's budget allows a try later; answered
 * lock_timeout otherwise.  The requests of a group share their deadline,
 * and now is one reading of the clock for all of them, so a group is never
 * split.
 */
void
pklimit_set_aside(PklimitEntry *entry, TimestampTz now)
{
	pklimit_answer_unapplied(entry, PKLIMIT_LOCK_TIMEOUT);
	if (pklimit_worth_retrying(entry->request.deadline, now))
		entry->state = ENTRY_SET_ASIDE;
}

/*
 * Must request r wait with a request set aside (or about to be): is it of
 * the same group, or a write on its key where that one writes too?  So no
 * write jumps over one set aside, and a group is set aside whole.
 */
bool
pklimit_waits_with(const PklimitRequest *r, const PklimitRequest *set_aside)
{
	return (r->group != 0 && r->group == set_aside->group) ||
		(pklimit_op_rules(r->kind).writes &&
		 pklimit_op_rules(set_aside->kind).writes &&
		 pklimit_same_key(r, set_aside));
}
