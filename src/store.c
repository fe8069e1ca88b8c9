/*-------------------------------------------------------------------------
 *
 * store.c
 *		The statements on platformkit_limits, run through SPI in whatever
 *		transaction is current.  The worker (apply.c, purge.c) decides which
 *		transaction that is and as which role; this file knows only the
 *		table, and must not begin, end or wait on anything itself.
 *
 * Every statement names its schema, functions and operators explicitly, so
 * the search_path in force cannot redirect it.  An event's time is read from
 * the server clock just before its statement runs; the worker is the table's
 * only writer and waits at most PKLIMIT_BATCH_LOCK_MS for a row someone
 * else locked, so an event lands at most that far from the moment it was
 * read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "pklimit.h"

/* 1970-01-01 00:00:00+00 as a TimestampTz: where fixed windows are aligned */
#define PKLIMIT_UNIX_EPOCH \
	((TimestampTz) (UNIX_EPOCH_JDATE - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY)

/* True only while this file's statements run: the RLS predicate. */
bool		pklimit_in_system = false;

/* One statement: its SQL (%s stands for the schema), arguments and plan. */
typedef struct Statement
{
	const char *sql;
	int			nargs;
	Oid			argtypes[5];
	bool		read_latest;	/* read the latest committed rows, whatever
								 * the transaction's snapshot */
	SPIPlanPtr	plan;			/* prepared once per schema, kept */
} Statement;

typedef enum StatementId
{
	STMT_HIT,
	STMT_COUNT,
	STMT_FORGET,
	STMT_PURGE,
	NUM_STATEMENTS
} StatementId;

static Statement statements[NUM_STATEMENTS] = {
	/*
	 * The hit: one INSERT ... ON CONFLICT DO UPDATE.  The window and the
	 * event's time come from the caller, read from the server clock just
	 * before the statement runs: pklimit's worker is the table's only writer,
	 * so no other writer of the row can come between.  A key has one window
	 * at a time: while its window is open, events count in it whatever the
	 * window length of the call, and a new window (of the call's length)
	 * starts only once it has closed, so two lengths cannot reset each
	 * other's count.  The count saturates at the largest bigint instead of
	 * overflowing.
	 */
	[STMT_HIT] = {
		"INSERT INTO %s.platformkit_limits AS l"
		" (key, window_start, window_end, count, updated_at)"
		" VALUES ($1, $2, $3, $4, $5)"
		" ON CONFLICT (key) DO UPDATE SET"
		" count = CASE WHEN l.window_end OPERATOR(pg_catalog.>) $5"
		"   THEN CASE WHEN l.count OPERATOR(pg_catalog.>)"
		"          (9223372036854775807::pg_catalog.int8 OPERATOR(pg_catalog.-) $4)"
		"        THEN 9223372036854775807::pg_catalog.int8"
		"        ELSE l.count OPERATOR(pg_catalog.+) $4 END"
		"   ELSE $4 END,"
		" window_start = CASE WHEN l.window_end OPERATOR(pg_catalog.>) $5"
		"   THEN l.window_start ELSE $2 END,"
		" window_end = CASE WHEN l.window_end OPERATOR(pg_catalog.>) $5"
		"   THEN l.window_end ELSE $3 END,"
		" updated_at = $5"
		" RETURNING l.count, l.window_end, l.updated_at",
		5, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID},
		false
	},
	[STMT_COUNT] = {
		"SELECT l.count, l.window_end FROM %s.platformkit_limits l"
		" WHERE l.key OPERATOR(pg_catalog.=) $1"
		" AND l.window_end OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()",
		1, {TEXTOID},
		true
	},
	[STMT_FORGET] = {
		"DELETE FROM %s.platformkit_limits l"
		" WHERE l.key OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID},
		false
	},

	/*
	 * One batch of the purge, from the window end where the previous batch
	 * stopped, so no batch walks again over the index entries of rows already
	 * deleted.  The rows are found in the window_end index and deleted by
	 * their ctid alone, so the delete is a TID scan whatever the table's
	 * statistics say (a condition on window_end there would let stale
	 * statistics pick a walk over every expired row instead).  A row changed
	 * since it was found has another ctid and is left alone.
	 */
	[STMT_PURGE] = {
		"WITH d AS (DELETE FROM %s.platformkit_limits l"
		" WHERE l.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
		"  SELECT e.ctid FROM %s.platformkit_limits e"
		"  WHERE e.window_end OPERATOR(pg_catalog.<) $1"
		"  AND e.window_end OPERATOR(pg_catalog.>=) $3"
		"  ORDER BY e.window_end LIMIT $2))"
		" RETURNING l.window_end)"
		" SELECT pg_catalog.count(*), pg_catalog.max(d.window_end) FROM d",
		3, {TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID},
		false
	},
};

