/*-------------------------------------------------------------------------
 *
 * limit.c
 *		The rules of a limit, and nowhere else: the lengths a window (or a
 *		block) may have, the algorithms (fixed window, GCRA, sliding
 *		window), and what one call does to a key's row, as pure functions
 *		of the row and the call: one state per key, cost, record_refused,
 *		block and the cap of a count.  The folded upsert (store.c's hit)
 *		applies the fixed window's rules in SQL: their fragments are written
 *		here, each beside the C it mirrors.  docs/algorithms.md says the
 *		same, and the conformance tests' models check it.  Nothing here
 *		reads or writes the table: unit.c brings the row and writes what
 *		comes out, store.c runs the statements.
 *
 * One call at time now on a key whose row is before:
 *
 *	blocked		before.blocked_until > now: refused; nothing changes
 *	state		the row's state if open at now (a fixed window not ended, a
 *				GCRA bucket not empty, a sliding window's count still
 *				weighing), decided by its algorithm and window; otherwise a
 *				new, empty state of the call's algorithm and window
 *	peek		cost 0: allowed iff the state allows one event more;
 *				nothing changes
 *	otherwise	allowed iff the state allows cost events more under
 *				max_count; if recorded (allowed, or record_refused), the
 *				state counts them; a refusal with a block starts one:
 *				blocked_until is now + block, or when the refusal would end
 *				without it if that is later
 *
 * Decisions are exact: integers, scaled and compared in 128 bits, never a
 * rounded emission interval or a floating-point weight.
 *
 * In a call on several keys, a key is recorded if every key allows, or if
 * record_refused; its own refusal alone starts its block.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "limit.h"

/* The decisions' arithmetic is in 128 bits, which PostgreSQL's has too. */
#ifndef HAVE_INT128
#error "pklimit needs a compiler with 128-bit integers"
#endif

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

/* The names of the algorithms, as the algorithm argument and the row say. */
static const char *const algorithm_names[] = {
	[PKLIMIT_FIXED] = "fixed",
	[PKLIMIT_GCRA] = "gcra",
	[PKLIMIT_SLIDING] = "sliding",
};

const char *
pklimit_algorithm_name(PklimitAlgorithm algorithm)
{
	return algorithm_names[algorithm];
}

/* The algorithm of a name; false if there is none of that name. */
bool
pklimit_algorithm_of_name(const char *name, PklimitAlgorithm *algorithm)
{
	for (int a = 0; a < lengthof(algorithm_names); a++)
		if (strcmp(name, algorithm_names[a]) == 0)
		{
			*algorithm = (PklimitAlgorithm) a;
			return true;
		}
	return false;
}

/* The algorithm a caller named. */
PklimitAlgorithm
pklimit_algorithm_value(text *name, const char *what)
{
	char	   *s = text_to_cstring(name);
	PklimitAlgorithm algorithm;

	if (!pklimit_algorithm_of_name(s, &algorithm))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown %s \"%s\"", what, s),
				 errhint("The algorithms are fixed, gcra and sliding.")));
	pfree(s);
	return algorithm;
}

static const char *const anchor_names[] = {
	[PKLIMIT_ANCHOR_EPOCH] = "epoch",
	[PKLIMIT_ANCHOR_FIRST] = "first",
};

/*
 * The anchor a caller named, for a call of algorithm: only a fixed window
 * starts where its first event is (GCRA has no window to start, and the
 * sliding window weighs the window before, which must end where the current
 * one starts).
 */
PklimitAnchor
pklimit_anchor_value(text *name, PklimitAlgorithm algorithm)
{
	char	   *s = text_to_cstring(name);
	int			anchor = -1;

	for (int a = 0; a < lengthof(anchor_names); a++)
		if (strcmp(s, anchor_names[a]) == 0)
			anchor = a;
	if (anchor < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown anchor \"%s\"", s),
				 errhint("The anchors are epoch (windows aligned to the Unix epoch) and first (a window starts at its first event).")));
	if (anchor != PKLIMIT_ANCHOR_EPOCH && algorithm != PKLIMIT_FIXED)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("anchor \"%s\" is for the fixed window only", s),
				 errdetail("The algorithm is %s.", pklimit_algorithm_name(algorithm)),
				 errhint("Leave anchor out, or give 'epoch', with algorithm %s.",
						 pklimit_algorithm_name(algorithm))));
	pfree(s);
	return (PklimitAnchor) anchor;
}

