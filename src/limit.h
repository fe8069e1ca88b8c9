/*-------------------------------------------------------------------------
 *
 * limit.h
 *		The rules of a limit (limit.c; docs/algorithms.md): a key's row, one
 *		call's arguments, what it decides and answers, and the windows a
 *		call may give.  Pure: nothing here knows the queue, the workers or
 *		the table.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_LIMIT_H
#define PKLIMIT_LIMIT_H

#include "datatype/timestamp.h"

/*
 * Most keys one call on several limits (pklimit_check_all) can name, all
 * decided together here.
 */
#define PKLIMIT_GROUP_MAX 16

/* How a limit counts a key's events (docs/algorithms.md). */
typedef enum PklimitAlgorithm
{
	PKLIMIT_FIXED,				/* fixed windows aligned to the Unix epoch */
	PKLIMIT_GCRA,				/* the generic cell rate algorithm */
	PKLIMIT_SLIDING				/* the sliding window counter */
} PklimitAlgorithm;

/*
 * Where a fixed window starts (docs/algorithms.md, "Anchors"): a key's
 * window is started by the event that finds none open, and lasts its window
 * from its start.
 */
typedef enum PklimitAnchor
{
	PKLIMIT_ANCHOR_EPOCH,		/* at a multiple of the window since the Unix
								 * epoch: the window that holds the event */
	PKLIMIT_ANCHOR_FIRST		/* at the event itself */
} PklimitAnchor;

/*
 * A calendar window (calendar.c; docs/algorithms.md, "Calendar windows"):
 * a fixed window from local midnight in a time zone, as long as its day,
 * week (from Monday), month or year.
 */
typedef enum PklimitCalendar
{
	PKLIMIT_CALENDAR_NONE,		/* a window of fixed length */
	PKLIMIT_CALENDAR_DAY,
	PKLIMIT_CALENDAR_WEEK,
	PKLIMIT_CALENDAR_MONTH,
	PKLIMIT_CALENDAR_YEAR
} PklimitCalendar;

/*
 * A key's row, as limit.c decides on it; what the columns hold for each
 * algorithm is in docs/algorithms.md ("The row").  0 stands for NULL.
 */
typedef struct PklimitRow
{
	int64		count;
	TimestampTz window_start;
	TimestampTz window_end;
	TimestampTz updated_at;
	TimestampTz blocked_until;	/* 0: no block */
	int64		max_count;		/* the last call's */
	int64		previous_count; /* sliding: the count of the window before */
	TimestampTz expires_at;		/* sliding: when its count stops weighing */
	TransactionId xmin;			/* the row version read or written */
	PklimitAlgorithm algorithm; /* the table of 0.3.0; before, fixed */
	bool		exists;
	bool		no_max_count;	/* max_count is NULL (none recorded since
								 * 0.3.0): kept so when written back */
	/* (the flags last: the memory path keeps many rows) */
} PklimitRow;

/* One call on a limit: its arguments. */
typedef struct PklimitCall
{
	int64		max_count;
	int64		window_usec;
	int64		cost;			/* events; 0: a peek */
	bool		record_refused; /* a refused call records its events too */
	int64		block_usec;		/* a refusal blocks the key this long; 0: no */
	PklimitAlgorithm algorithm; /* of a state the call starts */
	PklimitAnchor anchor;		/* of a fixed window the call starts */
	bool		memory;			/* durable => false: the memory path
								 * (memory.h, docs/memory.md) */
	bool		shadow;			/* a shadow policy's, in a call on several
								 * keys: its refusal keeps no other key from
								 * recording */
	PklimitCalendar calendar;	/* a fixed window of the calendar: */
	TimestampTz calendar_at[3]; /* the window holding the caller's clock, [0]
								 * to [1], and the next, [1] to [2]; the event
								 * counts in the one holding it */
} PklimitCall;

/* The decision of one call. */
typedef struct PklimitDecision
{
	bool		allowed;		/* by the key's own limit */
	bool		blocked;		/* the key is (now) blocked */
	int64		count;			/* the key's count after the call */
	TimestampTz reset_at;		/* when the key is back to zero */
	TimestampTz retry_at;		/* refused: when a call like it would next be
								 * allowed */
} PklimitDecision;

