/*-------------------------------------------------------------------------
 *
 * check.c
 *		The recording calls: pklimit_allow and pklimit_check on one key
 *		(with the arguments of 0.1.0, with cost, record_refused and block
 *		from 0.2.0, with algorithm and durable from 0.3.0, and with anchor
 *		from 0.4.0), and pklimit_check_all and pklimit_allow_all on several
 *		keys at once (from 0.2.0).  Each checks its arguments, makes its
 *		requests (one per key; the keys of one call make one group, recorded
 *		together or not at all) and turns the answers into its result.  What
 *		a call decides is the worker's (unit.c, limit.c); nothing here
 *		touches the table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "api.h"
#include "settings.h"
#include "stats.h"

/* The columns of pklimit_check, after the key of pklimit_check_all. */
#define CHECK_COLUMNS 6

/*
 * The arguments of a function, by the release that made it: 0.1.0's record
 * one event of a fixed window, every attempt counted, no block; 0.2.0's
 * take cost, record_refused and block; 0.3.0's the algorithm too.
 */
typedef enum Arguments
{
	ARGS_0_1,
	ARGS_0_2,
	ARGS_0_3
} Arguments;

/*
 * The kind of request a call makes: a peek, a hit (folded with others on its
 * key, as limit.c allows), or a call decided on its locked row, as every key
 * of a call on several keys is.
 */
static PklimitOpKind
kind_of(const PklimitCall *call, int keys)
{
	if (call->cost == 0)
		return PKLIMIT_OP_PEEK;
	if (keys == 1 && pklimit_folds(call))
		return PKLIMIT_OP_HIT;
	return PKLIMIT_OP_LIMIT;
}

/*
 * The options of a call, from argument first on: cost (events, 0 or more),
 * record_refused, block (NULL: none) and, from 0.3.0, algorithm and
 * durable, and from 0.4.0 anchor (the functions of 0.3.0 and 0.4.0 share
 * their C functions: 0.4.0's have one argument more).
 */
static void
options_args(FunctionCallInfo fcinfo, int first, Arguments args,
			 PklimitCall *call)
{
	pklimit_arg_not_null(fcinfo, first, "cost");
	pklimit_arg_not_null(fcinfo, first + 1, "record_refused");
	call->cost = PG_GETARG_INT64(first);
	if (call->cost < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost must not be negative"),
				 errdetail("cost is " INT64_FORMAT ".", call->cost),
				 errhint("Give the events the call records: 1 for one, 0 to look without recording.")));
	call->record_refused = PG_GETARG_BOOL(first + 1);
	call->block_usec = PG_ARGISNULL(first + 2) ? 0 :
		pklimit_window_value(PG_GETARG_INTERVAL_P(first + 2), "block");
	call->algorithm = PKLIMIT_FIXED;
	call->anchor = PKLIMIT_ANCHOR_EPOCH;
	call->memory = false;
	if (args >= ARGS_0_3)
	{
		pklimit_arg_not_null(fcinfo, first + 3, "algorithm");
		call->algorithm = pklimit_algorithm_value(PG_GETARG_TEXT_PP(first + 3),
												  "algorithm");
		/* durable, from 0.3.0's last release of the functions on */
		if (PG_NARGS() > first + 4)
		{
			pklimit_arg_not_null(fcinfo, first + 4, "durable");
			call->memory = !PG_GETARG_BOOL(first + 4);
		}
		/* anchor, from 0.4.0 on */
		if (PG_NARGS() > first + 5)
		{
			pklimit_arg_not_null(fcinfo, first + 5, "anchor");
			call->anchor = pklimit_anchor_value(PG_GETARG_TEXT_PP(first + 5),
												call->algorithm);
		}
	}
}

/* The arguments of a call on one key: key, max_count, window, options. */
static char *
key_call_args(FunctionCallInfo fcinfo, Arguments args, PklimitCall *call)
{
	char	   *stored_key;

	pklimit_arg_not_null(fcinfo, 0, "key");
	stored_key = pklimit_key_value(PG_GETARG_TEXT_PP(0), "key");
	pklimit_arg_not_null(fcinfo, 1, "max_count");
	pklimit_arg_not_null(fcinfo, 2, "window");
	memset(call, 0, sizeof(*call));
	call->max_count = pklimit_max_count_value(PG_GETARG_INT64(1), "max_count");
	call->window_usec = pklimit_window_value(PG_GETARG_INTERVAL_P(2), "window");
	call->cost = 1;
	call->record_refused = true;
	call->algorithm = PKLIMIT_FIXED;
	if (args >= ARGS_0_2)
		options_args(fcinfo, 3, args, call);
	return stored_key;
}

