/*-------------------------------------------------------------------------
 *
 * pklimit.c
 *		Module entry points: settings, argument checking and the SQL-callable
 *		functions.  Each function turns its arguments into one operation on a
 *		stored key and hands it to run_operation(), which decides where the
 *		operation runs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "pklimit.h"

PG_MODULE_MAGIC;

/* Longest window accepted: far beyond any rate limit, far inside timestamptz. */
#define PKLIMIT_MAX_WINDOW_USEC (INT64CONST(10000) * 365 * USECS_PER_DAY)

int			pklimit_default_max = 10;
int			pklimit_default_window = 15 * 60;	/* seconds */

void		_PG_init(void);

void
_PG_init(void)
{
	DefineCustomIntVariable("pklimit.default_max",
							"Limit used by the one-argument pklimit_allow(key).",
							"Events allowed per key per window.",
							&pklimit_default_max,
							10, 0, INT_MAX,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("pklimit.default_window",
							"Window used by the one-argument pklimit_allow(key).",
							"Fixed windows are aligned to the Unix epoch.",
							&pklimit_default_window,
							15 * 60, 1, INT_MAX,
							PGC_USERSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	MarkGUCPrefixReserved("pklimit");
}

/*
 * Argument checking.  Bad input is always an ERROR, raised before anything
 * is recorded.
 */
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

/* The window's length in microseconds; days count as 24 hours. */
static int64
window_arg(FunctionCallInfo fcinfo)
{
	Interval   *window;
	int64		usec;

	check_not_null(fcinfo, 2, "window");
	window = PG_GETARG_INTERVAL_P(2);
#ifdef INTERVAL_NOT_FINITE
	if (INTERVAL_NOT_FINITE(window))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window must be finite"),
				 errhint("Give the window in days, hours, minutes or seconds, for example '15 minutes'.")));
#endif
	if (window->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window must not contain months or years"),
				 errdetail("Months and years have no fixed length."),
				 errhint("Give the window in days, hours, minutes or seconds, for example '30 days'.")));
	usec = (int64) window->day * USECS_PER_DAY;
	if (pg_add_s64_overflow(usec, window->time, &usec) ||
		usec > PKLIMIT_MAX_WINDOW_USEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window is too long"),
				 errhint("The longest window is 10000 years (3650000 days).")));
	if (usec <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window must be positive"),
				 errhint("Give a window longer than zero, for example '15 minutes'.")));
	return usec;
}

/* The schema pklimit was installed in: the schema of the called function. */
static Oid
extension_namespace(FunctionCallInfo fcinfo)
{
	return get_func_namespace(fcinfo->flinfo->fn_oid);
}

/*
 * Run one operation on the table.  It runs in the caller's transaction, as
 * the table's owner, with search_path pinned so the saved plans stay valid
 * and nothing the caller planted is found.
 */
static void
run_operation(Oid nspid, PklimitOpKind kind, const char *stored_key,
			  int64 window_usec, PklimitResult *result)
{
	Oid			relid = get_relname_relid("platformkit_limits", nspid);
	HeapTuple	tuple;
	Oid			owner;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("pklimit table \"platformkit_limits\" does not exist"),
				 errhint("Recreate the extension with DROP EXTENSION pklimit; CREATE EXTENSION pklimit;")));
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner, save_sec_context |
						   SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	pklimit_store_apply(nspid, kind, stored_key, window_usec, 1, result);
	SPI_finish();

	AtEOXact_GUC(false, save_nestlevel);
	SetUserIdAndSecContext(save_userid, save_sec_context);
}

/* Record one event; true iff the count, this event included, is within max. */
static bool
hit(FunctionCallInfo fcinfo, const char *stored_key, int64 max_count,
	int64 window_usec, PklimitResult *result)
{
	run_operation(extension_namespace(fcinfo), PKLIMIT_OP_HIT, stored_key,
				  window_usec, result);
	return result->count <= max_count;
}

PG_FUNCTION_INFO_V1(pklimit_allow_default);
Datum
pklimit_allow_default(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	PklimitResult result;

	PG_RETURN_BOOL(hit(fcinfo, stored_key, pklimit_default_max,
					   (int64) pklimit_default_window * USECS_PER_SEC,
					   &result));
}

PG_FUNCTION_INFO_V1(pklimit_allow);
Datum
pklimit_allow(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	int64		max_count = max_count_arg(fcinfo);
	int64		window_usec = window_arg(fcinfo);
	PklimitResult result;

	PG_RETURN_BOOL(hit(fcinfo, stored_key, max_count, window_usec, &result));
}

PG_FUNCTION_INFO_V1(pklimit_check);
Datum
pklimit_check(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	int64		max_count = max_count_arg(fcinfo);
	int64		window_usec = window_arg(fcinfo);
	PklimitResult result;
	TupleDesc	tupdesc;
	Datum		values[6];
	bool		nulls[6] = {0};
	bool		allowed;
	Interval   *retry_after = palloc0(sizeof(Interval));

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	allowed = hit(fcinfo, stored_key, max_count, window_usec, &result);
	if (!allowed)
		retry_after->time = result.window_end - result.event_at;

	values[0] = BoolGetDatum(allowed);
	values[1] = Int64GetDatum(result.count);
	values[2] = Int64GetDatum(allowed ? max_count - result.count : 0);
	values[3] = TimestampTzGetDatum(result.window_end);
	values[4] = IntervalPGetDatum(retry_after);
	values[5] = CStringGetTextDatum("ok");

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

PG_FUNCTION_INFO_V1(pklimit_count);
Datum
pklimit_count(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	PklimitResult result;

	run_operation(extension_namespace(fcinfo), PKLIMIT_OP_COUNT, stored_key,
				  0, &result);
	PG_RETURN_INT64(result.found ? result.count : 0);
}

PG_FUNCTION_INFO_V1(pklimit_forget);
Datum
pklimit_forget(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	PklimitResult result;

	run_operation(extension_namespace(fcinfo), PKLIMIT_OP_FORGET, stored_key,
				  0, &result);
	PG_RETURN_BOOL(result.found);
}

/*
 * Delete rows whose window closed more than retention ago.  Runs as the
 * caller: EXECUTE is not granted to PUBLIC, and a caller without DELETE on
 * the table gets a permission error rather than a silent zero.
 */
PG_FUNCTION_INFO_V1(pklimit_purge);
Datum
pklimit_purge(PG_FUNCTION_ARGS)
{
	Interval   *retention;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz cutoff;
	int64		deleted;
	int			save_nestlevel;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("retention must not be null")));
	retention = PG_GETARG_INTERVAL_P(0);
	cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
													 TimestampTzGetDatum(now),
													 IntervalPGetDatum(retention)));
	if (cutoff > now)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retention must not be negative")));

	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	deleted = pklimit_store_purge(extension_namespace(fcinfo), cutoff);
	SPI_finish();
	AtEOXact_GUC(false, save_nestlevel);

	PG_RETURN_INT64(deleted);
}

/* The row level security predicate: true only inside pklimit's statements. */
PG_FUNCTION_INFO_V1(platformkit_is_system);
Datum
platformkit_is_system(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(pklimit_in_system);
}
