/*-------------------------------------------------------------------------
 *
 * calendar.c
 *		Calendar windows (docs/algorithms.md, "Calendar windows"): a fixed
 *		window of a day, a week from Monday, a month or a year, aligned to
 *		local midnight in a time zone, so its length follows the calendar
 *		(28 to 31 days, a 23- or 25-hour day at a daylight-saving change).
 *		Owns checking a calendar window and its time zone, and the window
 *		that holds a moment; limit.c decides on the windows a call carries,
 *		and pklimit_window() shows them.  Nothing here knows the queue or
 *		the table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "pgtime.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "api.h"
#include "limit.h"

/* The calendar period of a window, or PKLIMIT_CALENDAR_NONE. */
static PklimitCalendar
calendar_of(const Interval *window)
{
	if (window->time != 0)
		return PKLIMIT_CALENDAR_NONE;
	if (window->month == 0 && window->day == 1)
		return PKLIMIT_CALENDAR_DAY;
	if (window->month == 0 && window->day == 7)
		return PKLIMIT_CALENDAR_WEEK;
	if (window->month == 1 && window->day == 0)
		return PKLIMIT_CALENDAR_MONTH;
	if (window->month == 12 && window->day == 0)
		return PKLIMIT_CALENDAR_YEAR;
	return PKLIMIT_CALENDAR_NONE;
}

/* The time zone a caller named: one PostgreSQL knows, as for AT TIME ZONE. */
pg_tz *
pklimit_time_zone_value(text *name)
{
	char	   *s = text_to_cstring(name);
	pg_tz	   *tz = s[0] != '\0' ? pg_tzset(s) : NULL;

	if (tz == NULL || !pg_tz_acceptable(tz))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("time zone \"%s\" not recognized", s),
				 errhint("Give a time zone name as TimeZone takes it, for example 'Europe/Berlin' or 'UTC' (pg_timezone_names lists them).")));
	return tz;
}

/*
 * The calendar window of a call given a time zone: a day, 7 days (a week
 * from Monday), a month or a year, for the fixed window that starts at its
 * calendar boundary only.
 */
PklimitCalendar
pklimit_calendar_value(const Interval *window, PklimitAlgorithm algorithm,
					   PklimitAnchor anchor)
{
	PklimitCalendar calendar = calendar_of(window);

	if (algorithm != PKLIMIT_FIXED)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("time_zone is for the fixed window only"),
				 errdetail("The algorithm is %s.", pklimit_algorithm_name(algorithm)),
				 errhint("Leave time_zone NULL with algorithm %s, or use the fixed window for a calendar quota.",
						 pklimit_algorithm_name(algorithm))));
	if (anchor == PKLIMIT_ANCHOR_FIRST)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("anchor \"first\" cannot be given with time_zone"),
				 errdetail("A window that starts at a key's first event has no calendar."),
				 errhint("Leave anchor out for a calendar window, or time_zone NULL.")));
	if (calendar == PKLIMIT_CALENDAR_NONE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window must be '1 day', '7 days', '1 month' or '1 year' with time_zone"),
				 errdetail("window is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(window)))),
				 errhint("A calendar window starts at local midnight: of each day, of Monday, of the 1st of the month or of January 1st.")));
	return calendar;
}

/* Is t on the local date year-month-day in tz (at midnight: exactly)? */
static bool
on_local_date(TimestampTz t, int year, int month, int day, pg_tz *tz,
			  bool midnight)
{
	struct pg_tm tm;
	fsec_t		fsec;
	int			offset;

	return timestamp2tm(t, &offset, &tm, &fsec, NULL, tz) == 0 &&
		tm.tm_year == year && tm.tm_mon == month && tm.tm_mday == day &&
		(!midnight ||
		 (tm.tm_hour == 0 && tm.tm_min == 0 && tm.tm_sec == 0 && fsec == 0));
}

/*
 * The first moment of a local date in tz: its midnight, or where clocks
 * went back over midnight (midnight twice), the earlier one, so that the
 * windows of consecutive days meet; where they skipped it, the first moment
 * after (PostgreSQL reads a skipped local time with the offset before).
 */