/*
 * Run the calls of one group (n keys; 1 for a call on one key) and return
 * whether every key's limit allows, or what pklimit.on_unavailable says if
 * the call was unavailable (the answers' status says which).  In shadow
 * mode a call its limit refused is allowed, and *shadow says so.
 * Each call counts once in pklimit_stats, by its overall answer.
 */
static bool
run_calls(FunctionCallInfo fcinfo, char **stored_keys,
		  const PklimitCall *calls, PklimitAnswer *answers, int n,
		  bool *shadow)
{
	PklimitRequest requests[PKLIMIT_GROUP_MAX];
	bool		allowed = true;
	TimestampTz started;

	Assert(n <= PKLIMIT_GROUP_MAX);
	*shadow = false;
	memset(requests, 0, sizeof(PklimitRequest) * n);
	for (int i = 0; i < n; i++)
	{
		requests[i].kind = kind_of(&calls[i], n);
		requests[i].call = calls[i];
		strlcpy(requests[i].key, stored_keys[i], sizeof(requests[i].key));
	}
	started = pklimit_run(fcinfo, requests, answers, n);
	for (int i = 0; i < n; i++)
		if (answers[i].status != PKLIMIT_OK)
		{
			pklimit_stats_call(answers[i].status, pklimit_unavailable_allows(),
							   false, started);
			return pklimit_unavailable(&answers[i], PKLIMIT_CALL_DECIDES);
		}
	for (int i = 0; i < n; i++)
		allowed &= answers[i].result.allowed;
	*shadow = !allowed && pklimit_shadow_mode;
	pklimit_stats_call(PKLIMIT_OK, allowed, *shadow, started);
	return allowed || *shadow;
}

/*
 * The columns of pklimit_check for one answered call: allowed, count,
 * remaining, reset_at, retry_after, status.  When the call was unavailable,
 * only allowed and status are set.  shadow: its limit refused the call and
 * shadow mode allowed it.
 */
static void
check_columns(const PklimitCall *call, const PklimitAnswer *answer,
			  bool allowed, bool shadow, Datum *values, bool *nulls)
{
	const PklimitResult *r = &answer->result;

	values[0] = BoolGetDatum(allowed);
	values[5] = CStringGetTextDatum(shadow ? "shadow" :
									pklimit_status_name(answer->status));
	if (answer->status == PKLIMIT_OK)
	{
		Interval   *retry_after = palloc0(sizeof(Interval));

		if (!r->allowed)
			retry_after->time = r->retry_at - r->event_at;
		values[1] = Int64GetDatum(r->count);
		values[2] = Int64GetDatum(r->allowed ?
								  Max(call->max_count - r->count, 0) : 0);
		values[3] = TimestampTzGetDatum(r->reset_at);
		values[4] = IntervalPGetDatum(retry_after);
	}
	else
		nulls[1] = nulls[2] = nulls[3] = nulls[4] = true;
}