/* The schema the kept plans were prepared for, by OID and by name. */
static Oid	plans_nspid = InvalidOid;
static char plans_nspname[NAMEDATALEN];

/*
 * The owner of platformkit_limits in schema nspid: pklimit's statements run
 * as this role, so the table's privileges and row level security apply to
 * them as to any other statement.  Raises an error unless the table is the
 * extension's own and has no trigger or rule.
 */
Oid
pklimit_store_owner(Oid nspid)
{
	static Oid	checked_relid = InvalidOid; /* known to be the extension's */
	Oid			relid = get_relname_relid("platformkit_limits", nspid);
	HeapTuple	tuple;
	Oid			owner;
	bool		has_triggers;
	bool		has_rules;

	/* only the extension's own table: its owner is the role we become */
	if (!OidIsValid(relid) ||
		(relid != checked_relid &&
		 getExtensionOfObject(RelationRelationId, relid) !=
		 get_extension_oid("pklimit", true)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("pklimit table \"platformkit_limits\" does not exist"),
				 errdetail("The schema of pklimit's functions has no table platformkit_limits that belongs to the extension.")));
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	has_triggers = ((Form_pg_class) GETSTRUCT(tuple))->relhastriggers;
	has_rules = ((Form_pg_class) GETSTRUCT(tuple))->relhasrules;
	ReleaseSysCache(tuple);

	/*
	 * A trigger or rule on the table (a foreign key referencing it makes
	 * triggers too) would run inside pklimit's statements, as the owner and
	 * with the row level security predicate true.  relhastriggers can stay
	 * set after the last trigger is dropped, so the relation has the word.
	 */
	if (has_triggers || has_rules)
	{
		Relation	rel = table_open(relid, AccessShareLock);

		has_triggers = (rel->trigdesc != NULL);
		has_rules = (rel->rd_rules != NULL);
		table_close(rel, AccessShareLock);
		if (has_triggers || has_rules)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("pklimit refuses to write table \"platformkit_limits\" because it has %s",
							has_triggers ? "triggers" : "rules"),
					 errdetail("Triggers, foreign keys referencing the table and rules would run with the table owner's privileges."),
					 errhint("Drop them; pklimit's table must have none.")));
	}
	checked_relid = relid;
	return owner;
}

/*
 * Is platformkit_limits in schema nspid free to write, or does another
 * transaction hold a lock on the whole table?  Takes the table's
 * RowExclusiveLock, which pklimit's statements take anyway, if it is
 * granted at once; in a transaction.
 */
bool
pklimit_store_table_free(Oid nspid)
{
	Oid			relid = get_relname_relid("platformkit_limits", nspid);

	return !OidIsValid(relid) ||
		ConditionalLockRelationOid(relid, RowExclusiveLock);
}

/*
 * The kept plan of one statement, prepared on first use for schema nspid.
 * The statements name the schema, so they are prepared again whenever the
 * schema's name changes: a renamed extension schema must never leave them
 * pointing at a table someone else created under the old name.
 */
