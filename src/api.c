/*-------------------------------------------------------------------------
 *
 * api.c
 *		The SQL-callable functions: each checks its arguments (bad input is
 *		always an ERROR, raised before anything is recorded), builds the
 *		stored key (key.c), hands one request to the database's worker
 *		through the queue (queue.c) and turns the answer into its result.
 *		What to answer when the worker cannot be reached is decided here, by
 *		pklimit.on_unavailable.  Nothing here touches the table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "pklimit.h"

/* Longest window accepted: far beyond any rate limit, far inside timestamptz. */
#define MAX_WINDOW_DAYS 3650000
#define MAX_WINDOW_YEARS 10000
#define MAX_WINDOW_USEC ((int64) MAX_WINDOW_DAYS * USECS_PER_DAY)

/* What is wrong with a window, as its argument's error says it. */
typedef struct WindowProblem
{
	const char *message;
	const char *detail;
	const char *hint;
} WindowProblem;

static const WindowProblem window_problems[] = {
	[PKLIMIT_WINDOW_INFINITE] = {
		"window must be finite", NULL,
		"Give the window in days, hours, minutes or seconds, for example '15 minutes'."
	},
	[PKLIMIT_WINDOW_MONTHS] = {
		"window must not contain months or years",
		"Months and years have no fixed length.",
		"Give the window in days, hours, minutes or seconds, for example '30 days'."
	},
	[PKLIMIT_WINDOW_TOO_LONG] = {
		"window is too long", NULL,
		"The longest window is " CppAsString2(MAX_WINDOW_YEARS) " years ("
		CppAsString2(MAX_WINDOW_DAYS) " days)."
	},
	[PKLIMIT_WINDOW_NOT_POSITIVE] = {
		"window must be positive", NULL,
		"Give a window longer than zero, for example '15 minutes'."
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

	GUC_check_errdetail("The %s.", p->message);
	GUC_check_errhint("%s", p->hint);
}

static void
check_not_null(FunctionCallInfo fcinfo, int argno, const char *what)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
}

static char *
stored_key_arg(FunctionCallInfo fcinfo)
{
	text	   *key;

	check_not_null(fcinfo, 0, "key");
	key = PG_GETARG_TEXT_PP(0);
	if (VARSIZE_ANY_EXHDR(key) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("key must not be empty")));
	return pklimit_stored_key(key);
}

static int64
max_count_arg(FunctionCallInfo fcinfo)
{
	int64		max_count;

	check_not_null(fcinfo, 1, "max_count");
	max_count = PG_GETARG_INT64(1);
	if (max_count < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_count must not be negative"),
				 errdetail("max_count is " INT64_FORMAT ".", max_count)));
	return max_count;
}

/* The window's length in microseconds. */
static int64
window_arg(FunctionCallInfo fcinfo)
{
	int64		usec;
	PklimitWindowCheck problem;

	check_not_null(fcinfo, 2, "window");
	problem = pklimit_window_usec(PG_GETARG_INTERVAL_P(2), &usec);
	if (problem != PKLIMIT_WINDOW_OK)
	{
		const WindowProblem *p = &window_problems[problem];

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s", p->message),
				 p->detail ? errdetail("%s", p->detail) : 0,
				 errhint("%s", p->hint)));
	}
	return usec;
}