/* pklimit_check's row for a call on one key. */
static Datum
check_row(FunctionCallInfo fcinfo, Arguments args)
{
	PklimitCall call;
	char	   *stored_key = key_call_args(fcinfo, args, &call);
	PklimitAnswer answer;
	TupleDesc	tupdesc;
	Datum		values[CHECK_COLUMNS];
	bool		nulls[CHECK_COLUMNS] = {0};
	bool		allowed;
	bool		shadow;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	allowed = run_calls(fcinfo, &stored_key, &call, &answer, 1, &shadow);
	check_columns(&call, &answer, allowed, shadow, values, nulls);
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

/* pklimit_allow(key): pklimit.default_max and pklimit.default_window. */
PG_FUNCTION_INFO_V1(pklimit_allow_default);
Datum
pklimit_allow_default(PG_FUNCTION_ARGS)
{
	PklimitCall call = {0};
	char	   *stored_key;
	PklimitAnswer answer;
	bool		shadow;

	pklimit_arg_not_null(fcinfo, 0, "key");
	stored_key = pklimit_key_value(PG_GETARG_TEXT_PP(0), "key");
	call.max_count = pklimit_default_max;
	call.window_usec = pklimit_default_window_usec;
	call.cost = 1;
	call.record_refused = true;
	call.algorithm = PKLIMIT_FIXED;
	PG_RETURN_BOOL(run_calls(fcinfo, &stored_key, &call, &answer, 1, &shadow));
}

/* pklimit_allow on one key, with the arguments of a release. */
static bool
allow_one(FunctionCallInfo fcinfo, Arguments args)
{
	PklimitCall call;
	char	   *stored_key = key_call_args(fcinfo, args, &call);
	PklimitAnswer answer;
	bool		shadow;

	return run_calls(fcinfo, &stored_key, &call, &answer, 1, &shadow);
}

/* pklimit_allow(key, max_count, window) of 0.1.0. */
PG_FUNCTION_INFO_V1(pklimit_allow);
Datum
pklimit_allow(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(allow_one(fcinfo, ARGS_0_1));
}

/* pklimit_check(key, max_count, window) of 0.1.0. */
PG_FUNCTION_INFO_V1(pklimit_check);
Datum
pklimit_check(PG_FUNCTION_ARGS)
{
	PG_RETURN_DATUM(check_row(fcinfo, ARGS_0_1));
}

/* pklimit_allow(key, max_count, window, cost, record_refused, block). */
PG_FUNCTION_INFO_V1(pklimit_allow_0_2);
Datum
pklimit_allow_0_2(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(allow_one(fcinfo, ARGS_0_2));
}

/*
 * pklimit_allow(key, max_count, window, cost, record_refused, block,
 * algorithm).
 */
PG_FUNCTION_INFO_V1(pklimit_allow_0_3);
Datum
pklimit_allow_0_3(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(allow_one(fcinfo, ARGS_0_3));
}

/* pklimit_check(key, max_count, window, cost, record_refused, block). */
PG_FUNCTION_INFO_V1(pklimit_check_0_2);
Datum
pklimit_check_0_2(PG_FUNCTION_ARGS)
{
	PG_RETURN_DATUM(check_row(fcinfo, ARGS_0_2));
}

/*
 * pklimit_check(key, max_count, window, cost, record_refused, block,
 * algorithm).
 */
PG_FUNCTION_INFO_V1(pklimit_check_0_3);
Datum
pklimit_check_0_3(PG_FUNCTION_ARGS)
{
	PG_RETURN_DATUM(check_row(fcinfo, ARGS_0_3));
}

/* The elements of a one-dimensional array argument, none NULL. */
static int
array_arg(FunctionCallInfo fcinfo, int argno, const char *what, Oid type,
		  Datum **elements)
{
	ArrayType  *array;
	bool	   *nulls;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			n;

	pklimit_arg_not_null(fcinfo, argno, what);
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", what)));
	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	deconstruct_array(array, type, typlen, typbyval, typalign, elements,
					  &nulls, &n);
	for (int i = 0; i < n; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain NULL", what),
					 errdetail("Element %d is NULL.", i + 1)));
	return n;
}

/* Which element of which array argument is being checked, for errors. */
typedef struct ElementContext
{
	const char *array;
	int			element;
} ElementContext;

static void
element_context(void *arg)
{
	ElementContext *c = (ElementContext *) arg;

	if (c->array != NULL)
		errcontext("element %d of %s", c->element, c->array);
}

/*
 * The arguments of a call on several keys: keys, max_counts and windows, as
 * many of each, 1 to PKLIMIT_GROUP_MAX, no key twice (after its tenant is
 * applied), and the options, one algorithm for every key.  Returns how many
 * keys.
 */