/* The answer to one operation, as its caller reads it. */
typedef struct PklimitResult
{
	bool		found;			/* a row existed (count, forget); purge ran */
	bool		allowed;		/* a recording call: the key's limit allows */
	int64		count;			/* count after the operation; rows purged */
	TimestampTz event_at;		/* server clock when the event was recorded */
	TimestampTz reset_at;		/* a recording call: the key back to zero */
	TimestampTz retry_at;		/* a refused call: when to try again */
	int64		recorded;		/* events it added to the count */
} PklimitResult;

/* What is wrong with a window (limit.c checks it). */
typedef enum PklimitWindowCheck
{
	PKLIMIT_WINDOW_OK,
	PKLIMIT_WINDOW_INFINITE,
	PKLIMIT_WINDOW_MONTHS,
	PKLIMIT_WINDOW_TOO_LONG,
	PKLIMIT_WINDOW_NOT_POSITIVE
} PklimitWindowCheck;

/* A call's arguments, checked */
extern PklimitWindowCheck pklimit_window_usec(const Interval *window,
											  int64 *usec);
extern void pklimit_window_guc_error(PklimitWindowCheck problem);
extern int64 pklimit_window_value(const Interval *window, const char *what);
extern PklimitAlgorithm pklimit_algorithm_value(text *name, const char *what);
extern PklimitAnchor pklimit_anchor_value(text *name, PklimitAlgorithm algorithm);
extern const char *pklimit_algorithm_name(PklimitAlgorithm algorithm);
extern bool pklimit_algorithm_of_name(const char *name,
									  PklimitAlgorithm *algorithm);

/* Calendar windows (calendar.c) */
struct pg_tz;
extern struct pg_tz *pklimit_time_zone_value(text *name);
extern PklimitCalendar pklimit_calendar_value(const Interval *window,
											  PklimitAlgorithm algorithm,
											  PklimitAnchor anchor);
extern void pklimit_calendar_window(PklimitCalendar calendar,
									struct pg_tz *tz, TimestampTz at,
									TimestampTz *start, TimestampTz *end);
extern void pklimit_calendar_bounds(PklimitCall *call, struct pg_tz *tz,
									TimestampTz now);

/* A call decided on a row */
extern void pklimit_new_window(TimestampTz now, const PklimitCall *call,
							   PklimitRow *row);
extern int64 pklimit_add_events(int64 count, int64 events);
extern void pklimit_decide(const PklimitRow *before, const PklimitCall *call,
						   TimestampTz now, PklimitDecision *decision);
extern bool pklimit_state_count(const PklimitRow *row, TimestampTz now,
								int64 *count);
extern bool pklimit_take_back(const PklimitRow *before, int64 cost,
							  TimestampTz now, PklimitRow *after,
							  int64 *count);
extern bool pklimit_records(const PklimitCall *call, bool allowed);
extern bool pklimit_rows_differ(const PklimitRow *a, const PklimitRow *b);
extern void pklimit_decide_call(PklimitRow *row, const PklimitCall *call,
								TimestampTz now, PklimitResult *result);
extern void pklimit_decide_peek(const PklimitRow *row, const PklimitCall *call,
								TimestampTz now, PklimitResult *result);
extern void pklimit_decide_group(PklimitRow *rows, const PklimitCall *calls,
								 int m, TimestampTz now,
								 PklimitResult *results);
extern void pklimit_decide_decrement(PklimitRow *row, int64 cost,
									 TimestampTz now, PklimitResult *result);
extern int64 pklimit_apply_decision(const PklimitRow *before,
									const PklimitCall *call, TimestampTz now,
									bool record, PklimitDecision *decision,
									PklimitRow *after);

/* Hits folded into one upsert, and the upsert's rules in SQL (store.c) */
extern bool pklimit_folds(const PklimitCall *call);
extern bool pklimit_fold_known(int64 count, int calls);
extern bool pklimit_fold_start(const PklimitRow *after, int64 events,
							   TimestampTz now, PklimitRow *before);
extern const char pklimit_hit_rules_sql[];
extern const char pklimit_hit_rules_no_block_sql[];
extern const char pklimit_hit_rules_fixed_sql[];

#endif							/* PKLIMIT_LIMIT_H */
