/*-------------------------------------------------------------------------
 *
 * limit.c
 *		The rules of a limit, and nowhere else: the lengths a window (or a
 *		block) may have, and what one call does to a key's row, as pure
 *		functions of the row and the call: fixed windows aligned to the Unix
 *		epoch, one window per key at a time, cost, record_refused, block
 *		and the cap of a count.  The folded upsert (store.c's hit) applies
 *		the same rules in SQL: their fragments are written here, each beside
 *		the C it mirrors.  The README's table of rules and the conformance
 *		test's model say the same.  Nothing here reads or writes the table:
 *		unit.c brings the row and writes what comes out, store.c runs the
 *		statements.
 *
 * One call at time now on a key whose row is before:
 *
 *	blocked		before.blocked_until > now: refused; nothing changes
 *	peek		cost 0: allowed iff count + 1 <= max_count; nothing changes
 *	otherwise	allowed iff count + cost <= max_count (the sum saturating at
 *				the largest bigint, as the count does), where count is the
 *				count of the key's open window (0 if none is open); if
 *				recorded (allowed, or record_refused), the cost is added in
 *				the open window, or in a new window of the call's length
 *				starting at the fixed boundary before now; a refusal with a
 *				block starts one: blocked_until is now + block, or the end of
 *				the window if that is later
 *
 * In a call on several keys, a key is recorded if every key allows, or if
 * record_refused; its own refusal alone starts its block.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "pklimit.h"

/* Longest window accepted: far beyond any rate limit, far inside timestamptz. */
#define MAX_WINDOW_DAYS 3650000
#define MAX_WINDOW_YEARS 10000
#define MAX_WINDOW_USEC ((int64) MAX_WINDOW_DAYS * USECS_PER_DAY)

/*
 * What is wrong with a window, as its argument's error says it: the message
 * follows the argument's name, and %s in the hint is that name.
 */
typedef struct WindowProblem
{
	const char *message;
	const char *detail;
	const char *hint;
} WindowProblem;

static const WindowProblem window_problems[] = {
	[PKLIMIT_WINDOW_INFINITE] = {
		"must be finite", NULL,
		"Give the %s in days, hours, minutes or seconds, for example '15 minutes'."
	},
	[PKLIMIT_WINDOW_MONTHS] = {
		"must not contain months or years",
		"Months and years have no fixed length.",
		"Give the %s in days, hours, minutes or seconds, for example '30 days'."
	},
	[PKLIMIT_WINDOW_TOO_LONG] = {
		"is too long", NULL,
		"The longest %s is " CppAsString2(MAX_WINDOW_YEARS) " years ("
		CppAsString2(MAX_WINDOW_DAYS) " days)."
	},
	[PKLIMIT_WINDOW_NOT_POSITIVE] = {
		"must be positive", NULL,
		"Give a %s longer than zero, for example '15 minutes'."
	},
};

/*
 * A window's length in microseconds (days count as 24 hours), or what is
 * wrong with it: the rules of the window argument and of
 * pklimit.default_window.
 */
PklimitWindowCheck
pklimit_window_usec(const Interval *window, int64 *usec)
{
	if (!pklimit_interval_is_finite(window))
		return PKLIMIT_WINDOW_INFINITE;
	if (window->month != 0)
		return PKLIMIT_WINDOW_MONTHS;
	if (pg_mul_s64_overflow((int64) window->day, USECS_PER_DAY, usec) ||
		pg_add_s64_overflow(*usec, window->time, usec))
		*usec = (window->day < 0) ? -1 : MAX_WINDOW_USEC + 1;
	if (*usec > MAX_WINDOW_USEC)
		return PKLIMIT_WINDOW_TOO_LONG;
	if (*usec <= 0)
		return PKLIMIT_WINDOW_NOT_POSITIVE;
	return PKLIMIT_WINDOW_OK;
}

/* Explain a bad value of a window setting, in a GUC check hook. */
void
pklimit_window_guc_error(PklimitWindowCheck problem)
{
	const WindowProblem *p = &window_problems[problem];

	GUC_check_errdetail("The window %s.", p->message);
	GUC_check_errhint(p->hint, "window");
}