static int
group_args(FunctionCallInfo fcinfo, Arguments args, text **keys,
		   char **stored_keys, PklimitCall *calls)
{
	Datum	   *key_datums;
	Datum	   *max_datums;
	Datum	   *window_datums;
	int			n = array_arg(fcinfo, 0, "keys", TEXTOID, &key_datums);
	int			n_max = array_arg(fcinfo, 1, "max_counts", INT8OID, &max_datums);
	int			n_windows = array_arg(fcinfo, 2, "windows", INTERVALOID,
									  &window_datums);
	PklimitCall options;
	ElementContext element = {0};
	ErrorContextCallback context;

	if (n != n_max || n != n_windows)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keys, max_counts and windows must have as many elements"),
				 errdetail("keys has %d, max_counts %d and windows %d.",
						   n, n_max, n_windows)));
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keys must not be empty")));
	if (n > PKLIMIT_GROUP_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many keys for one call"),
				 errdetail("A call can name at most %d keys; it names %d.",
						   PKLIMIT_GROUP_MAX, n)));
	options_args(fcinfo, 3, args, &options);
	context.arg = &element;
	context.callback = element_context;
	context.previous = error_context_stack;
	error_context_stack = &context;
	for (int i = 0; i < n; i++)
	{
		element.element = i + 1;
		element.array = "keys";
		keys[i] = DatumGetTextPP(key_datums[i]);
		stored_keys[i] = pklimit_key_value(keys[i], "key");
		element.array = "max_counts";
		calls[i] = options;
		calls[i].max_count = pklimit_max_count_value(DatumGetInt64(max_datums[i]),
													 "max_count");
		element.array = "windows";
		calls[i].window_usec =
			pklimit_window_value(DatumGetIntervalP(window_datums[i]), "window");
		element.array = NULL;
		for (int j = 0; j < i; j++)
			if (strcmp(stored_keys[i], stored_keys[j]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("keys must not name a key twice"),
						 errdetail("Elements %d and %d are the same key.", j + 1, i + 1)));
	}
	error_context_stack = context.previous;
	return n;
}

/*
 * Several limits in one call: one row per key, in the order of the arrays
 * (key, then the columns of pklimit_check).  All keys are recorded in one
 * worker transaction, all of them or none.
 */
static Datum
check_all(FunctionCallInfo fcinfo, Arguments args)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *keys[PKLIMIT_GROUP_MAX];
	char	   *stored_keys[PKLIMIT_GROUP_MAX];
	PklimitCall calls[PKLIMIT_GROUP_MAX];
	PklimitAnswer answers[PKLIMIT_GROUP_MAX];
	int			n = group_args(fcinfo, args, keys, stored_keys, calls);
	bool		allowed;
	bool		shadow;

	InitMaterializedSRF(fcinfo, 0);
	allowed = run_calls(fcinfo, stored_keys, calls, answers, n, &shadow);
	for (int i = 0; i < n; i++)
	{
		Datum		values[1 + CHECK_COLUMNS];
		bool		nulls[1 + CHECK_COLUMNS] = {0};
		bool		ok = (answers[i].status == PKLIMIT_OK);
		bool		key_shadow = ok && shadow && !answers[i].result.allowed;

		values[0] = PointerGetDatum(keys[i]);
		check_columns(&calls[i], &answers[i],
					  ok ? answers[i].result.allowed || key_shadow : allowed,
					  key_shadow, values + 1, nulls + 1);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* Several limits in one call: true iff every one allows. */
static bool
allow_all(FunctionCallInfo fcinfo, Arguments args)
{
	text	   *keys[PKLIMIT_GROUP_MAX];
	char	   *stored_keys[PKLIMIT_GROUP_MAX];
	PklimitCall calls[PKLIMIT_GROUP_MAX];
	PklimitAnswer answers[PKLIMIT_GROUP_MAX];
	int			n = group_args(fcinfo, args, keys, stored_keys, calls);
	bool		shadow;

	return run_calls(fcinfo, stored_keys, calls, answers, n, &shadow);
}

/* pklimit_check_all(keys, max_counts, windows, cost, record_refused, block) */
PG_FUNCTION_INFO_V1(pklimit_check_all);
Datum
pklimit_check_all(PG_FUNCTION_ARGS)
{
	return check_all(fcinfo, ARGS_0_2);
}

/* pklimit_check_all(..., algorithm) of 0.3.0 */
PG_FUNCTION_INFO_V1(pklimit_check_all_0_3);
Datum
pklimit_check_all_0_3(PG_FUNCTION_ARGS)
{
	return check_all(fcinfo, ARGS_0_3);
}

/* pklimit_allow_all(keys, max_counts, windows, cost, record_refused, block) */
PG_FUNCTION_INFO_V1(pklimit_allow_all);
Datum
pklimit_allow_all(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(allow_all(fcinfo, ARGS_0_2));
}

/* pklimit_allow_all(..., algorithm) of 0.3.0 */
PG_FUNCTION_INFO_V1(pklimit_allow_all_0_3);
Datum
pklimit_allow_all_0_3(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(allow_all(fcinfo, ARGS_0_3));
}
