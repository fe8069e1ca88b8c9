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
#include "pgtime.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "api.h"
#include "policy.h"
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
			 PklimitCall *call, pg_tz **tz)
{
	*tz = NULL;
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
		/* time_zone, from 0.4.0 on: NULL for a window of fixed length */
		if (PG_NARGS() > first + 6 && !PG_ARGISNULL(first + 6))
			*tz = pklimit_time_zone_value(PG_GETARG_TEXT_PP(first + 6));
	}
}

/*
 * A call's window: of a fixed length, or with a time zone a calendar
 * window, the call carrying the one holding this moment and the next.
 */
static void
call_window(const Interval *window, pg_tz *tz, PklimitCall *call)
{
	if (tz == NULL)
	{
		call->window_usec = pklimit_window_value(window, "window");
		return;
	}
	call->calendar = pklimit_calendar_value(window, call->algorithm,
											call->anchor);
	pklimit_calendar_bounds(call, tz, GetCurrentTimestamp());
}

/* The arguments of a call on one key: key, max_count, window, options. */
static char *
key_call_args(FunctionCallInfo fcinfo, Arguments args, PklimitCall *call)
{
	char	   *stored_key;
	pg_tz	   *tz = NULL;

	pklimit_arg_not_null(fcinfo, 0, "key");
	stored_key = pklimit_key_value(PG_GETARG_TEXT_PP(0), "key");
	pklimit_arg_not_null(fcinfo, 1, "max_count");
	pklimit_arg_not_null(fcinfo, 2, "window");
	memset(call, 0, sizeof(*call));
	call->max_count = pklimit_max_count_value(PG_GETARG_INT64(1), "max_count");
	call->cost = 1;
	call->record_refused = true;
	call->algorithm = PKLIMIT_FIXED;
	if (args >= ARGS_0_2)
		options_args(fcinfo, 3, args, call, &tz);
	call_window(PG_GETARG_INTERVAL_P(2), tz, call);
	return stored_key;
}

/*
 * Run the calls of one group (n keys; 1 for a call on one key) and return
 * whether every key's limit allows, or what pklimit.on_unavailable says if
 * the call was unavailable (the answers' status says which).  A key's
 * refusal is allowed by shadow mode, the session's or its policy's
 * (policies: one per key, or NULL), and shadowed[i] says so.  Each call
 * counts once in pklimit_stats, by its overall answer, and once per key in
 * its policy's counters.
 */
static bool
run_calls(FunctionCallInfo fcinfo, char **stored_keys,
		  const PklimitCall *calls, const PklimitPolicy *policies,
		  PklimitAnswer *answers, int n, bool *shadowed)
{
	PklimitRequest requests[PKLIMIT_GROUP_MAX];
	bool		allowed = true;
	bool		any_shadowed = false;
	TimestampTz started;

	Assert(n <= PKLIMIT_GROUP_MAX);
	memset(shadowed, 0, sizeof(bool) * n);
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
			for (int j = 0; policies != NULL && j < n; j++)
				pklimit_policy_count(&policies[j], answers[i].status, false, false);
			return pklimit_unavailable(&answers[i], PKLIMIT_CALL_DECIDES);
		}
	for (int i = 0; i < n; i++)
	{
		bool		ok = answers[i].result.allowed;

		shadowed[i] = !ok && (pklimit_shadow_mode ||
							  (policies != NULL && policies[i].shadow));
		allowed &= ok || shadowed[i];
		any_shadowed |= shadowed[i];
		if (policies != NULL)
			pklimit_policy_count(&policies[i], PKLIMIT_OK, ok, shadowed[i]);
	}
	pklimit_stats_call(PKLIMIT_OK, allowed && !any_shadowed,
					   allowed && any_shadowed, started);
	return allowed;
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
	bool		shadowed;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	allowed = run_calls(fcinfo, &stored_key, &call, NULL, &answer, 1, &shadowed);
	check_columns(&call, &answer, allowed, shadowed, values, nulls);
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
	bool		shadowed;

	pklimit_arg_not_null(fcinfo, 0, "key");
	stored_key = pklimit_key_value(PG_GETARG_TEXT_PP(0), "key");
	call.max_count = pklimit_default_max;
	call.window_usec = pklimit_default_window_usec;
	call.cost = 1;
	call.record_refused = true;
	call.algorithm = PKLIMIT_FIXED;
	PG_RETURN_BOOL(run_calls(fcinfo, &stored_key, &call, NULL, &answer, 1,
							 &shadowed));
}