void
pklimit_check_preloaded(void)
{
	if (!pklimit_preloaded())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pklimit is not loaded"),
				 errdetail("pklimit records events through background workers, which need shared memory set up at server start."),
				 errhint("Add pklimit to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/*
 * Hand one request to this database's worker and wait for the answer,
 * within pklimit.timeout.  The request's kind and arguments are set; its
 * database, schema and deadline are set here.
 */
void
pklimit_run(FunctionCallInfo fcinfo, PklimitRequest *request,
			PklimitAnswer *answer)
{
	pklimit_check_preloaded();
	memset(answer, 0, sizeof(*answer));
	if (RecoveryInProgress())
	{
		answer->status = PKLIMIT_READ_ONLY;
		return;
	}
	request->dboid = MyDatabaseId;
	request->nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	request->deadline = GetCurrentTimestamp() +
		(TimestampTz) pklimit_timeout * 1000;
	pklimit_submit(request, answer);
	if (answer->status == PKLIMIT_OK && answer->unreplicated)
		ereport(WARNING,
				(errmsg("pklimit's commit of this call was not confirmed by the synchronous standby"),
				 errdetail("The pklimit worker stopped waiting for the standby: the call is committed locally, but might not have been replicated.")));
}

/* One operation on one stored key. */
static void
run_on_key(FunctionCallInfo fcinfo, PklimitOpKind kind,
		   const char *stored_key, int64 window_usec, PklimitAnswer *answer)
{
	PklimitRequest request;

	memset(&request, 0, sizeof(request));
	request.kind = kind;
	request.window_usec = window_usec;
	strlcpy(request.key, stored_key, sizeof(request.key));
	pklimit_run(fcinfo, &request, answer);
}

const char *
pklimit_status_name(PklimitStatus status)
{
	switch (status)
	{
		case PKLIMIT_OK:
			return "ok";
		case PKLIMIT_TIMEOUT:
			return "timeout";
		case PKLIMIT_QUEUE_FULL:
			return "queue_full";
		case PKLIMIT_NO_WORKER:
			return "no_worker";
		case PKLIMIT_READ_ONLY:
			return "read_only";
		case PKLIMIT_LOCK_TIMEOUT:
			return "lock_timeout";
		case PKLIMIT_NO_TABLE:
			return "no_table";
		case PKLIMIT_STORE_ERROR:
			return "error";
	}
	return "error";
}

/* Why the store could not be reached: the SQLSTATE and a detail. */
static int
unavailable_reason(const PklimitAnswer *answer, PklimitCall call,
				   char **detail)
{
	switch (answer->status)
	{
		case PKLIMIT_TIMEOUT:
			*detail = psprintf("No answer came within pklimit.timeout (%d ms).",
							   pklimit_timeout);
			return ERRCODE_QUERY_CANCELED;
		case PKLIMIT_QUEUE_FULL:
			*detail = psprintf("All %d slots of the request queue are in use (pklimit.queue_size).",
							   pklimit_queue_size);
			return ERRCODE_INSUFFICIENT_RESOURCES;
		case PKLIMIT_NO_WORKER:
			*detail = pstrdup("No pklimit worker could be started for this database; see max_worker_processes and pklimit.max_workers.");
			return ERRCODE_INSUFFICIENT_RESOURCES;
		case PKLIMIT_READ_ONLY:
			*detail = pstrdup("The server is a hot standby or refused the write as read-only; pklimit records events on the primary.");
			return ERRCODE_READ_ONLY_SQL_TRANSACTION;
		case PKLIMIT_LOCK_TIMEOUT:
			if (call == PKLIMIT_CALL_PURGES)
				*detail = psprintf("A row the purge had to delete, or the table, stayed locked by another transaction for %d seconds.",
								   PKLIMIT_PURGE_LOCK_SECONDS);
			else
				*detail = pstrdup("The key's row, or the table, stayed locked by a transaction, possibly the caller's own, for the whole of pklimit.timeout.");
			return ERRCODE_LOCK_NOT_AVAILABLE;
		case PKLIMIT_NO_TABLE:
			*detail = pstrdup("The table platformkit_limits does not exist.");
			return ERRCODE_UNDEFINED_TABLE;
		case PKLIMIT_OK:
		case PKLIMIT_STORE_ERROR:
			break;
	}
	*detail = psprintf("The pklimit worker failed: %s.", answer->message);
	return answer->sqlstate ? answer->sqlstate : ERRCODE_INTERNAL_ERROR;
}

/*
 * The store could not be reached: raise an error or warn, as
 * pklimit.on_unavailable says (a purge always raises).  Returns the answer
 * to give instead: true (allow) or false (deny).
 */
bool
pklimit_unavailable(const PklimitAnswer *answer, PklimitCall call)
{
	bool		force_error = (call == PKLIMIT_CALL_PURGES);
	char	   *detail;
	int			sqlstate = unavailable_reason(answer, call, &detail);
	const char *outcome;

	/* a purge reports its own failure as the error it was */
	if (force_error && answer->status == PKLIMIT_STORE_ERROR)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg_internal("%s", answer->message),
				 errcontext("pklimit purge")));

	if (force_error || pklimit_on_unavailable == PKLIMIT_ON_UNAVAILABLE_ERROR)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("pklimit store unavailable: %s",
						pklimit_status_name(answer->status)),
				 errdetail_internal("%s", detail)));
	if (call == PKLIMIT_CALL_READS)
		outcome = "The call returned NULL.";
	else if (pklimit_on_unavailable == PKLIMIT_ON_UNAVAILABLE_ALLOW)
		outcome = "The call was allowed, as pklimit.on_unavailable says.";
	else
		outcome = "The call was denied, as pklimit.on_unavailable says.";
	ereport(WARNING,
			(errcode(sqlstate),
			 errmsg("pklimit store unavailable: %s",
					pklimit_status_name(answer->status)),
			 errdetail_internal("%s", detail),
			 errhint("%s", outcome)));
	return pklimit_on_unavailable == PKLIMIT_ON_UNAVAILABLE_ALLOW;
}

