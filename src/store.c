/*-------------------------------------------------------------------------
 *
 * store.c
 *		Applies one pklimit operation to platformkit_limits through SPI, in
 *		whatever transaction is current.  Where that transaction runs is the
 *		caller's business (pklimit.c); this file only knows the table.
 *
 * Every statement names its schema, functions and operators explicitly, so
 * the search_path in force cannot redirect it.  An event's time is read from
 * the server clock inside the statement, after the row lock is taken, so an
 * event that waited for the lock is counted in the window it landed in.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "pklimit.h"

/* True only while this file's statements run: the RLS predicate. */
bool		pklimit_in_system = false;

enum
{
	PLAN_HIT,
	PLAN_COUNT,
	PLAN_FORGET,
	PLAN_PURGE,
	NUM_PLANS
};

static SPIPlanPtr plans[NUM_PLANS];
static Oid	plans_nspid = InvalidOid;

/*
 * The hit: one INSERT ... ON CONFLICT DO UPDATE.  The window is recomputed
 * in the UPDATE arm because that arm runs after the row lock is held.  The
 * count saturates at the largest bigint instead of overflowing.
 */
static const char *const plan_sql[NUM_PLANS] = {
	"INSERT INTO %s.platformkit_limits AS l"
	" (key, window_start, window_end, count, updated_at)"
	" SELECT $1, b.ws, b.ws OPERATOR(pg_catalog.+) $2, $3, c.t"
	" FROM (SELECT pg_catalog.clock_timestamp() AS t) c,"
	" LATERAL (SELECT pg_catalog.date_bin($2, c.t,"
	"  '1970-01-01 00:00:00+00'::pg_catalog.timestamptz) AS ws) b"
	" ON CONFLICT (key) DO UPDATE SET"
	" (window_start, window_end, count, updated_at) ="
	" (SELECT b.ws, b.ws OPERATOR(pg_catalog.+) $2,"
	"   CASE WHEN l.window_start OPERATOR(pg_catalog.=) b.ws"
	"         AND l.window_end OPERATOR(pg_catalog.=) (b.ws OPERATOR(pg_catalog.+) $2)"
	"   THEN CASE WHEN l.count OPERATOR(pg_catalog.>)"
	"          (9223372036854775807::pg_catalog.int8 OPERATOR(pg_catalog.-) $3)"
	"        THEN 9223372036854775807::pg_catalog.int8"
	"        ELSE l.count OPERATOR(pg_catalog.+) $3 END"
	"   ELSE $3 END,"
	"   c.t"
	"  FROM (SELECT pg_catalog.clock_timestamp() AS t) c,"
	"  LATERAL (SELECT pg_catalog.date_bin($2, c.t,"
	"   '1970-01-01 00:00:00+00'::pg_catalog.timestamptz) AS ws) b)"
	" RETURNING l.count, l.window_end, l.updated_at",

	"SELECT l.count, l.window_end FROM %s.platformkit_limits l"
	" WHERE l.key OPERATOR(pg_catalog.=) $1"
	" AND l.window_end OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()",

	"DELETE FROM %s.platformkit_limits l"
	" WHERE l.key OPERATOR(pg_catalog.=) $1",

	/*
	 * One batch of the purge.  The window end is checked again on delete, so
	 * a row that got a new event meanwhile stays.
	 */
	"DELETE FROM %s.platformkit_limits l"
	" WHERE l.key OPERATOR(pg_catalog.=) ANY (ARRAY("
	"  SELECT e.key FROM %s.platformkit_limits e"
	"  WHERE e.window_end OPERATOR(pg_catalog.<) $1"
	"  ORDER BY e.window_end LIMIT $2))"
	" AND l.window_end OPERATOR(pg_catalog.<) $1",
};

static const int plan_nargs[NUM_PLANS] = {3, 1, 1, 2};
static Oid	plan_argtypes[NUM_PLANS][3] = {
	{TEXTOID, INTERVALOID, INT8OID},
	{TEXTOID},
	{TEXTOID},
	{TIMESTAMPTZOID, INT8OID},
};

/*
 * The owner of platformkit_limits in schema nspid: pklimit's statements run
 * as this role, so the table's privileges and row level security apply to
 * them as to any other statement.
 */
