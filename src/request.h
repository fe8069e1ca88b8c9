/*-------------------------------------------------------------------------
 *
 * request.h
 *		What a caller hands a worker and what it gets back: one request per
 *		key (the requests of one call on several keys make a group), the
 *		kinds of request and the rules of each, and the answer; and the
 *		stored key and the global order of keys (key.c).  A call travels
 *		caller -> queue -> worker -> table -> answer, or, for a key the
 *		memory path holds, caller -> memory -> answer (CONTRIBUTING.md,
 *		"Code layout").
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_REQUEST_H
#define PKLIMIT_REQUEST_H

#include "utils/uuid.h"

#include "limit.h"

/* Longest stored key kept readable; longer ones are stored as a digest. */
#define PKLIMIT_MAX_READABLE_KEY 256

/* What one request asks of the table. */
typedef enum PklimitOpKind
{
	PKLIMIT_OP_HIT,				/* record events (a cost, every attempt
								 * counts, no block): one upsert */
	PKLIMIT_OP_LIMIT,			/* record under any other rules, or as one key
								 * of several: the row is locked, the call
								 * decided (limit.c), the row written;
								 * consecutive ones on a key (not of a group)
								 * share the read and the write */
	PKLIMIT_OP_PEEK,			/* cost 0: decide without recording */
	PKLIMIT_OP_COUNT,			/* read the count of the open window */
	PKLIMIT_OP_FORGET,			/* delete the key's row */
	PKLIMIT_OP_DECREMENT,		/* take events back from the key's open state */
	PKLIMIT_OP_ACQUIRE,			/* take a lease if fewer than max_count are
								 * live (lease.c): the key's row of
								 * platformkit_leases, locked */
	PKLIMIT_OP_RELEASE,			/* free a lease */
	PKLIMIT_OP_RENEW,			/* extend a live lease */
	PKLIMIT_OP_PURGE			/* delete rows whose window ended before
								 * cutoff */
} PklimitOpKind;

/* The rules of each kind, kept here and nowhere else. */
typedef struct PklimitOpRules
{
	bool		writes;			/* changes the row: can meet a row lock, and
								 * waits behind writes set aside on its key */
	bool		folds;			/* consecutive ones on a key (not of a group):
								 * applied together, each answered as if alone */
	bool		in_batch;		/* applied in the worker's batches; false:
								 * runs in steps between them, and its caller
								 * waits for the end once a worker has taken
								 * it */
} PklimitOpRules;

static inline PklimitOpRules
pklimit_op_rules(PklimitOpKind kind)
{
	static const PklimitOpRules rules[] = {
		/* writes, folds, in_batch */
		[PKLIMIT_OP_HIT] = {true, true, true},
		[PKLIMIT_OP_LIMIT] = {true, true, true},
		[PKLIMIT_OP_PEEK] = {false, false, true},
		[PKLIMIT_OP_COUNT] = {false, false, true},
		[PKLIMIT_OP_FORGET] = {true, false, true},
		[PKLIMIT_OP_DECREMENT] = {true, false, true},
		[PKLIMIT_OP_ACQUIRE] = {true, false, true},
		[PKLIMIT_OP_RELEASE] = {true, false, true},
		[PKLIMIT_OP_RENEW] = {true, false, true},
		[PKLIMIT_OP_PURGE] = {true, false, false},
	};

	return rules[kind];
}

/* An operation on a key's leases (platformkit_leases), not its count? */
static inline bool
pklimit_op_is_lease(PklimitOpKind kind)
{
	return kind == PKLIMIT_OP_ACQUIRE || kind == PKLIMIT_OP_RELEASE ||
		kind == PKLIMIT_OP_RENEW;
}

/* Why an operation was not applied; PKLIMIT_OK when it was. */
typedef enum PklimitStatus
{
	PKLIMIT_OK = 0,
	PKLIMIT_TIMEOUT,			/* no answer within pklimit.timeout */
	PKLIMIT_QUEUE_FULL,			/* every queue slot in use */
	PKLIMIT_NO_WORKER,			/* no worker could be started */
	PKLIMIT_READ_ONLY,			/* hot standby: writes go to the primary */
	PKLIMIT_LOCK_TIMEOUT,		/* the budget ran out waiting for a row lock */
	PKLIMIT_NO_TABLE,			/* platformkit_limits is missing */
	PKLIMIT_APPLY_ERROR			/* any other error while applying */
} PklimitStatus;

/*
 * One request as the caller hands it to a worker.  A call on several keys
 * makes one request per key, queued together and applied together: the
 * requests of one group.
 */
typedef struct PklimitRequest
{
	PklimitOpKind kind;
	Oid			dboid;			/* database the caller is connected to */
	Oid			nspid;			/* schema of the extension's table */
	PklimitCall call;			/* for a hit, a limit, a peek; a decrement's
								 * cost */
	uint64		group;			/* 0, or the group of requests it is one of */
	int			group_size;		/* requests in its group (1 if none) */
	bool		track_stats;	/* its events count in pklimit_stats */
	TimestampTz deadline;		/* the caller stops waiting at this moment */
	TimestampTz cutoff;			/* for a purge */
	pg_uuid_t	token;			/* for a lease: the token it gives or names;
								 * call.max_count is max_concurrent and
								 * call.window_usec the lease (0: a renewal by
								 * the lease's own length) */
	char		key[PKLIMIT_MAX_READABLE_KEY + 1];	/* stored key */
} PklimitRequest;

/*
 * The requests of a group are queued, taken, applied and kept next to each
 * other, in arrival order.  Walks int i over the run of one group's
 * requests that starts at index first, of n; group_of(i) is the group of
 * request i (0: in none, a run of one).
 */
#define pklimit_foreach_in_group(i, first, n, group_of) \
	for (int i = (first); \
		 i < (n) && (i == (first) || \
					 (group_of(first) != 0 && group_of(i) == group_of(first))); \
		 i++)

/*
 * The longest message of a worker's error that reaches its caller, in bytes
 * of the database encoding; a longer one is cut at a character boundary and
 * ends in PKLIMIT_MESSAGE_CUT.  The worker logs it whole.
 */
#define PKLIMIT_MESSAGE_MAX 512
#define PKLIMIT_MESSAGE_CUT " [...]"

/* The answer to one request, from the worker or the memory path. */
typedef struct PklimitAnswer
{
	PklimitStatus status;
	bool		unreplicated;	/* committed locally, not confirmed by the
								 * synchronous standbys */
	int			sqlstate;		/* for an error while applying */
	char		message[PKLIMIT_MESSAGE_MAX + 1];	/* for the same error */
	PklimitResult result;
} PklimitAnswer;

/* key.c: the stored key, and the order of keys */
extern char *pklimit_stored_key(text *key);
extern char *pklimit_stored_key_in(text *key, const char *policy);
extern bool pklimit_same_key(const PklimitRequest *a, const PklimitRequest *b);
extern int	pklimit_key_order(const PklimitRequest *a, const PklimitRequest *b);

#endif							/* PKLIMIT_REQUEST_H */
