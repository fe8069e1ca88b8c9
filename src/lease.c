/*-------------------------------------------------------------------------
 *
 * lease.c
 *		Concurrency limits (docs/leases.md): the SQL functions that acquire,
 *		release, renew and show a key's leases, and the rules the worker
 *		applies to the key's row (unit.c).  A lease is recorded by the
 *		worker, as a rate limit's events are, on the durable path only: a
 *		lease kept in memory and lost at a crash would let one more run.
 *		pklimit_leases() reads the table itself, as its owner.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "api.h"
#include "lease.h"
#include "policy.h"
#include "settings.h"
#include "stats.h"
#include "store.h"

#define ACQUIRE_CHECK_COLUMNS 5

/* Drop the leases that ended by now. */
static void
drop_expired(PklimitLeaseRow *row, TimestampTz now)
{
	int			kept = 0;

	for (int i = 0; i < row->n; i++)
		if (row->leases[i].expires_at > now)
			row->leases[kept++] = row->leases[i];
	row->n = kept;
}

/* The place of a lease of token in the row, or -1. */
static int
find_token(const PklimitLeaseRow *row, const pg_uuid_t *token)
{
	for (int i = 0; i < row->n; i++)
		if (memcmp(row->leases[i].token.data, token->data, UUID_LEN) == 0)
			return i;
	return -1;
}

static int
compare_timestamps(const void *a, const void *b)
{
	TimestampTz x = *(const TimestampTz *) a;
	TimestampTz y = *(const TimestampTz *) b;

	return (x > y) - (x < y);
}

/*
 * When a refused call would be granted, if no lease were released, renewed
 * or taken meanwhile: once all but max_concurrent - 1 of the live leases
 * have ended; 0 for never (max_concurrent 0).
 */
static TimestampTz
granted_at(const PklimitLeaseRow *row, int64 max_concurrent)
{
	TimestampTz *ends;
	TimestampTz at;

	if (max_concurrent <= 0 || row->n < max_concurrent)
		return 0;
	ends = palloc(sizeof(TimestampTz) * row->n);
	for (int i = 0; i < row->n; i++)
		ends[i] = row->leases[i].expires_at;
	qsort(ends, row->n, sizeof(TimestampTz), compare_timestamps);
	at = ends[row->n - max_concurrent];
	pfree(ends);
	return at;
}

/*
 * Take a lease of lease_usec with token if fewer than max_concurrent are
 * live at now.  The result: allowed (granted), count (live leases after),
 * reset_at (the new lease's end) or retry_at (refused: when enough live
 * leases end for it to be granted; 0 for never).  Returns whether the row
 * changed.
 */
bool
pklimit_lease_acquire(PklimitLeaseRow *row, int64 max_concurrent,
					  int64 lease_usec, const pg_uuid_t *token,
					  TimestampTz now, PklimitResult *result)
{
	int			before = row->n;

	memset(result, 0, sizeof(*result));
	result->event_at = now;
	drop_expired(row, now);
	if (row->n < max_concurrent && row->n < PKLIMIT_LEASES_MAX)
	{
		PklimitLease *l = &row->leases[row->n++];

		l->token = *token;
		l->acquired_at = now;
		l->expires_at = now + lease_usec;
		l->lease_usec = lease_usec;
		row->max_concurrent = max_concurrent;
		result->allowed = true;
		result->reset_at = l->expires_at;
		result->count = row->n;
		return true;
	}
	result->retry_at = granted_at(row, max_concurrent);
	result->count = row->n;
	return row->n != before;
}

/*
 * Free the live lease of token: result->found says whether there was one.
 * Returns whether the row changed.
 */
bool
pklimit_lease_release(PklimitLeaseRow *row, const pg_uuid_t *token,
					  TimestampTz now, PklimitResult *result)
{
	int			before = row->n;
	int			i;

	memset(result, 0, sizeof(*result));
	result->event_at = now;
	drop_expired(row, now);
	if ((i = find_token(row, token)) >= 0)
	{
		memmove(&row->leases[i], &row->leases[i + 1],
				sizeof(PklimitLease) * (row->n - i - 1));
		row->n--;
		result->found = true;
	}
	result->count = row->n;
	return row->n != before;
}

/*
 * Extend the live lease of token to end no sooner than lease_usec from now
 * (0: the length it was acquired with): result->found says whether there
 * was one, result->reset_at its end.  Returns whether the row changed.
 */