/*
 * Record one event.  Returns true iff the count, this event included, is
 * within max_count, or what pklimit.on_unavailable says if the store could
 * not be reached (answer->status tells which).
 */
static bool
hit(FunctionCallInfo fcinfo, const char *stored_key, int64 max_count,
	int64 window_usec, PklimitAnswer *answer)
{
	run_on_key(fcinfo, PKLIMIT_OP_HIT, stored_key, window_usec, answer);
	if (answer->status != PKLIMIT_OK)
		return pklimit_unavailable(answer, PKLIMIT_CALL_DECIDES);
	return answer->result.count <= max_count;
}

PG_FUNCTION_INFO_V1(pklimit_allow_default);
Datum
pklimit_allow_default(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	PklimitAnswer answer;

	PG_RETURN_BOOL(hit(fcinfo, stored_key, pklimit_default_max,
					   pklimit_default_window_usec, &answer));
}

PG_FUNCTION_INFO_V1(pklimit_allow);
Datum
pklimit_allow(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	int64		max_count = max_count_arg(fcinfo);
	int64		window_usec = window_arg(fcinfo);
	PklimitAnswer answer;

	PG_RETURN_BOOL(hit(fcinfo, stored_key, max_count, window_usec, &answer));
}

/*
 * Like pklimit_allow, with the values of RateLimit and Retry-After headers.
 * When the store was not reached, only allowed and status are set.
 */
PG_FUNCTION_INFO_V1(pklimit_check);
Datum
pklimit_check(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	int64		max_count = max_count_arg(fcinfo);
	int64		window_usec = window_arg(fcinfo);
	PklimitAnswer answer;
	PklimitResult *result = &answer.result;
	TupleDesc	tupdesc;
	Datum		values[6];
	bool		nulls[6] = {0};
	bool		allowed;
	Interval   *retry_after = palloc0(sizeof(Interval));

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	allowed = hit(fcinfo, stored_key, max_count, window_usec, &answer);
	values[0] = BoolGetDatum(allowed);
	values[5] = CStringGetTextDatum(pklimit_status_name(answer.status));
	if (answer.status == PKLIMIT_OK)
	{
		if (!allowed)
			retry_after->time = result->window_end - result->event_at;
		values[1] = Int64GetDatum(result->count);
		values[2] = Int64GetDatum(allowed ? max_count - result->count : 0);
		values[3] = TimestampTzGetDatum(result->window_end);
		values[4] = IntervalPGetDatum(retry_after);
	}
	else
		nulls[1] = nulls[2] = nulls[3] = nulls[4] = true;

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * A count or a forget of the key: false, after the warning (or the error)
 * pklimit.on_unavailable asks for, if the store was not reached.
 */
static bool
key_call(FunctionCallInfo fcinfo, PklimitOpKind kind, PklimitAnswer *answer)
{
	run_on_key(fcinfo, kind, stored_key_arg(fcinfo), 0, answer);
	if (answer->status == PKLIMIT_OK)
		return true;
	(void) pklimit_unavailable(answer, PKLIMIT_CALL_READS);
	return false;
}

/* The count of the key's open window; NULL if the store was not reached. */
PG_FUNCTION_INFO_V1(pklimit_count);
Datum
pklimit_count(PG_FUNCTION_ARGS)
{
	PklimitAnswer answer;

	if (!key_call(fcinfo, PKLIMIT_OP_COUNT, &answer))
		PG_RETURN_NULL();
	PG_RETURN_INT64(answer.result.found ? answer.result.count : 0);
}

/* Delete the key's row; NULL if the store was not reached. */
PG_FUNCTION_INFO_V1(pklimit_forget);
Datum
pklimit_forget(PG_FUNCTION_ARGS)
{
	PklimitAnswer answer;

	if (!key_call(fcinfo, PKLIMIT_OP_FORGET, &answer))
		PG_RETURN_NULL();
	PG_RETURN_BOOL(answer.result.found);
}

/* The row level security predicate: true only inside pklimit's statements. */
PG_FUNCTION_INFO_V1(platformkit_is_system);
Datum
platformkit_is_system(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(pklimit_in_system);
}
