/*-------------------------------------------------------------------------
 *
 * api.c
 *		What the SQL-callable functions share: argument checks (bad input is
 *		always an ERROR, raised before anything is recorded), handing
 *		requests to the database's worker through the queue (queue.c), and
 *		what to answer when the worker cannot be reached, as
 *		pklimit.on_unavailable says; and the functions that read, forget or
 *		take events back from a key.  A call whose keys the memory path holds
 *		is decided there first (memory.h).  The recording calls are
 *		check.c's.  Nothing here touches the table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "api.h"
#include "memory.h"
#include "policy.h"
#include "queue.h"
#include "settings.h"
#include "stats.h"
#include "store.h"

void
pklimit_arg_not_null(FunctionCallInfo fcinfo, int argno, const char *what)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
}

/* A key the caller gave: not empty; what names it. */
void
pklimit_key_check(text *key, const char *what)
{
	if (VARSIZE_ANY_EXHDR(key) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what),
				 errhint("Name what is counted, for example 'login:' || user_name.")));
}

/* The stored key of a key the caller gave (pklimit_key_check). */
char *
pklimit_key_value(text *key, const char *what)
{
	pklimit_key_check(key, what);
	return pklimit_stored_key(key);
}

/* A max_count the caller gave: 0 or more. */
int64
pklimit_max_count_value(int64 max_count, const char *what)
{
	if (max_count < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", what),
				 errdetail("%s is " INT64_FORMAT ".", what, max_count),
				 errhint("Give the events allowed per window: 0 refuses every call.")));
	return max_count;
}

static char *
stored_key_arg(FunctionCallInfo fcinfo)
{
	pklimit_arg_not_null(fcinfo, 0, "key");
	return pklimit_key_value(PG_GETARG_TEXT_PP(0), "key");
}

/*
 * Hand n requests (one, or the requests of one group) to this database's
 * worker and wait for their answers, within pklimit.timeout.  The requests'
 * kind and arguments are set; their database, schema, group and deadline
 * are set here.  Returns when the wait started (the budget's start).
 */
TimestampTz
pklimit_run(FunctionCallInfo fcinfo, PklimitRequest *requests,
			PklimitAnswer *answers, int n)
{
	Oid			nspid;
	TimestampTz started;

	pklimit_check_preloaded();
	started = GetCurrentTimestamp();
	memset(answers, 0, sizeof(PklimitAnswer) * n);
	if (RecoveryInProgress())
	{
		for (int i = 0; i < n; i++)
			answers[i].status = PKLIMIT_READ_ONLY;
		return started;
	}
	nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	for (int i = 0; i < n; i++)
	{
		requests[i].dboid = MyDatabaseId;
		requests[i].nspid = nspid;
		requests[i].deadline = started + (TimestampTz) pklimit_timeout * 1000;
		/* a calendar call is applied within the two windows it carries */
		if (requests[i].call.calendar != PKLIMIT_CALENDAR_NONE)
			requests[i].deadline = Min(requests[i].deadline,
									   requests[i].call.calendar_at[2]);
		requests[i].group_size = n;
		requests[i].track_stats = pklimit_track_stats;
	}
	pklimit_stats_claim();
	/* the memory path: decided (and counted) here if its keys are in memory */
	if ((requests[0].call.memory || requests[0].kind == PKLIMIT_OP_COUNT) &&
		pklimit_memory_decide(requests, answers, n))
		return started;

	pklimit_submit(requests, answers, n);
	if (answers[0].status == PKLIMIT_OK && answers[0].unreplicated)
		ereport(WARNING,
				(errmsg("pklimit's commit of this call was not confirmed by the synchronous standby"),
				 errdetail("The pklimit worker stopped waiting for the standby: the call is committed locally, but might not have been replicated.")));
	return started;
}

/* One operation on one stored key. */
static void
run_on_key(FunctionCallInfo fcinfo, PklimitOpKind kind,
		   const char *stored_key, int64 cost, bool memory,
		   PklimitAnswer *answer)
{
	PklimitRequest request;

	memset(&request, 0, sizeof(request));
	request.kind = kind;
	request.call.cost = cost;
	request.call.memory = memory;
	strlcpy(request.key, stored_key, sizeof(request.key));
	(void) pklimit_run(fcinfo, &request, answer, 1);
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
		case PKLIMIT_APPLY_ERROR:
			return "error";
	}
	return "error";
}