bool
pklimit_lease_renew(PklimitLeaseRow *row, const pg_uuid_t *token,
					int64 lease_usec, TimestampTz now, PklimitResult *result)
{
	int			before = row->n;
	int			i;

	memset(result, 0, sizeof(*result));
	result->event_at = now;
	drop_expired(row, now);
	if ((i = find_token(row, token)) >= 0)
	{
		PklimitLease *l = &row->leases[i];
		TimestampTz end = now + (lease_usec > 0 ? lease_usec : l->lease_usec);

		result->found = true;
		result->reset_at = Max(l->expires_at, end);
		result->count = row->n;
		if (end > l->expires_at)
		{
			l->expires_at = end;
			return true;
		}
	}
	result->count = row->n;
	return row->n != before;
}

/* When the row's last lease ends (0: it has none). */
TimestampTz
pklimit_lease_held_until(const PklimitLeaseRow *row)
{
	TimestampTz until = 0;

	for (int i = 0; i < row->n; i++)
		until = Max(until, row->leases[i].expires_at);
	return until;
}

/* A max_concurrent the caller gave. */
static int64
max_concurrent_value(int64 max_concurrent)
{
	if (max_concurrent < 0 || max_concurrent > PKLIMIT_LEASES_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_concurrent must be between 0 and %d",
						PKLIMIT_LEASES_MAX),
				 errdetail("max_concurrent is " INT64_FORMAT ".", max_concurrent),
				 errhint("Each call reads and writes every live lease of its key, so a key holds at most %d at once.",
						 PKLIMIT_LEASES_MAX)));
	return max_concurrent;
}

/* The stored key of argument 0. */
static char *
key_arg(FunctionCallInfo fcinfo)
{
	pklimit_arg_not_null(fcinfo, 0, "key");
	return pklimit_key_value(PG_GETARG_TEXT_PP(0), "key");
}

/* A token argument. */
static pg_uuid_t *
token_arg(FunctionCallInfo fcinfo, int argno)
{
	pklimit_arg_not_null(fcinfo, argno, "token");
	return PG_GETARG_UUID_P(argno);
}

/* What an acquire answers. */
typedef struct Acquired
{
	PklimitAnswer answer;
	pg_uuid_t	token;
	bool		has_token;		/* a token is returned */
	bool		shadow;			/* refused, and shadow mode gave a token */
	int64		max_concurrent;
} Acquired;

/*
 * Take a lease on stored_key.  Refused in shadow mode (the session's or its
 * policy's), or unavailable with pklimit.on_unavailable = allow, the call
 * answers a token that is no lease: it counts toward nothing.
 */
static void
acquire(FunctionCallInfo fcinfo, const char *stored_key, int64 max_concurrent,
		int64 lease_usec, const PklimitPolicy *policy, Acquired *out)
{
	PklimitRequest request;
	TimestampTz started;
	bool		ok;

	memset(&request, 0, sizeof(request));
	memset(out, 0, sizeof(*out));
	request.kind = PKLIMIT_OP_ACQUIRE;
	request.call.max_count = max_concurrent;
	request.call.window_usec = lease_usec;
	request.call.cost = 1;
	strlcpy(request.key, stored_key, sizeof(request.key));
	/* a version 4 UUID, as gen_random_uuid() makes */
	if (!pg_strong_random(request.token.data, UUID_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));
	request.token.data[6] = (request.token.data[6] & 0x0f) | 0x40;
	request.token.data[8] = (request.token.data[8] & 0x3f) | 0x80;
	out->token = request.token;
	out->max_concurrent = max_concurrent;

	started = pklimit_run(fcinfo, &request, &out->answer, 1);
	if (out->answer.status != PKLIMIT_OK)
	{
		pklimit_stats_call(out->answer.status, pklimit_unavailable_allows(),
						   false, started);
		if (policy != NULL)
			pklimit_policy_count(policy, out->answer.status, false, false);
		out->has_token = pklimit_unavailable(&out->answer, PKLIMIT_CALL_DECIDES);
		return;
	}
	ok = out->answer.result.allowed;
	out->shadow = !ok && (pklimit_shadow_mode ||
						  (policy != NULL && policy->shadow));
	out->has_token = ok || out->shadow;
	if (policy != NULL)
		pklimit_policy_count(policy, PKLIMIT_OK, ok, out->shadow);
	pklimit_stats_call(PKLIMIT_OK, ok, out->shadow, started);
}

