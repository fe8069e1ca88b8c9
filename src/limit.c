/*-------------------------------------------------------------------------
 *
 * limit.c
 *		The rules of a limit: the lengths a window (or a block) may have,
 *		and, as pure functions of a key's row and a call, fixed windows
 *		aligned to the Unix epoch, one window per key at a time, cost,
 *		record_refused and block.  The README's table of rules and the
 *		conformance test's model say the same.  Nothing here reads or writes
 *		the table: unit.c brings the row and writes what comes out.
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

/* 1970-01-01 00:00:00+00 as a TimestampTz: where fixed windows are aligned */
#define UNIX_EPOCH \
	((TimestampTz) (UNIX_EPOCH_JDATE - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY)

/* The start of the fixed window of length window_usec that holds now. */
TimestampTz
pklimit_window_start(TimestampTz now, int64 window_usec)
{
	TimestampTz since_epoch = now - UNIX_EPOCH;
	int64		into = since_epoch % window_usec;

	return now - (into < 0 ? into + window_usec : into);
}

/* Is the row's window open at now? */
static bool
window_open(const PklimitRow *row, TimestampTz now)
{
	return row->exists && row->window_end > now;
}

/*
 * The decision of one call, before anything is recorded: whether the key's
 * own limit allows it, the count it sees and the end of the window it
 * counts in.
 */
void
pklimit_decide(const PklimitRow *before, const PklimitCall *call,
			   TimestampTz now, PklimitDecision *decision)
{
	bool		open = window_open(before, now);
	int64		count = open ? before->count : 0;

	memset(decision, 0, sizeof(*decision));
	decision->count = count;
	decision->window_end = open ? before->window_end :
		pklimit_window_start(now, call->window_usec) + call->window_usec;
	decision->blocked = before->exists && before->blocked_until > now;
	if (decision->blocked)
		decision->allowed = false;
	else
	{
		/* a peek asks about one more event; the count saturates */
		int64		reached;

		if (pg_add_s64_overflow(count, call->cost == 0 ? 1 : call->cost,
								&reached))
			reached = PG_INT64_MAX;
		decision->allowed = (reached <= call->max_count);
	}
}

/*
 * The row after the call, given its decision and whether its events are
 * recorded (record: its own decision, or its group's, allowed it, or
 * record_refused).  The decision's count becomes the count after the call.
 */
void
pklimit_apply_decision(const PklimitRow *before, const PklimitCall *call,
					   TimestampTz now, bool record, PklimitDecision *decision,
					   PklimitRow *after)
{
	bool		open = window_open(before, now);

	*after = *before;
	if (decision->blocked || call->cost == 0)
		return;					/* nothing changes */
	if (record)
	{
		if (!open)
		{
			after->exists = true;
			after->window_start = pklimit_window_start(now, call->window_usec);
			after->window_end = after->window_start + call->window_usec;
			after->count = 0;
		}
		after->count = (after->count > PG_INT64_MAX - call->cost) ?
			PG_INT64_MAX : after->count + call->cost;
		after->updated_at = now;
		decision->count = after->count;
	}
	if (!decision->allowed && call->block_usec > 0)
	{
		if (!after->exists || !window_open(after, now))
		{
			/* a block needs a row: the window of the moment, nothing in it */
			after->exists = true;
			after->window_start = pklimit_window_start(now, call->window_usec);
			after->window_end = after->window_start + call->window_usec;
			after->count = 0;
			after->updated_at = now;
		}
		after->blocked_until = Max(now + call->block_usec, after->window_end);
		decision->blocked = true;
	}
}

/* When the refusal of a call ends, for reset_at and retry_after. */
TimestampTz
pklimit_refused_until(const PklimitRow *after, const PklimitDecision *decision,
					  TimestampTz now)
{
	if (after->exists && after->blocked_until > now)
		return after->blocked_until;
	return decision->window_end;
}