/* Why a call was unavailable: the SQLSTATE and a detail. */
static int
unavailable_reason(const PklimitAnswer *answer, PklimitCaller caller,
				   char **detail)
{
	switch (answer->status)
	{
		case PKLIMIT_TIMEOUT:
			*detail = psprintf("No answer came within pklimit.timeout (%d ms).",
							   pklimit_timeout);
			return ERRCODE_QUERY_CANCELED;
		case PKLIMIT_QUEUE_FULL:
			*detail = psprintf("The request queue had no slot for this database: of its %d slots (pklimit.queue_size), each database with a worker keeps %d, and the rest were in use.",
							   pklimit_queue_size, pklimit_queue_share());
			return ERRCODE_INSUFFICIENT_RESOURCES;
		case PKLIMIT_NO_WORKER:
			*detail = pstrdup("No pklimit worker serves this database, and none could be started; see max_worker_processes, pklimit.max_workers and pklimit.databases.");
			return ERRCODE_INSUFFICIENT_RESOURCES;
		case PKLIMIT_READ_ONLY:
			*detail = pstrdup("The server is a hot standby or refused the write as read-only; pklimit records events on the primary.");
			return ERRCODE_READ_ONLY_SQL_TRANSACTION;
		case PKLIMIT_LOCK_TIMEOUT:
			if (caller == PKLIMIT_CALL_PURGES)
				*detail = psprintf("A row the purge had to delete, or the table, stayed locked by another transaction for %d seconds.",
								   PKLIMIT_PURGE_LOCK_SECONDS);
			else
				*detail = pstrdup("The key's row, or the table, stayed locked by a transaction, possibly the caller's own, for the whole of pklimit.timeout.");
			return ERRCODE_LOCK_NOT_AVAILABLE;
		case PKLIMIT_NO_TABLE:
			*detail = pstrdup("The table platformkit_limits does not exist.");
			return ERRCODE_UNDEFINED_TABLE;
		case PKLIMIT_OK:
		case PKLIMIT_APPLY_ERROR:
			break;
	}
	*detail = psprintf("The pklimit worker failed: %s.", answer->message);
	return answer->sqlstate ? answer->sqlstate : ERRCODE_INTERNAL_ERROR;
}

/*
 * What a recording call answers when it is unavailable, unless
 * pklimit.on_unavailable makes it an error: allowed (it fails open) or not.
 */
bool
pklimit_unavailable_allows(void)
{
	return pklimit_on_unavailable == PKLIMIT_ON_UNAVAILABLE_ALLOW;
}

/*
 * The call was unavailable: raise an error or warn, as
 * pklimit.on_unavailable says (a purge always raises).  Returns the answer
 * to give instead: true (allow) or false (deny).
 */
bool
pklimit_unavailable(const PklimitAnswer *answer, PklimitCaller caller)
{
	bool		force_error = (caller == PKLIMIT_CALL_PURGES);
	char	   *detail;
	int			sqlstate = unavailable_reason(answer, caller, &detail);
	const char *outcome;

	/* a purge reports its own failure as the error it was */
	if (force_error && answer->status == PKLIMIT_APPLY_ERROR)
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
	if (caller == PKLIMIT_CALL_READS)
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
	return pklimit_unavailable_allows();
}

/*
 * A count, a forget or a decrement (of cost) of the stored key: false,
 * after the warning (or the error) pklimit.on_unavailable asks for, if the
 * call was unavailable.
 */
static bool
key_call(FunctionCallInfo fcinfo, PklimitOpKind kind, const char *stored_key,
		 int64 cost, bool memory, PklimitAnswer *answer)
{
	run_on_key(fcinfo, kind, stored_key, cost, memory, answer);
	if (answer->status == PKLIMIT_OK)
		return true;
	(void) pklimit_unavailable(answer, PKLIMIT_CALL_READS);
	return false;
}

/* The count of the key's open window; NULL if the call was unavailable. */
PG_FUNCTION_INFO_V1(pklimit_count);
Datum
pklimit_count(PG_FUNCTION_ARGS)
{
	PklimitAnswer answer;

	if (!key_call(fcinfo, PKLIMIT_OP_COUNT, stored_key_arg(fcinfo), 0, false, &answer))
		PG_RETURN_NULL();
	PG_RETURN_INT64(answer.result.found ? answer.result.count : 0);
}