/*
 * The SQL fragments below are of the folded upsert (store.c), on the key's
 * row l: $1 is the key, $2 and $3 the start and end of the window the call
 * would start, $4 the events, $5 now, $6 the last call's max_count.
 */

/* 1970-01-01 00:00:00+00 as a TimestampTz: where fixed windows are aligned */
#define UNIX_EPOCH \
	((TimestampTz) (UNIX_EPOCH_JDATE - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY)

/* The start of the epoch-aligned window of length window_usec holding now. */
static TimestampTz
window_start(TimestampTz now, int64 window_usec)
{
	TimestampTz since_epoch = now - UNIX_EPOCH;
	int64		into = since_epoch % window_usec;

	return now - (into < 0 ? into + window_usec : into);
}

/*
 * The fixed window a call at now starts: [*start, *start + *window), at the
 * event (anchor first), at the calendar's boundary before it (of the two
 * windows the call carries, the one holding now), or at a multiple of the
 * call's window since the epoch.
 */
static void
fixed_window(TimestampTz now, const PklimitCall *call, TimestampTz *start,
			 int64 *window)
{
	if (call->calendar != PKLIMIT_CALENDAR_NONE)
	{
		int			i = now < call->calendar_at[1] ? 0 : 1;

		*start = call->calendar_at[i];
		*window = call->calendar_at[i + 1] - call->calendar_at[i];
		return;
	}
	*window = call->window_usec;
	*start = call->anchor == PKLIMIT_ANCHOR_FIRST ? now :
		window_start(now, call->window_usec);
}

/*
 * The row of the fixed window a call at now starts, nothing counted in it
 * yet: the upsert's $2 and $3.
 */
void
pklimit_new_window(TimestampTz now, const PklimitCall *call, PklimitRow *row)
{
	int64		window;

	memset(row, 0, sizeof(*row));
	row->exists = true;
	row->algorithm = PKLIMIT_FIXED;
	fixed_window(now, call, &row->window_start, &window);
	row->window_end = row->window_start + window;
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

/* a / b rounded up, for b > 0 */
static int128
ceil_div(int128 a, int128 b)
{
	return a > 0 ? (a + b - 1) / b : -((-a) / b);
}

/* A count of 128 bits, held to the cap. */
static int64
capped(int128 count)
{
	return count > COUNT_MAX ? COUNT_MAX : (int64) count;
}

/*
 * A key's state at the moment of a call, as the call decides on it and
 * changes it: the open state of the key's row, or a new, empty one of the
 * call's algorithm and window.
 *
 * fixed: the window [start, start + window) and its count.
 * gcra: tat = since + steps * window / max, exactly (since alone when max
 *		is 0, when steps is 0 too).
 * sliding: the window [start, start + window) holding now, current its
 *		count, previous the count of the window before.
 */
typedef struct State
{
	PklimitAlgorithm algorithm;
	int64		window;
	bool		from_row;		/* the row's open state */
	TimestampTz start;			/* fixed, sliding */
	int64		count;			/* fixed: the window's; sliding: current */
	int64		previous;		/* sliding */
	TimestampTz since;			/* gcra */
	int64		steps;
	int64		max;
} State;

/* The window of a row's state: every algorithm keeps it the same way. */
static int64
row_window(const PklimitRow *row)
{
	return row->window_end - row->window_start;
}

/* GCRA: (tat - now) * max, the bucket's level scaled, for max > 0. */
static int128
gcra_level(const State *st, TimestampTz now)
{
	return (int128) (st->since - now) * st->max + (int128) st->steps * st->window;
}

/* GCRA: tat rounded up to a microsecond. */
static TimestampTz
gcra_tat_ceil(const State *st)
{
	if (st->steps == 0)
		return st->since;
	return st->since + (int64) ceil_div((int128) st->steps * st->window, st->max);
}

/*
 * Is the state of row open at now: a fixed window not yet ended, a GCRA
 * bucket not yet empty, a sliding window's count still weighing (until the
 * end of the window after its current one)?
 */
static bool
row_open(const PklimitRow *row, TimestampTz now)
{
	if (!row->exists)
		return false;
	switch (row->algorithm)
	{
		case PKLIMIT_FIXED:
			break;
		case PKLIMIT_GCRA:
			if (row->count == 0 || row->max_count <= 0)
				return row->window_start > now;
			return (int128) (row->window_start - now) * row->max_count +
				(int128) row->count * row_window(row) > 0;
		case PKLIMIT_SLIDING:
			return row->window_end + row_window(row) > now;
	}
	return row->window_end > now;
}

/* Whole windows moved into since, so that steps stays below max. */
static void
gcra_normalize(State *st, int128 steps)
{
	int128		windows = st->max > 0 ? steps / st->max : 0;

	st->since += (int64) windows * st->window;
	st->steps = (int64) (steps - windows * st->max);
}

/* The state a call at now decides on (the top of the file). */
static void
state_of(const PklimitRow *row, const PklimitCall *call, TimestampTz now,
		 State *st)
{
	memset(st, 0, sizeof(*st));
	st->from_row = row_open(row, now);
	st->algorithm = st->from_row ? row->algorithm : call->algorithm;
	st->window = st->from_row ? row_window(row) : call->window_usec;
	switch (st->algorithm)
	{
		case PKLIMIT_FIXED:
			if (st->from_row)
				st->start = row->window_start;
			else
				fixed_window(now, call, &st->start, &st->window);
			st->count = st->from_row ? row->count : 0;
			break;
		case PKLIMIT_GCRA:
			st->since = st->from_row ? row->window_start : now;
			st->steps = st->from_row ? row->count : 0;
			st->max = st->from_row ? row->max_count : call->max_count;
			/* steps of another max_count: rounded up to the call's */
			if (call->max_count > 0 && st->max != call->max_count)
			{
				int128		steps = st->steps == 0 ? 0 :
				ceil_div((int128) st->steps * call->max_count, st->max);

				st->max = call->max_count;
				gcra_normalize(st, steps);
			}
			break;
		case PKLIMIT_SLIDING:
			st->start = window_start(now, st->window);
			/* (a clock that went back finds the row's window later) */
			if (st->from_row && row->window_start >= st->start)
			{
				st->start = row->window_start;
				st->count = row->count;
				st->previous = row->previous_count;
			}
			else if (st->from_row)
				st->previous = row->count;	/* the window before */
			break;
	}
}

/* Does the state allow events more, under max_count, at now? */
static bool
state_allows(const State *st, int64 max_count, int64 events, TimestampTz now)
{
	int128		w = st->window;

	if (max_count == 0)
		return false;
	switch (st->algorithm)
	{
		case PKLIMIT_FIXED:
			return pklimit_add_events(st->count, events) <= max_count;
		case PKLIMIT_GCRA:
			return Max(gcra_level(st, now), 0) + events * w <=
				w * max_count;
		case PKLIMIT_SLIDING:
			return (int128) st->previous * (w - (now - st->start)) +
				((int128) st->count + events) * w <= (int128) max_count * w;
	}
	return false;
}

/* Record a call's events in the state; allowed: its limit allowed them. */
static void
state_record(State *st, const PklimitCall *call, bool allowed,
			 TimestampTz now)
{
	switch (st->algorithm)
	{
		case PKLIMIT_FIXED:
		case PKLIMIT_SLIDING:
			st->count = pklimit_add_events(st->count, call->cost);
			break;
		case PKLIMIT_GCRA:
			{
				int128		steps;

				/* an empty bucket starts again from now */
				if (st->max == 0 || gcra_level(st, now) <= 0)
				{
					st->since = now;
					st->steps = 0;
				}
				st->max = call->max_count;
				steps = (int128) st->steps + call->cost;
				/* a refusal fills the bucket at most: tat <= now + window */
				if (!allowed &&
					(st->max == 0 ||
					 (int128) (st->since - now) * st->max +
					 steps * st->window > (int128) st->window * st->max))
				{
					st->since = now + st->window;
					steps = 0;
				}
				gcra_normalize(st, steps);
			}
			break;
	}
}

/* The row of a state, as the table keeps it (docs/algorithms.md). */
static void
state_to_row(const State *st, TimestampTz now, PklimitRow *row)
{
	row->exists = true;
	row->algorithm = st->algorithm;
	row->previous_count = 0;
	row->expires_at = 0;
	switch (st->algorithm)
	{
		case PKLIMIT_FIXED:
			row->window_start = st->start;
			row->count = st->count;
			break;
		case PKLIMIT_GCRA:
			row->window_start = st->since;
			row->count = st->steps;
			row->max_count = st->max;
			break;
		case PKLIMIT_SLIDING:
			row->window_start = st->start;
			row->count = st->count;
			row->previous_count = st->previous;
			row->expires_at = st->start + 2 * st->window;
			break;
	}
	row->window_end = row->window_start + st->window;
}

/* The state's count at now, for the caller: in the state's terms. */
static int64
state_count(const State *st, TimestampTz now)
{
	int128		w = st->window;

	switch (st->algorithm)
	{
		case PKLIMIT_FIXED:
			return st->count;
		case PKLIMIT_GCRA:
			if (st->max == 0)
				return 0;
			return capped(Max(ceil_div(gcra_level(st, now), w), 0));
		case PKLIMIT_SLIDING:
			return capped(ceil_div((int128) st->previous * (w - (now - st->start)) +
								   (int128) st->count * w, w));
	}
	return 0;
}

/*
 * When the state is back to zero: a fixed window's end (the window it
 * counts in, if it counts, of the row's state only), a GCRA bucket's tat,
 * the end of the window after a sliding window's last events; now if
 * nothing weighs.
 */
static TimestampTz
state_reset(const State *st, bool counts, TimestampTz now)
{
	TimestampTz reset = now;

	switch (st->algorithm)
	{
		case PKLIMIT_FIXED:
			if (counts || st->from_row)
				reset = st->start + st->window;
			break;
		case PKLIMIT_GCRA:
			reset = gcra_tat_ceil(st);
			break;
		case PKLIMIT_SLIDING:
			if (st->count > 0)
				reset = st->start + 2 * st->window;
			else if (st->previous > 0)
				reset = st->start + st->window;
			break;
	}
	return Max(reset, now);
}

/*
 * When a call of events under max_count, at most max_count, would next be
 * allowed on the state, if nothing else were recorded.
 */
static TimestampTz
state_retry(const State *st, int64 max_count, int64 events, TimestampTz now)
{
	int128		w = st->window;
	TimestampTz retry;

	switch (st->algorithm)
	{
		case PKLIMIT_FIXED:
			retry = st->start + st->window;
			break;
		case PKLIMIT_GCRA:
			{
				/* max(tat, now) + events * T - window, scaled by max */
				int128		late = Max(gcra_level(st, now), 0) +
				events * w - w * max_count;

				retry = now + (int64) Max(ceil_div(late, max_count), 0);
			}
			break;
		case PKLIMIT_SLIDING:
			{
				int128		room = (int128) max_count - st->count - events;

				/* in the current window, as the previous count weighs less */
				if (room >= 0 && st->previous > 0 &&
					ceil_div(w * ((int128) st->previous - room), st->previous) < w)
					retry = st->start + (int64)
						Max(ceil_div(w * ((int128) st->previous - room),
									 st->previous), 0);
				else if (room >= 0 && st->previous == 0)
					retry = now;
				/* in the next, where the current count is the previous */
				else if (st->count == 0)
					retry = st->start + st->window;
				else
					retry = st->start + st->window + (int64)
						Max(ceil_div(w * ((int128) st->count + events - max_count),
									 st->count), 0);
			}
			break;
		default:
			retry = now;
	}
	return Max(retry, now);
}

/*
 * When the refusal of a call of events under max_count on the state would
 * end without a block, for the block the call starts: when such a call
 * would be allowed, or, where no wait allows it, the state's reset, or a
 * window if the key holds nothing (describe answers the same).
 */
static TimestampTz
refusal_end(const State *st, int64 max_count, int64 events, TimestampTz now)
{
	TimestampTz reset;

	if (events <= max_count)
		return state_retry(st, max_count, events, now);
	reset = state_reset(st, true, now);
	return reset > now ? reset : now + st->window;
}

/* The count, reset and retry a call on the state at now answers. */
static void
describe(const State *st, const PklimitRow *after, const PklimitCall *call,
		 TimestampTz now, PklimitDecision *decision)
{
	int64		events = Max(call->cost, 1);
	bool		counts = !decision->blocked || st->from_row;

	/* a GCRA bucket's events are counted in the call's steps */
	decision->count = (st->algorithm == PKLIMIT_GCRA && call->max_count == 0) ?
		0 : state_count(st, now);
	decision->reset_at = state_reset(st, counts, now);
	if (blocked(after, now))
		decision->reset_at = Max(decision->reset_at, after->blocked_until);

	/*
	 * Refused by a block alone: the block's end; where no wait allows: the
	 * reset (a block's end included), or a window if the key holds nothing.
	 */
	if (decision->allowed || state_allows(st, call->max_count, events, now))
		decision->retry_at = now;
	else if (events > call->max_count)
		decision->retry_at = decision->reset_at > now ? decision->reset_at :
			now + st->window;
	else
		decision->retry_at = state_retry(st, call->max_count, events, now);
	if (blocked(after, now))
		decision->retry_at = Max(decision->retry_at, after->blocked_until);
}

/*
 * The decision of one call, before anything is recorded: whether the key's
 * own limit allows it, and what it sees.
 */
void
pklimit_decide(const PklimitRow *before, const PklimitCall *call,
			   TimestampTz now, PklimitDecision *decision)
{
	State		st;

	memset(decision, 0, sizeof(*decision));
	state_of(before, call, now, &st);
	decision->blocked = blocked(before, now);
	/* a peek asks about one more event */
	decision->allowed = !decision->blocked &&
		state_allows(&st, call->max_count, Max(call->cost, 1), now);
	describe(&st, before, call, now, decision);
}

/*
 * Is the state of row open at now, and what is its count, for
 * pklimit_count (the row's own max_count for a GCRA bucket)?
 */
bool
pklimit_state_count(const PklimitRow *row, TimestampTz now, int64 *count)
{
	PklimitCall call = {0};
	State		st;

	*count = 0;
	if (!row_open(row, now))
		return false;
	call.max_count = row->max_count;
	state_of(row, &call, now, &st);
	*count = state_count(&st, now);
	return true;
}

/*
 * A decrement at now: up to cost events taken back from the open state of
 * row (docs/algorithms.md, "Taking events back"), never below zero.  A
 * fixed window's count goes down; a sliding window's current count, then
 * its previous one; a GCRA bucket's tat by cost emission intervals, never
 * before now (an emptied bucket is closed; one of max_count 0, whose
 * interval is unbounded, is emptied by any).  Nothing else changes, a block
 * included.  Returns false, with after as before and *count 0, if no state
 * is open; else *count is the state's count after, as pklimit_count reads
 * it.
 */
bool
pklimit_take_back(const PklimitRow *before, int64 cost, TimestampTz now,
				  PklimitRow *after, int64 *count)
{
	PklimitCall call = {0};
	State		st;
	bool		changed = false;

	*after = *before;
	*count = 0;
	if (!row_open(before, now))
		return false;
	call.max_count = before->max_count;
	state_of(before, &call, now, &st);
	if (cost > 0)
	{
		switch (st.algorithm)
		{
			case PKLIMIT_FIXED:
				changed = st.count > 0;
				st.count -= Min(st.count, cost);
				break;
			case PKLIMIT_SLIDING:
				{
					int64		current = Min(st.count, cost);

					changed = st.count > 0 || st.previous > 0;
					st.count -= current;
					st.previous -= Min(st.previous, cost - current);
				}
				break;
			case PKLIMIT_GCRA:
				changed = true; /* an open bucket holds something */
				if (st.max == 0 ||
					gcra_level(&st, now) <= (int128) cost * st.window)
				{
					st.since = now;
					st.steps = 0;
				}
				else
				{
					/* whole windows out of since when steps run short */
					int128		steps = (int128) st.steps - cost;
					int128		windows = steps < 0 ?
					ceil_div(-steps, st.max) : 0;

					st.since -= (int64) (windows * st.window);
					gcra_normalize(&st, steps + windows * st.max);
				}
				break;
		}
	}
	if (changed)
	{
		state_to_row(&st, now, after);
		after->max_count = before->max_count;
		after->blocked_until = before->blocked_until;
		after->updated_at = now;
	}
	*count = state_count(&st, now);
	return true;
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
 * recorded (pklimit_records), and the decision's count, reset and retry
 * after the call.  Returns the events it recorded.
 */
int64
pklimit_apply_decision(const PklimitRow *before, const PklimitCall *call,
					   TimestampTz now, bool record, PklimitDecision *decision,
					   PklimitRow *after)
{
	State		st;
	bool		recorded = record && !decision->blocked && call->cost > 0;

	*after = *before;
	if (decision->blocked || call->cost == 0)
		return 0;				/* nothing changes */
	state_of(before, call, now, &st);
	if (recorded)
	{
		state_record(&st, call, decision->allowed, now);
		state_to_row(&st, now, after);
		after->max_count = call->max_count;
		after->no_max_count = false;
		after->updated_at = now;
	}
	if (!decision->allowed && call->block_usec > 0)
	{
		/* a block needs a row: the state of the moment, maybe empty */
		if (!st.from_row && !recorded)
		{
			state_to_row(&st, now, after);
			after->max_count = call->max_count;
			after->no_max_count = false;
			after->updated_at = now;
		}
		after->blocked_until =
			Max(now + call->block_usec,
				refusal_end(&st, call->max_count, Max(call->cost, 1), now));
		decision->blocked = true;
	}
	describe(&st, after, call, now, decision);
	return recorded ? call->cost : 0;
}

/* The result of a call decided at now. */
static void
decision_result(const PklimitDecision *decision, TimestampTz now,
				PklimitResult *result)
{
	result->found = true;
	result->allowed = decision->allowed;
	result->count = decision->count;
	result->event_at = now;
	result->reset_at = decision->reset_at;
	result->retry_at = decision->retry_at;
}

/* Would writing row b change row a?  (Fields only: padding may differ.) */
bool
pklimit_rows_differ(const PklimitRow *a, const PklimitRow *b)
{
	return a->exists != b->exists || a->count != b->count ||
		a->window_start != b->window_start || a->window_end != b->window_end ||
		a->updated_at != b->updated_at || a->blocked_until != b->blocked_until ||
		a->algorithm != b->algorithm || a->max_count != b->max_count ||
		a->no_max_count != b->no_max_count ||
		a->previous_count != b->previous_count ||
		a->expires_at != b->expires_at;
}

/*
 * One call on a key at now, decided on *row and recorded as its own decision
 * says; *row becomes the row after it.  The worker (unit.c) and the memory
 * path (memory/keys.c) decide every call on one key so.
 */
void
pklimit_decide_call(PklimitRow *row, const PklimitCall *call, TimestampTz now,
					PklimitResult *result)
{
	PklimitDecision decision;
	PklimitRow	after;

	memset(result, 0, sizeof(*result));
	pklimit_decide(row, call, now, &decision);
	result->recorded = pklimit_apply_decision(row, call, now,
											  pklimit_records(call, decision.allowed),
											  &decision, &after);
	decision_result(&decision, now, result);
	*row = after;
}

/* A peek (cost 0) at now on row: decided, nothing recorded. */
void
pklimit_decide_peek(const PklimitRow *row, const PklimitCall *call,
					TimestampTz now, PklimitResult *result)
{
	PklimitDecision decision;

	memset(result, 0, sizeof(*result));
	pklimit_decide(row, call, now, &decision);
	decision_result(&decision, now, result);
	result->found = row->exists;
}

/*
 * The calls on the m keys of one group at now, decided together: a key is
 * recorded if every key allows, or if its call records refusals; rows[k]
 * become the rows after.
 */
void
pklimit_decide_group(PklimitRow *rows, const PklimitCall *calls, int m,
					 TimestampTz now, PklimitResult *results)
{
	PklimitDecision decision[PKLIMIT_GROUP_MAX];
	bool		all_allowed = true;

	Assert(m <= PKLIMIT_GROUP_MAX);
	/* a shadow policy's refusal is its own: the others record as if allowed */
	for (int k = 0; k < m; k++)
	{
		pklimit_decide(&rows[k], &calls[k], now, &decision[k]);
		all_allowed &= decision[k].allowed || calls[k].shadow;
	}
	for (int k = 0; k < m; k++)
	{
		PklimitRow	after;
		bool		allowed = all_allowed &&
		(decision[k].allowed || !calls[k].shadow);

		memset(&results[k], 0, sizeof(PklimitResult));
		results[k].recorded =
			pklimit_apply_decision(&rows[k], &calls[k], now,
								   pklimit_records(&calls[k], allowed),
								   &decision[k], &after);
		decision_result(&decision[k], now, &results[k]);
		rows[k] = after;
	}
}

/*
 * A decrement at now on *row (pklimit_take_back), as its result: found, the
 * count after; *row becomes the row after.
 */
void
pklimit_decide_decrement(PklimitRow *row, int64 cost, TimestampTz now,
						 PklimitResult *result)
{
	PklimitRow	after;

	memset(result, 0, sizeof(*result));
	result->found = pklimit_take_back(row, cost, now, &after, &result->count);
	result->event_at = now;
	*row = after;
}

/*
 * The folded upsert: consecutive calls on one key of a fixed window that
 * record every event and start no block, applied as one INSERT ... ON
 * CONFLICT DO UPDATE of all their events, which cannot know whether any is
 * allowed before it writes.  Each call is then decided in C, in order, as
 * if alone on the row the calls before it left, from the row the upsert
 * started from (pklimit_fold_start).
 */
bool
pklimit_folds(const PklimitCall *call)
{
	return call->algorithm == PKLIMIT_FIXED && call->cost > 0 &&
		pklimit_records(call, false) && call->block_usec == 0;
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
 * the row the upsert returned.  The upsert left a blocked key's row
 * unchanged, and the row of another algorithm's state (its calls are
 * decided in C alone, and the row written after them): then false is
 * returned.  Any other row counted the events in its open window or a new
 * one (which decides as one counted from 0).
 */
bool
pklimit_fold_start(const PklimitRow *after, int64 events, TimestampTz now,
				   PklimitRow *before)
{
	*before = *after;
	if (blocked(after, now) || after->algorithm != PKLIMIT_FIXED)
		return false;
	before->count -= events;
	return true;
}

/*
 * The upsert's SET list, the rules above in SQL: a blocked key's row is
 * written unchanged (0.2.0's table), so that the one statement still returns
 * it with its block (a WHERE on the update would return no row, and cost a
 * second statement), and so is the row of another algorithm's state
 * (0.3.0's table); an open window counts the events, whatever the window
 * length of the call, a closed one gives way to the call's new window.
 */
#define HIT_RULES_SQL(unchanged, max_count) \
	" count = CASE" unchanged(" THEN l.count") \
	"   WHEN " SQL_WINDOW_OPEN \
	"   THEN " SQL_ADD_EVENTS \
	"   ELSE $4 END," \
	" window_start = CASE" unchanged(" THEN l.window_start") \
	"   WHEN " SQL_WINDOW_OPEN \
	"   THEN l.window_start ELSE $2 END," \
	" window_end = CASE" unchanged(" THEN l.window_end") \
	"   WHEN " SQL_WINDOW_OPEN \
	"   THEN l.window_end ELSE $3 END," \
	max_count(unchanged) \
	" updated_at = CASE" unchanged(" THEN l.updated_at") \
	"   WHEN true THEN $5 END"
#define UNLESS_BLOCKED(then) " WHEN " SQL_BLOCKED then
#define UNLESS_BLOCKED_OR_NOT_FIXED(then) \
	" WHEN " SQL_BLOCKED " OR l.algorithm OPERATOR(pg_catalog.<>) 'fixed'" then
#define NEVER_BLOCKED(then) ""
#define NO_MAX_COUNT(unchanged) ""
#define MAX_COUNT(unchanged) \
	" max_count = CASE" unchanged(" THEN l.max_count") " WHEN true THEN $6 END,"

const char	pklimit_hit_rules_sql[] = HIT_RULES_SQL(UNLESS_BLOCKED, NO_MAX_COUNT);

/* the table of 0.1.0 has no blocked_until: no key is blocked */
const char	pklimit_hit_rules_no_block_sql[] =
HIT_RULES_SQL(NEVER_BLOCKED, NO_MAX_COUNT);

/* the table of 0.3.0 keeps every algorithm's state, and the max_count */
const char	pklimit_hit_rules_fixed_sql[] =
HIT_RULES_SQL(UNLESS_BLOCKED_OR_NOT_FIXED, MAX_COUNT);