/* pklimit_allow on one key, with the arguments of a release. */
static bool
allow_one(FunctionCallInfo fcinfo, Arguments args)
{
	PklimitCall call;
	char	   *stored_key = key_call_args(fcinfo, args, &call);
	PklimitAnswer answer;
	bool		shadowed;

	return run_calls(fcinfo, &stored_key, &call, NULL, &answer, 1, &shadowed);
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
	pg_tz	   *tz;
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
	memset(&options, 0, sizeof(options));
	options_args(fcinfo, 3, args, &options, &tz);
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
		call_window(DatumGetIntervalP(window_datums[i]), tz, &calls[i]);
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
 * The rows of pklimit_check_all for a group's answers: one per key, in the
 * order of the arrays (key, then the columns of pklimit_check).
 */
static void
check_all_rows(FunctionCallInfo fcinfo, text **keys, const PklimitCall *calls,
			   const PklimitAnswer *answers, const bool *shadowed, int n,
			   bool allowed)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	for (int i = 0; i < n; i++)
	{
		Datum		values[1 + CHECK_COLUMNS];
		bool		nulls[1 + CHECK_COLUMNS] = {0};
		bool		ok = (answers[i].status == PKLIMIT_OK);

		values[0] = PointerGetDatum(keys[i]);
		check_columns(&calls[i], &answers[i],
					  ok ? answers[i].result.allowed || shadowed[i] : allowed,
					  ok && shadowed[i], values + 1, nulls + 1);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * Several limits in one call: all keys are recorded in one worker
 * transaction, all of them or none.
 */
static Datum
check_all(FunctionCallInfo fcinfo, Arguments args)
{
	text	   *keys[PKLIMIT_GROUP_MAX];
	char	   *stored_keys[PKLIMIT_GROUP_MAX];
	PklimitCall calls[PKLIMIT_GROUP_MAX];
	PklimitAnswer answers[PKLIMIT_GROUP_MAX];
	bool		shadowed[PKLIMIT_GROUP_MAX];
	int			n = group_args(fcinfo, args, keys, stored_keys, calls);
	bool		allowed;

	InitMaterializedSRF(fcinfo, 0);
	allowed = run_calls(fcinfo, stored_keys, calls, NULL, answers, n, shadowed);
	check_all_rows(fcinfo, keys, calls, answers, shadowed, n, allowed);
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
	bool		shadowed[PKLIMIT_GROUP_MAX];
	int			n = group_args(fcinfo, args, keys, stored_keys, calls);

	return run_calls(fcinfo, stored_keys, calls, NULL, answers, n, shadowed);
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

/*
 * The cost argument of a call that names a policy: NULL for the policy's
 * own, else 0 or more.
 */
static void
policy_cost_arg(FunctionCallInfo fcinfo, int argno, PklimitCall *call)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return;
	call->cost = PG_GETARG_INT64(argno);
	if (call->cost < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost must not be negative"),
				 errdetail("cost is " INT64_FORMAT ".", call->cost),
				 errhint("Give the events the call records: 1 for one, 0 to look without recording, or NULL for the policy's cost.")));
}

/*
 * The call on one key under a policy: pklimit_allow(key, policy, cost) and
 * pklimit_check(key, policy, cost).  Returns what the call answers.
 */
static bool
policy_call(FunctionCallInfo fcinfo, PklimitCall *call, PklimitAnswer *answer,
			bool *shadowed)
{
	char	   *name = pklimit_policy_name_value(fcinfo, 1);
	char	   *stored_key = pklimit_policy_key(fcinfo, 0, name);
	PklimitPolicy policy;

	pklimit_policy_get(get_func_namespace(fcinfo->flinfo->fn_oid), name,
					   &policy);
	*call = policy.call;
	if (call->calendar != PKLIMIT_CALENDAR_NONE)
		pklimit_calendar_bounds(call, policy.tz, GetCurrentTimestamp());
	policy_cost_arg(fcinfo, 2, call);
	return run_calls(fcinfo, &stored_key, call, &policy, answer, 1, shadowed);
}

/* pklimit_allow(key, policy, cost) of 0.4.0 */
PG_FUNCTION_INFO_V1(pklimit_allow_policy);
Datum
pklimit_allow_policy(PG_FUNCTION_ARGS)
{
	PklimitCall call;
	PklimitAnswer answer;
	bool		shadowed;

	PG_RETURN_BOOL(policy_call(fcinfo, &call, &answer, &shadowed));
}

/* pklimit_check(key, policy, cost) of 0.4.0 */
PG_FUNCTION_INFO_V1(pklimit_check_policy);
Datum
pklimit_check_policy(PG_FUNCTION_ARGS)
{
	PklimitCall call;
	PklimitAnswer answer;
	bool		shadowed;
	bool		allowed;
	TupleDesc	tupdesc;
	Datum		values[CHECK_COLUMNS];
	bool		nulls[CHECK_COLUMNS] = {0};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	allowed = policy_call(fcinfo, &call, &answer, &shadowed);
	check_columns(&call, &answer, allowed, shadowed, values, nulls);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * The arguments of a call on several (key, policy) pairs: keys and policies,
 * as many of each, 1 to PKLIMIT_GROUP_MAX, no pair twice (after its tenant
 * is applied), and a cost for every pair (NULL: each policy's).  Returns
 * how many pairs.
 */
static int
policy_group_args(FunctionCallInfo fcinfo, text **keys, char **stored_keys,
				  PklimitCall *calls, PklimitPolicy *policies)
{
	Datum	   *key_datums;
	Datum	   *policy_datums;
	int			n = array_arg(fcinfo, 0, "keys", TEXTOID, &key_datums);
	int			n_policies = array_arg(fcinfo, 1, "policies", TEXTOID,
									   &policy_datums);
	Oid			nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	ElementContext element = {0};
	ErrorContextCallback context;

	if (n != n_policies)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keys and policies must have as many elements"),
				 errdetail("keys has %d and policies %d.", n, n_policies)));
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
	context.arg = &element;
	context.callback = element_context;
	context.previous = error_context_stack;
	error_context_stack = &context;
	for (int i = 0; i < n; i++)
	{
		LOCAL_FCINFO(pair, 2);
		char	   *name;

		/* each pair's checks are those of pklimit_allow(key, policy) */
		InitFunctionCallInfoData(*pair, fcinfo->flinfo, 2, InvalidOid, NULL, NULL);
		pair->args[0].value = key_datums[i];
		pair->args[0].isnull = false;
		pair->args[1].value = policy_datums[i];
		pair->args[1].isnull = false;
		element.element = i + 1;
		element.array = "policies";
		name = pklimit_policy_name_value(pair, 1);
		pklimit_policy_get(nspid, name, &policies[i]);
		element.array = "keys";
		keys[i] = DatumGetTextPP(key_datums[i]);
		stored_keys[i] = pklimit_policy_key(pair, 0, name);
		element.array = NULL;
		calls[i] = policies[i].call;
		calls[i].shadow = policies[i].shadow;
		if (calls[i].calendar != PKLIMIT_CALENDAR_NONE)
			pklimit_calendar_bounds(&calls[i], policies[i].tz,
									GetCurrentTimestamp());
		policy_cost_arg(fcinfo, 2, &calls[i]);
		for (int j = 0; j < i; j++)
			if (strcmp(stored_keys[i], stored_keys[j]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("keys and policies must not name a pair twice"),
						 errdetail("Elements %d and %d are the same key under the same policy.",
								   j + 1, i + 1)));
	}
	error_context_stack = context.previous;
	return n;
}

/* pklimit_check_all(keys, policies, cost) of 0.4.0 */
PG_FUNCTION_INFO_V1(pklimit_check_all_policy);
Datum
pklimit_check_all_policy(PG_FUNCTION_ARGS)
{
	text	   *keys[PKLIMIT_GROUP_MAX];
	char	   *stored_keys[PKLIMIT_GROUP_MAX];
	PklimitCall calls[PKLIMIT_GROUP_MAX];
	PklimitPolicy policies[PKLIMIT_GROUP_MAX];
	PklimitAnswer answers[PKLIMIT_GROUP_MAX];
	bool		shadowed[PKLIMIT_GROUP_MAX];
	int			n = policy_group_args(fcinfo, keys, stored_keys, calls, policies);
	bool		allowed;

	InitMaterializedSRF(fcinfo, 0);
	allowed = run_calls(fcinfo, stored_keys, calls, policies, answers, n,
						shadowed);
	check_all_rows(fcinfo, keys, calls, answers, shadowed, n, allowed);
	return (Datum) 0;
}

/* pklimit_allow_all(keys, policies, cost) of 0.4.0 */
PG_FUNCTION_INFO_V1(pklimit_allow_all_policy);
Datum
pklimit_allow_all_policy(PG_FUNCTION_ARGS)
{
	text	   *keys[PKLIMIT_GROUP_MAX];
	char	   *stored_keys[PKLIMIT_GROUP_MAX];
	PklimitCall calls[PKLIMIT_GROUP_MAX];
	PklimitPolicy policies[PKLIMIT_GROUP_MAX];
	PklimitAnswer answers[PKLIMIT_GROUP_MAX];
	bool		shadowed[PKLIMIT_GROUP_MAX];
	int			n = policy_group_args(fcinfo, keys, stored_keys, calls, policies);

	PG_RETURN_BOOL(run_calls(fcinfo, stored_keys, calls, policies, answers, n,
							 shadowed));
}