/* Delete the key's row; NULL if the call was unavailable. */
PG_FUNCTION_INFO_V1(pklimit_forget);
Datum
pklimit_forget(PG_FUNCTION_ARGS)
{
	PklimitAnswer answer;

	if (!key_call(fcinfo, PKLIMIT_OP_FORGET, stored_key_arg(fcinfo), 0, false, &answer))
		PG_RETURN_NULL();
	PG_RETURN_BOOL(answer.result.found);
}

/*
 * pklimit_decrement(key, cost, durable): up to cost events taken back from
 * the key's open state; its count after (0 if none is open), NULL if the
 * call was unavailable.
 */
PG_FUNCTION_INFO_V1(pklimit_decrement);
Datum
pklimit_decrement(PG_FUNCTION_ARGS)
{
	PklimitAnswer answer;
	char	   *stored_key = stored_key_arg(fcinfo);
	int64		cost;

	pklimit_arg_not_null(fcinfo, 1, "cost");
	cost = PG_GETARG_INT64(1);
	if (cost < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost must not be negative"),
				 errdetail("cost is " INT64_FORMAT ".", cost),
				 errhint("Give the events to take back: 1 for one.")));
	if (PG_NARGS() > 2)
		pklimit_arg_not_null(fcinfo, 2, "durable");
	if (!key_call(fcinfo, PKLIMIT_OP_DECREMENT, stored_key, cost,
				  PG_NARGS() > 2 && !PG_GETARG_BOOL(2), &answer))
		PG_RETURN_NULL();
	PG_RETURN_INT64(answer.result.count);
}

/*
 * The stored key of a (key, policy) call and its policy, which must exist:
 * a read or a take-back under a policy nobody made is a mistake, not 0.
 */
static char *
policy_key_args(FunctionCallInfo fcinfo, PklimitPolicy *policy)
{
	char	   *name = pklimit_policy_name_value(fcinfo, 1);
	char	   *stored_key = pklimit_policy_key(fcinfo, 0, name);

	pklimit_policy_get(get_func_namespace(fcinfo->flinfo->fn_oid), name,
					   policy);
	return stored_key;
}

/* pklimit_count(key, policy): the count of key under policy. */
PG_FUNCTION_INFO_V1(pklimit_count_policy);
Datum
pklimit_count_policy(PG_FUNCTION_ARGS)
{
	PklimitPolicy policy;
	char	   *stored_key = policy_key_args(fcinfo, &policy);
	PklimitAnswer answer;

	if (!key_call(fcinfo, PKLIMIT_OP_COUNT, stored_key, 0, false, &answer))
		PG_RETURN_NULL();
	PG_RETURN_INT64(answer.result.found ? answer.result.count : 0);
}

/* pklimit_forget(key, policy): delete key's row under policy. */
PG_FUNCTION_INFO_V1(pklimit_forget_policy);
Datum
pklimit_forget_policy(PG_FUNCTION_ARGS)
{
	PklimitPolicy policy;
	char	   *stored_key = policy_key_args(fcinfo, &policy);
	PklimitAnswer answer;

	if (!key_call(fcinfo, PKLIMIT_OP_FORGET, stored_key, 0, false, &answer))
		PG_RETURN_NULL();
	PG_RETURN_BOOL(answer.result.found);
}

/*
 * pklimit_decrement(key, policy, cost): up to cost events (NULL: the
 * policy's cost) taken back from key's state under policy, on the policy's
 * path.
 */
PG_FUNCTION_INFO_V1(pklimit_decrement_policy);
Datum
pklimit_decrement_policy(PG_FUNCTION_ARGS)
{
	PklimitPolicy policy;
	char	   *stored_key = policy_key_args(fcinfo, &policy);
	PklimitAnswer answer;
	int64		cost = policy.call.cost;

	if (!PG_ARGISNULL(2))
		cost = PG_GETARG_INT64(2);
	if (cost < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost must not be negative"),
				 errdetail("cost is " INT64_FORMAT ".", cost),
				 errhint("Give the events to take back: 1 for one, or NULL for the policy's cost.")));
	if (!key_call(fcinfo, PKLIMIT_OP_DECREMENT, stored_key, cost,
				  policy.call.memory, &answer))
		PG_RETURN_NULL();
	PG_RETURN_INT64(answer.result.count);
}

/* The row level security predicate: true only inside pklimit's statements. */
PG_FUNCTION_INFO_V1(platformkit_is_system);
Datum
platformkit_is_system(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(pklimit_in_system);
}