Oid
pklimit_store_owner(Oid nspid)
{
	Oid			relid = get_relname_relid("platformkit_limits", nspid);
	HeapTuple	tuple;
	Oid			owner;

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
	return owner;
}

/* Prepare (once per schema) and return the saved plan for one statement. */
static SPIPlanPtr
get_plan(Oid nspid, int which)
{
	if (plans_nspid != nspid)
	{
		for (int i = 0; i < NUM_PLANS; i++)
		{
			if (plans[i])
				SPI_freeplan(plans[i]);
			plans[i] = NULL;
		}
		plans_nspid = nspid;
	}

	if (plans[which] == NULL)
	{
		char	   *nspname = get_namespace_name(nspid);
		char	   *sql;
		SPIPlanPtr	plan;

		if (nspname == NULL)
			elog(ERROR, "schema with OID %u does not exist", nspid);
		nspname = (char *) quote_identifier(nspname);
		sql = psprintf(plan_sql[which], nspname, nspname);
		plan = SPI_prepare(sql, plan_nargs[which], plan_argtypes[which]);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for pklimit statement: %s",
				 SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		plans[which] = plan;
	}
	return plans[which];
}

/* Run one saved plan with pklimit_in_system set; returns SPI's result code. */
static int
run_plan(Oid nspid, int which, Datum *values, bool read_latest)
{
	SPIPlanPtr	plan = get_plan(nspid, which);
	int			rc;

	pklimit_in_system = true;
	PG_TRY();
	{
		if (read_latest)
			rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
									  InvalidSnapshot, false, false, 1);
		else
			rc = SPI_execute_plan(plan, values, NULL, false, 0);
	}
	PG_FINALLY();
	{
		pklimit_in_system = false;
	}
	PG_END_TRY();
	return rc;
}

static int64
get_int8(int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								  col, &isnull);

	return isnull ? 0 : DatumGetInt64(d);
}

/*
 * Apply one operation for stored_key.  For a hit, window_usec is the window
 * length and events how many events to record (at least 1).  The caller
 * has connected to SPI.
 */
void
pklimit_store_apply(Oid nspid, PklimitOpKind kind, const char *stored_key,
					int64 window_usec, int64 events, PklimitResult *result)
{
	Datum		values[3];
	int			rc;

	memset(result, 0, sizeof(*result));
	values[0] = CStringGetTextDatum(stored_key);

	switch (kind)
	{
		case PKLIMIT_OP_HIT:
			{
				Interval   *window = palloc0(sizeof(Interval));

				window->time = window_usec;
				values[1] = IntervalPGetDatum(window);
				values[2] = Int64GetDatum(events);
				rc = run_plan(nspid, PLAN_HIT, values, false);
				if (rc != SPI_OK_INSERT_RETURNING || SPI_processed != 1)
					elog(ERROR, "pklimit: recording an event returned %d", rc);
				result->found = true;
				result->count = get_int8(1);
				result->window_end = (TimestampTz) get_int8(2);
				result->event_at = (TimestampTz) get_int8(3);
				break;
			}
		case PKLIMIT_OP_COUNT:
			rc = run_plan(nspid, PLAN_COUNT, values, true);
			if (rc != SPI_OK_SELECT)
				elog(ERROR, "pklimit: reading a count returned %d", rc);
			if (SPI_processed == 1)
			{
				result->found = true;
				result->count = get_int8(1);
				result->window_end = (TimestampTz) get_int8(2);
			}
			break;
		case PKLIMIT_OP_FORGET:
			rc = run_plan(nspid, PLAN_FORGET, values, false);
			if (rc != SPI_OK_DELETE)
				elog(ERROR, "pklimit: forgetting a key returned %d", rc);
			result->found = (SPI_processed > 0);
			break;
		case PKLIMIT_OP_PURGE:
			elog(ERROR, "pklimit: a purge is not a single operation");
			break;
	}
}

/*
 * Delete at most limit rows whose window ended before cutoff; returns rows
 * deleted.
 */
int64
pklimit_store_purge(Oid nspid, TimestampTz cutoff, int64 limit)
{
	Datum		values[2];
	int			rc;

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = Int64GetDatum(limit);
	rc = run_plan(nspid, PLAN_PURGE, values, false);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "pklimit: purge returned %d", rc);
	return (int64) SPI_processed;
}