/*
 * A window (or a block: what names it) the caller gave, in microseconds:
 * days count as 24 hours.
 */
int64
pklimit_window_value(const Interval *window, const char *what)
{
	int64		usec;
	PklimitWindowCheck problem = pklimit_window_usec(window, &usec);

	if (problem != PKLIMIT_WINDOW_OK)
	{
		const WindowProblem *p = &window_problems[problem];

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s %s", what, p->message),
				 p->detail ? errdetail("%s", p->detail) : 0,
				 errhint(p->hint, what)));
	}
	return usec;
}

/*
 * The SQL fragments below are of the folded upsert (store.c), on the key's
 * row l: $1 is the key, $2 and $3 the start and end of the window the call
 * would start, $4 the events, $5 now.
 */

/* 1970-01-01 00:00:00+00 as a TimestampTz: where fixed windows are aligned */
#define UNIX_EPOCH \
	((TimestampTz) (UNIX_EPOCH_JDATE - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY)

/* The start of the fixed window of length window_usec that holds now. */
static TimestampTz
window_start(TimestampTz now, int64 window_usec)
{
	TimestampTz since_epoch = now - UNIX_EPOCH;
	int64		into = since_epoch % window_usec;

	return now - (into < 0 ? into + window_usec : into);
}

/*
 * The row of the window of length window_usec a call at now starts,
 * nothing counted in it yet: the upsert's $2 and $3.
 */
void
pklimit_new_window(TimestampTz now, int64 window_usec, PklimitRow *row)
{
	row->exists = true;
	row->window_start = window_start(now, window_usec);
	row->window_end = row->window_start + window_usec;
	row->count = 0;
}

/* Is the row's window open at now? */
bool
pklimit_window_open(const PklimitRow *row, TimestampTz now)
{
	return row->exists && row->window_end > now;
}

#define SQL_WINDOW_OPEN "l.window_end OPERATOR(pg_catalog.>) $5"

/* Is the key blocked at now?  A row without a block has blocked_until 0. */
static bool
blocked(const PklimitRow *row, TimestampTz now)
{
	return row->exists && row->blocked_until > now;
}

#define SQL_BLOCKED "l.blocked_until OPERATOR(pg_catalog.>) $5"

/* The cap of every count: the largest bigint. */
#define COUNT_MAX PG_INT64_MAX
#define SQL_COUNT_MAX "9223372036854775807::pg_catalog.int8"

/* Events added to a count: the sum saturates at the cap. */
int64
pklimit_add_events(int64 count, int64 events)
{
	int64		sum;

	if (pg_add_s64_overflow(count, events, &sum))
		return COUNT_MAX;
	return sum;
}

#define SQL_ADD_EVENTS \
	"CASE WHEN l.count OPERATOR(pg_catalog.>)" \
	"          (" SQL_COUNT_MAX " OPERATOR(pg_catalog.-) $4)" \
	"        THEN " SQL_COUNT_MAX \
	"        ELSE l.count OPERATOR(pg_catalog.+) $4 END"

/*
 * The decision of one call, before anything is recorded: whether the key's
 * own limit allows it, the count it sees and the end of the window it
 * counts in.
 */
void
pklimit_decide(const PklimitRow *before, const PklimitCall *call,
			   TimestampTz now, PklimitDecision *decision)
{
	bool		open = pklimit_window_open(before, now);
	int64		count = open ? before->count : 0;

	memset(decision, 0, sizeof(*decision));
	decision->count = count;
	decision->window_end = open ? before->window_end :
		window_start(now, call->window_usec) + call->window_usec;
	decision->blocked = blocked(before, now);
	/* a peek asks about one more event */
	decision->allowed = !decision->blocked &&
		pklimit_add_events(count, call->cost == 0 ? 1 : call->cost) <=
		call->max_count;
}

/*
 * Are the call's events recorded?  If its own decision allowed it (in a call
 * on several keys: every key's), or if record_refused.
 */
bool
pklimit_records(const PklimitCall *call, bool allowed)
{
	return allowed || call->record_refused;
}

/*
 * The row after the call, given its decision and whether its events are
 * recorded (pklimit_records).  The decision's count becomes the count after
 * the call.  Returns the events it recorded.
 */
int64
pklimit_apply_decision(const PklimitRow *before, const PklimitCall *call,
					   TimestampTz now, bool record, PklimitDecision *decision,
					   PklimitRow *after)
{
	*after = *before;
	if (decision->blocked || call->cost == 0)
		return 0;				/* nothing changes */
	if (record)
	{
		if (!pklimit_window_open(before, now))
			pklimit_new_window(now, call->window_usec, after);
		after->count = pklimit_add_events(after->count, call->cost);
		after->updated_at = now;
		decision->count = after->count;
	}
	if (!decision->allowed && call->block_usec > 0)
	{
		if (!pklimit_window_open(after, now))
		{
			/* a block needs a row: the window of the moment, nothing in it */
			pklimit_new_window(now, call->window_usec, after);
			after->updated_at = now;
		}
		after->blocked_until = Max(now + call->block_usec, after->window_end);
		decision->blocked = true;
	}
	return record ? call->cost : 0;
}

/* When the refusal of a call ends, for reset_at and retry_after. */
TimestampTz
pklimit_refused_until(const PklimitRow *after, const PklimitDecision *decision,
					  TimestampTz now)
{
	if (blocked(after, now))
		return after->blocked_until;
	return decision->window_end;
}

/*
 * The folded upsert: consecutive calls on one key that record every event
 * and start no block, applied as one INSERT ... ON CONFLICT DO UPDATE of all
 * their events, which cannot know whether any is allowed before it writes.
 * Each call is then decided in C, in order, as if alone on the row the calls
 * before it left, from the row the upsert started from (pklimit_fold_start).
 */
bool
pklimit_folds(const PklimitCall *call)
{
	return call->cost > 0 && pklimit_records(call, false) &&
		call->block_usec == 0;
}

/*
 * Can a fold of calls whose events bring the key's count to count tell each
 * call its own count?  Not several at the cap: a count there does not say
 * where their events started.
 */
bool
pklimit_fold_known(int64 count, int calls)
{
	return calls == 1 || count < COUNT_MAX;
}

/*
 * The row the fold of events started from, as its calls decide on it, given
 * the row the upsert returned: a blocked key's row is unchanged; any other's
 * counted the events in its open window or a new one (which decides as one
 * counted from 0).
 */
void
pklimit_fold_start(const PklimitRow *after, int64 events, TimestampTz now,
				   PklimitRow *before)
{
	*before = *after;
	if (!blocked(after, now))
		before->count -= events;
}

/*
 * The upsert's SET list, the rules above in SQL: a blocked key's row is
 * written unchanged (0.2.0's table), so that the one statement still returns
 * it with its block (a WHERE on the update would return no row, and cost a
 * second statement); an open window counts the events, whatever the window
 * length of the call, a closed one gives way to the call's new window.
 */
#define HIT_RULES_SQL(unless_blocked) \
	" count = CASE" unless_blocked(" THEN l.count") \
	"   WHEN " SQL_WINDOW_OPEN \
	"   THEN " SQL_ADD_EVENTS \
	"   ELSE $4 END," \
	" window_start = CASE" unless_blocked(" THEN l.window_start") \
	"   WHEN " SQL_WINDOW_OPEN \
	"   THEN l.window_start ELSE $2 END," \
	" window_end = CASE" unless_blocked(" THEN l.window_end") \
	"   WHEN " SQL_WINDOW_OPEN \
	"   THEN l.window_end ELSE $3 END," \
	" updated_at = CASE" unless_blocked(" THEN l.updated_at") \
	"   WHEN true THEN $5 END"
#define UNLESS_BLOCKED(then) " WHEN " SQL_BLOCKED then
#define NEVER_BLOCKED(then) ""

const char	pklimit_hit_rules_sql[] = HIT_RULES_SQL(UNLESS_BLOCKED);

/* the table of 0.1.0 has no blocked_until: no key is blocked */
const char	pklimit_hit_rules_no_block_sql[] = HIT_RULES_SQL(NEVER_BLOCKED);