/* An acquire's arguments given directly: key, max_concurrent, lease. */
static void
acquire_direct(FunctionCallInfo fcinfo, Acquired *out)
{
	char	   *stored_key = key_arg(fcinfo);
	int64		max_concurrent;
	int64		lease_usec;

	pklimit_arg_not_null(fcinfo, 1, "max_concurrent");
	pklimit_arg_not_null(fcinfo, 2, "lease");
	max_concurrent = max_concurrent_value(PG_GETARG_INT64(1));
	lease_usec = pklimit_window_value(PG_GETARG_INTERVAL_P(2), "lease");
	acquire(fcinfo, stored_key, max_concurrent, lease_usec, NULL, out);
}

/*
 * An acquire's arguments from a policy: its max_count is max_concurrent and
 * its window the lease.  A key's leases are the key's, whichever policy or
 * number a call names, as for direct calls.
 */
static void
acquire_policy(FunctionCallInfo fcinfo, Acquired *out)
{
	char	   *name = pklimit_policy_name_value(fcinfo, 1);
	char	   *stored_key = key_arg(fcinfo);
	PklimitPolicy policy;

	pklimit_policy_get(get_func_namespace(fcinfo->flinfo->fn_oid), name,
					   &policy);
	if (policy.call.memory || policy.call.calendar != PKLIMIT_CALENDAR_NONE ||
		policy.call.max_count > PKLIMIT_LEASES_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("policy \"%s\" cannot limit leases", name),
				 errdetail(policy.call.memory ?
						   "It is not durable, and leases are durable only." :
						   policy.call.calendar != PKLIMIT_CALENDAR_NONE ?
						   "Its window is a calendar window (time_zone), not a lease length." :
						   "Its max_count is above %d, the most leases a key holds at once.",
						   PKLIMIT_LEASES_MAX),
				 errhint("A policy for leases gives max_concurrent as max_count and the lease as window, durable and without time_zone.")));
	acquire(fcinfo, stored_key, policy.call.max_count, policy.call.window_usec,
			&policy, out);
}

static Datum
acquired_token(FunctionCallInfo fcinfo, const Acquired *a)
{
	pg_uuid_t  *token;

	if (!a->has_token)
		PG_RETURN_NULL();
	token = palloc(sizeof(pg_uuid_t));
	*token = a->token;
	PG_RETURN_UUID_P(token);
}

/*
 * pklimit_acquire_check's row: token, held, max_concurrent, retry_after,
 * status.  Unavailable, only token and status are set.
 */
