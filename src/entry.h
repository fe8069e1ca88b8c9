/*-------------------------------------------------------------------------
 *
 * entry.h
 *		A batch entry: one request of the batch a worker works on, with its
 *		queue slot, its answer and its state; and the rules of that state
 *		(entry.c), which every step of the batch follows: worker.c's rounds,
 *		apply.c's transactions and the memory path's pass over a list
 *		(memory/batch.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_ENTRY_H
#define PKLIMIT_ENTRY_H

#include "request.h"

/* Most requests a worker applies in one transaction: a batch's entries. */
#define PKLIMIT_BATCH_MAX 256

typedef enum PklimitEntryState
{
	ENTRY_NEW,					/* taken from the queue this round: to try */
	ENTRY_RETRY,				/* set aside before: tried again this round */
	ENTRY_SET_ASIDE,			/* waits for a locked row: a later round */
	ENTRY_ANSWERED				/* has its answer, for its caller */
} PklimitEntryState;

typedef struct PklimitEntry
{
	PklimitRequest request;
	int			slot;			/* its queue slot */
	PklimitEntryState state;
	PklimitAnswer answer;
	/* apply.c's, within one list of entries */
	int			unit;			/* the statement that applies it */
	bool		unfold;			/* apply one statement per event */
	bool		met_lock;		/* met a row locked by another transaction */
	bool		direct;			/* on Citus, applied on its shard on this
								 * node, in this transaction (apply.c) */
	/* the memory path's (memory/batch.c) */
	bool		memory_read;	/* memory_row holds its key's row as the
								 * transaction that applied it left it, to
								 * read in after the commit */
	bool		memory_fell_back;	/* counted as a fallback already */
	bool		memory_missed;	/* counted as a miss already */
	bool		memory_kept_out;	/* not to be read in (the admission rule
									 * refused its key this round) */
	PklimitRow	memory_row;
} PklimitEntry;

extern void pklimit_answer_unapplied(PklimitEntry *entry, PklimitStatus status);
extern void pklimit_set_aside(PklimitEntry *entry, TimestampTz now);
extern bool pklimit_waits_with(const PklimitRequest *r,
							   const PklimitRequest *set_aside);
extern bool pklimit_worth_retrying(TimestampTz deadline, TimestampTz now);

#endif							/* PKLIMIT_ENTRY_H */