static TimestampTz
local_midnight(int year, int month, int day, pg_tz *tz)
{
	struct pg_tm tm = {0};
	int			offset;
	TimestampTz result;

	tm.tm_year = year;
	tm.tm_mon = month;
	tm.tm_mday = day;
	offset = DetermineTimeZoneOffset(&tm, tz);
	if (tm2timestamp(&tm, 0, &offset, &result) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	if (!on_local_date(result - 1, year, month, day, tz, false))
		return result;
	/* the date began earlier: a change of clocks moves them a few hours */
	for (int minutes = 4 * 60; minutes >= 15; minutes -= 15)
	{
		TimestampTz earlier = result - (TimestampTz) minutes * USECS_PER_MINUTE;

		if (on_local_date(earlier, year, month, day, tz, true))
			return earlier;
	}
	return result;
}

/*
 * The window of calendar holding at, in tz: [*start, *end), its ends at
 * local midnight (of the day, of Monday, of the 1st, of January 1st).
 */
void
pklimit_calendar_window(PklimitCalendar calendar, pg_tz *tz, TimestampTz at,
						TimestampTz *start, TimestampTz *end)
{
	struct pg_tm tm;
	fsec_t		fsec;
	int			offset;
	int			year,
				month,
				day;
	int			jd;

	if (timestamp2tm(at, &offset, &tm, &fsec, NULL, tz) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	year = tm.tm_year;
	month = tm.tm_mon;
	day = tm.tm_mday;
	switch (calendar)
	{
		case PKLIMIT_CALENDAR_NONE:
			elog(ERROR, "not a calendar window");
			break;
		case PKLIMIT_CALENDAR_DAY:
		case PKLIMIT_CALENDAR_WEEK:
			jd = date2j(year, month, day);
			if (calendar == PKLIMIT_CALENDAR_WEEK)
				jd -= (j2day(jd) + 6) % 7;	/* back to Monday */
			j2date(jd, &year, &month, &day);
			*start = local_midnight(year, month, day, tz);
			j2date(jd + (calendar == PKLIMIT_CALENDAR_WEEK ? 7 : 1),
				   &year, &month, &day);
			*end = local_midnight(year, month, day, tz);
			break;
		case PKLIMIT_CALENDAR_MONTH:
			*start = local_midnight(year, month, 1, tz);
			*end = month == 12 ? local_midnight(year + 1, 1, 1, tz) :
				local_midnight(year, month + 1, 1, tz);
			break;
		case PKLIMIT_CALENDAR_YEAR:
			*start = local_midnight(year, 1, 1, tz);
			*end = local_midnight(year + 1, 1, 1, tz);
			break;
	}
}

/*
 * The windows a calendar call may count in, from the caller's clock at now:
 * the one holding now and the next, in case the call is applied after its
 * end (limit.c takes the one that holds the event).
 */
void
pklimit_calendar_bounds(PklimitCall *call, pg_tz *tz, TimestampTz now)
{
	TimestampTz end;

	pklimit_calendar_window(call->calendar, tz, now, &call->calendar_at[0],
							&call->calendar_at[1]);
	pklimit_calendar_window(call->calendar, tz, call->calendar_at[1],
							&end, &call->calendar_at[2]);
	call->window_usec = call->calendar_at[1] - call->calendar_at[0];
}

/*
 * pklimit_window(window interval, time_zone text DEFAULT NULL, at
 * timestamptz DEFAULT now()) → (window_start, window_end): the fixed window
 * (anchor epoch) that holds at: aligned to the Unix epoch, or, with a time
 * zone, the calendar's.
 */
PG_FUNCTION_INFO_V1(pklimit_window);
Datum
pklimit_window(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {0};
	TimestampTz at;
	TimestampTz start;
	TimestampTz end;

	pklimit_arg_not_null(fcinfo, 0, "window");
	pklimit_arg_not_null(fcinfo, 2, "at");
	at = PG_GETARG_TIMESTAMPTZ(2);
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "pklimit_window must return a row");
	if (PG_ARGISNULL(1))
	{
		PklimitCall call = {0};
		PklimitRow	row;

		call.window_usec = pklimit_window_value(PG_GETARG_INTERVAL_P(0), "window");
		/* the window's end, and the epoch's distance, must be timestamps */
		if (!IS_VALID_TIMESTAMP(at) ||
			at > END_TIMESTAMP - call.window_usec - 2 * USECS_PER_DAY * 366 * 30)
			ereport(ERROR,
					(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
					 errmsg("timestamp out of range")));
		pklimit_new_window(at, &call, &row);
		start = row.window_start;
		end = row.window_end;
	}
	else
	{
		pg_tz	   *tz = pklimit_time_zone_value(PG_GETARG_TEXT_PP(1));

		pklimit_calendar_window(pklimit_calendar_value(PG_GETARG_INTERVAL_P(0),
													   PKLIMIT_FIXED,
													   PKLIMIT_ANCHOR_EPOCH),
								tz, at, &start, &end);
	}
	values[0] = TimestampTzGetDatum(start);
	values[1] = TimestampTzGetDatum(end);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