static Datum
acquired_row(FunctionCallInfo fcinfo, const Acquired *a)
{
	const PklimitResult *r = &a->answer.result;
	TupleDesc	tupdesc;
	Datum		values[ACQUIRE_CHECK_COLUMNS] = {0};
	bool		nulls[ACQUIRE_CHECK_COLUMNS] = {0};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (a->has_token)
	{
		pg_uuid_t  *token = palloc(sizeof(pg_uuid_t));

		*token = a->token;
		values[0] = UUIDPGetDatum(token);
	}
	else
		nulls[0] = true;
	values[2] = Int64GetDatum(a->max_concurrent);
	values[4] = CStringGetTextDatum(a->shadow ? "shadow" :
									pklimit_status_name(a->answer.status));
	if (a->answer.status == PKLIMIT_OK)
	{
		values[1] = Int64GetDatum(r->count);
		if (r->allowed || r->retry_at != 0)
		{
			Interval   *retry_after = palloc0(sizeof(Interval));

			if (!r->allowed)
				retry_after->time = Max(r->retry_at - r->event_at, 0);
			values[3] = IntervalPGetDatum(retry_after);
		}
		else
			nulls[3] = true;	/* refused with none live: none will end */
	}
	else
		nulls[1] = nulls[3] = true;
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

PG_FUNCTION_INFO_V1(pklimit_acquire);
Datum
pklimit_acquire(PG_FUNCTION_ARGS)
{
	Acquired	a;

	acquire_direct(fcinfo, &a);
	return acquired_token(fcinfo, &a);
}

PG_FUNCTION_INFO_V1(pklimit_acquire_check);
Datum
pklimit_acquire_check(PG_FUNCTION_ARGS)
{
	Acquired	a;

	acquire_direct(fcinfo, &a);
	return acquired_row(fcinfo, &a);
}

PG_FUNCTION_INFO_V1(pklimit_acquire_policy);
Datum
pklimit_acquire_policy(PG_FUNCTION_ARGS)
{
	Acquired	a;

	acquire_policy(fcinfo, &a);
	return acquired_token(fcinfo, &a);
}

PG_FUNCTION_INFO_V1(pklimit_acquire_check_policy);
Datum
pklimit_acquire_check_policy(PG_FUNCTION_ARGS)
{
	Acquired	a;

	acquire_policy(fcinfo, &a);
	return acquired_row(fcinfo, &a);
}

/*
 * A release or a renewal of token on stored_key: whether the lease was live;
 * NULL if the call was unavailable (after the warning or the error
 * pklimit.on_unavailable asks for).
 */
static Datum
lease_call(FunctionCallInfo fcinfo, PklimitOpKind kind, const char *stored_key,
		   const pg_uuid_t *token, int64 lease_usec)
{
	PklimitRequest request;
	PklimitAnswer answer;

	memset(&request, 0, sizeof(request));
	request.kind = kind;
	request.call.window_usec = lease_usec;
	request.token = *token;
	strlcpy(request.key, stored_key, sizeof(request.key));
	(void) pklimit_run(fcinfo, &request, &answer, 1);
	if (answer.status != PKLIMIT_OK)
	{
		(void) pklimit_unavailable(&answer, PKLIMIT_CALL_READS);
		PG_RETURN_NULL();
	}
	PG_RETURN_BOOL(answer.result.found);
}

PG_FUNCTION_INFO_V1(pklimit_release);
Datum
pklimit_release(PG_FUNCTION_ARGS)
{
	char	   *stored_key = key_arg(fcinfo);
	pg_uuid_t  *token = token_arg(fcinfo, 1);

	return lease_call(fcinfo, PKLIMIT_OP_RELEASE, stored_key, token, 0);
}

PG_FUNCTION_INFO_V1(pklimit_renew);
Datum
pklimit_renew(PG_FUNCTION_ARGS)
{
	char	   *stored_key = key_arg(fcinfo);
	pg_uuid_t  *token = token_arg(fcinfo, 1);
	int64		lease_usec = 0;

	if (!PG_ARGISNULL(2))
		lease_usec = pklimit_window_value(PG_GETARG_INTERVAL_P(2), "lease");
	return lease_call(fcinfo, PKLIMIT_OP_RENEW, stored_key, token, lease_usec);
}

/*
 * The live leases of a key, oldest first: read from the table as last
 * committed (not as the caller's snapshot saw it, so a lease acquired in
 * this transaction shows), as its owner, past its row level security as
 * pklimit's own statements are (the key is the caller's tenant's).
 */
PG_FUNCTION_INFO_V1(pklimit_leases);
Datum
pklimit_leases(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *stored_key = key_arg(fcinfo);
	Oid			nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	Oid			relid = get_relname_relid(PKLIMIT_LEASE_TABLE, nspid);
	Oid			argtypes[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		args[2];
	PklimitAsOwner owner;
	SPIPlanPtr	plan;
	int			rc;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("pklimit table \"%s\" does not exist", PKLIMIT_LEASE_TABLE),
				 errhint("Update pklimit: ALTER EXTENSION pklimit UPDATE.")));
	InitMaterializedSRF(fcinfo, 0);
	args[0] = CStringGetTextDatum(stored_key);
	args[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	pklimit_as_owner_begin(relid, &owner);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(psprintf("SELECT u.token, u.acquired_at, u.expires_at"
								" FROM %s.%s l, ROWS FROM (pg_catalog.unnest(l.tokens),"
								"  pg_catalog.unnest(l.acquired_at),"
								"  pg_catalog.unnest(l.expires_at))"
								"  AS u(token, acquired_at, expires_at)"
								" WHERE l.key OPERATOR(pg_catalog.=) $1"
								" AND u.expires_at OPERATOR(pg_catalog.>) $2"
								" ORDER BY u.acquired_at, u.token",
								quote_identifier(get_namespace_name(nspid)),
								PKLIMIT_LEASE_TABLE),
					   2, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	pklimit_in_system = true;
	PG_TRY();
	{
		rc = SPI_execute_snapshot(plan, args, NULL, GetLatestSnapshot(),
								  InvalidSnapshot, true, false, 0);
	}
	PG_FINALLY();
	{
		pklimit_in_system = false;
	}
	PG_END_TRY();
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read pklimit's leases");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Datum		values[3];
		bool		nulls[3];

		heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
						  values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	pklimit_as_owner_end(&owner);
	return (Datum) 0;
}