static SPIPlanPtr
get_plan(Oid nspid, StatementId id)
{
	char	   *nspname = get_namespace_name(nspid);
	Statement  *stmt = &statements[id];

	if (nspname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("pklimit table \"platformkit_limits\" does not exist")));
	if (plans_nspid != nspid || strcmp(plans_nspname, nspname) != 0)
	{
		for (int i = 0; i < NUM_STATEMENTS; i++)
		{
			if (statements[i].plan)
				SPI_freeplan(statements[i].plan);
			statements[i].plan = NULL;
		}
		plans_nspid = nspid;
		strlcpy(plans_nspname, nspname, NAMEDATALEN);
	}

	if (stmt->plan == NULL)
	{
		const char *quoted = quote_identifier(nspname);
		char	   *sql = psprintf(stmt->sql, quoted, quoted);
		SPIPlanPtr	plan = SPI_prepare(sql, stmt->nargs, stmt->argtypes);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for pklimit statement: %s",
				 SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		stmt->plan = plan;
	}
	return stmt->plan;
}

/* Run one statement with pklimit_in_system set; returns SPI's result code. */
static int
run(Oid nspid, StatementId id, Datum *values)
{
	SPIPlanPtr	plan = get_plan(nspid, id);
	int			rc;

	pklimit_in_system = true;
	PG_TRY();
	{
		if (statements[id].read_latest)
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

/* Column col of the single result row; none of them can be NULL. */
static Datum
get_col(int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								  col, &isnull);

	if (isnull)
		elog(ERROR, "pklimit: column %d of platformkit_limits is null", col);
	return d;
}

/* The start of the fixed window of length window_usec that holds now. */
static TimestampTz
window_start(TimestampTz now, int64 window_usec)
{
	TimestampTz since_epoch = now - PKLIMIT_UNIX_EPOCH;
	int64		into = since_epoch % window_usec;

	return now - (into < 0 ? into + window_usec : into);
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
	Datum		values[5];
	int			rc;

	memset(result, 0, sizeof(*result));
	values[0] = CStringGetTextDatum(stored_key);

	switch (kind)
	{
		case PKLIMIT_OP_HIT:
			{
				TimestampTz now = GetCurrentTimestamp();
				TimestampTz start = window_start(now, window_usec);

				values[1] = TimestampTzGetDatum(start);
				values[2] = TimestampTzGetDatum(start + window_usec);
				values[3] = Int64GetDatum(events);
				values[4] = TimestampTzGetDatum(now);
				rc = run(nspid, STMT_HIT, values);
				if (rc != SPI_OK_INSERT_RETURNING || SPI_processed != 1)
					elog(ERROR, "pklimit: recording an event returned %d", rc);
				result->found = true;
				result->count = DatumGetInt64(get_col(1));
				result->window_end = DatumGetTimestampTz(get_col(2));
				result->event_at = DatumGetTimestampTz(get_col(3));
				break;
			}
		case PKLIMIT_OP_COUNT:
			rc = run(nspid, STMT_COUNT, values);
			if (rc != SPI_OK_SELECT)
				elog(ERROR, "pklimit: reading a count returned %d", rc);
			if (SPI_processed == 1)
			{
				result->found = true;
				result->count = DatumGetInt64(get_col(1));
				result->window_end = DatumGetTimestampTz(get_col(2));
			}
			break;
		case PKLIMIT_OP_FORGET:
			rc = run(nspid, STMT_FORGET, values);
			if (rc != SPI_OK_DELETE)
				elog(ERROR, "pklimit: forgetting a key returned %d", rc);
			result->found = (SPI_processed > 0);
			break;
		case PKLIMIT_OP_PURGE:
			elog(ERROR, "pklimit: a purge is not a single operation");
			break;
	}
	SPI_freetuptable(SPI_tuptable);
}

/*
 * Delete at most limit rows whose window ended before cutoff, from *from on;
 * returns rows deleted and moves *from to the last window end deleted.
 */
int64
pklimit_store_purge(Oid nspid, TimestampTz cutoff, int64 limit,
					TimestampTz *from)
{
	Datum		values[3];
	int			rc;
	int64		deleted;
	bool		isnull;
	Datum		last;

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = Int64GetDatum(limit);
	values[2] = TimestampTzGetDatum(*from);
	rc = run(nspid, STMT_PURGE, values);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "pklimit: purge returned %d", rc);
	deleted = DatumGetInt64(get_col(1));
	last = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
						 &isnull);
	if (!isnull)
		*from = DatumGetTimestampTz(last);
	SPI_freetuptable(SPI_tuptable);
	return deleted;
}
