/*-------------------------------------------------------------------------
 *
 * pklimit.c
 *		Module entry points: settings, hooks, argument checking and the
 *		SQL-callable functions.  Each recording function turns its arguments
 *		into one request on a stored key and hands it to this database's
 *		pklimit worker (queue.c, worker.c); what to answer when the worker
 *		cannot be reached is decided here, by pklimit.on_unavailable.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xlog.h"
#include "catalog/indexing.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "common/int.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "pklimit.h"

PG_MODULE_MAGIC;

/* Longest window accepted: far beyond any rate limit, far inside timestamptz. */
#define PKLIMIT_MAX_WINDOW_USEC (INT64CONST(10000) * 365 * USECS_PER_DAY)

typedef enum OnUnavailable
{
	ON_UNAVAILABLE_ALLOW,
	ON_UNAVAILABLE_DENY,
	ON_UNAVAILABLE_ERROR
} OnUnavailable;

static const struct config_enum_entry on_unavailable_options[] = {
	{"allow", ON_UNAVAILABLE_ALLOW, false},
	{"deny", ON_UNAVAILABLE_DENY, false},
	{"error", ON_UNAVAILABLE_ERROR, false},
	{NULL, 0, false}
};

int			pklimit_default_max = 10;
int			pklimit_default_window = 15 * 60;	/* seconds */
int			pklimit_timeout = 2000; /* milliseconds */
int			pklimit_queue_size = 1024;
int			pklimit_max_workers = 8;
int			pklimit_worker_idle_timeout = 60;	/* seconds */
static int	pklimit_on_unavailable = ON_UNAVAILABLE_ALLOW;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static ProcessUtility_hook_type prev_ProcessUtility = NULL;

void		_PG_init(void);

/*
 * The wait event of each PklimitWait, as pg_stat_activity names it: on
 * PostgreSQL 17 and later a name of pklimit's own, registered by the first
 * wait of each kind in each process; before, "Extension".
 */
uint32
pklimit_wait_event(PklimitWait wait)
{
#ifdef PKLIMIT_NAMED_WAIT_EVENTS
	static const char *const names[] = {
		[PKLIMIT_WAIT_ANSWER] = "PklimitAnswer",
		[PKLIMIT_WAIT_IDLE] = "PklimitWorkerIdle",
		[PKLIMIT_WAIT_RETRY] = "PklimitWorkerRetry",
	};
	static uint32 events[lengthof(names)];

	if (events[wait] == 0)
		events[wait] = WaitEventExtensionNew(names[wait]);
	return events[wait];
#else
	return PG_WAIT_EXTENSION;
#endif
}

static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	pklimit_shmem_request();
}

static void
shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	pklimit_shmem_startup();
}

/* Does this statement drop the installed pklimit extension? */
static bool
drops_pklimit(Node *parsetree)
{
	DropStmt   *stmt = (DropStmt *) parsetree;
	ListCell   *lc;

	if (!IsA(parsetree, DropStmt) || stmt->removeType != OBJECT_EXTENSION ||
		!OidIsValid(get_extension_oid("pklimit", true)))
		return false;
	foreach(lc, stmt->objects)
	{
		if (strcmp(strVal(lfirst(lc)), "pklimit") == 0)
			return true;
	}
	return false;
}

/*
 * Remove the pg_cron job that CREATE EXTENSION scheduled, in the same
 * transaction as DROP EXTENSION, so no job is left calling a dropped
 * function.  Only pg_cron's own functions are called.
 */
static void
unschedule_purge(void)
{
	if (!OidIsValid(get_extension_oid("pg_cron", true)))
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT cron.unschedule(j.jobid) FROM cron.job j"
					" WHERE j.jobname OPERATOR(pg_catalog.=) 'pklimit-purge'"
					" AND j.database OPERATOR(pg_catalog.=) pg_catalog.current_database()",
					false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not unschedule the pklimit purge");
	SPI_finish();
}

/* The OID of pklimit's table in the current database, or InvalidOid. */
static Oid
pklimit_table(void)
{
	Oid			extoid = get_extension_oid("pklimit", true);
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;
	Oid			nspid = InvalidOid;

	if (!OidIsValid(extoid))
		return InvalidOid;
	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extoid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		nspid = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return OidIsValid(nspid) ? get_relname_relid("platformkit_limits", nspid) :
		InvalidOid;
}

/* Does this ACL give TRUNCATE, REFERENCES or TRIGGER to anyone but owner? */
static bool
acl_gives_forbidden(Datum aclDatum, Oid owner)
{
	Acl		   *acl = DatumGetAclP(aclDatum);
	AclItem    *items = ACL_DAT(acl);

	for (int i = 0; i < ACL_NUM(acl); i++)
		if (items[i].ai_grantee != owner &&
			(ACLITEM_GET_PRIVS(items[i]) &
			 (ACL_TRUNCATE | ACL_REFERENCES | ACL_TRIGGER)))
			return true;
	return false;
}

/*
 * Does anyone but the owner hold TRUNCATE, REFERENCES or TRIGGER on
 * pklimit's table, on the table or on one of its columns?  These get around
 * its row level security: TRUNCATE empties it, a foreign key probes it, a
 * trigger runs inside pklimit's statements.
 */
static bool
table_has_forbidden_grants(void)
{
	Oid			relid = pklimit_table();
	HeapTuple	tuple;
	Datum		aclDatum;
	bool		isnull;
	Oid			owner;
	int			natts;
	bool		found = false;

	if (!OidIsValid(relid))
		return false;
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		return false;
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	natts = ((Form_pg_class) GETSTRUCT(tuple))->relnatts;
	aclDatum = SysCacheGetAttr(RELOID, tuple, Anum_pg_class_relacl, &isnull);
	found = !isnull && acl_gives_forbidden(aclDatum, owner);
	ReleaseSysCache(tuple);

	for (AttrNumber att = 1; att <= natts && !found; att++)
	{
		tuple = SearchSysCache2(ATTNUM, ObjectIdGetDatum(relid),
								Int16GetDatum(att));
		if (!HeapTupleIsValid(tuple))
			continue;
		aclDatum = SysCacheGetAttr(ATTNUM, tuple, Anum_pg_attribute_attacl,
								   &isnull);
		found = !isnull && acl_gives_forbidden(aclDatum, owner);
		ReleaseSysCache(tuple);
	}
	return found;
}

/*
 * Statements that need a database to themselves (DROP DATABASE, CREATE
 * DATABASE from it as a template, renaming it, moving it) would fail while
 * its worker is connected, so the worker is asked to leave first, but only
 * for a role that owns the database: nobody else may stop its limiter.
 */
static void
release_database(Node *parsetree)
{
	const char *dbname = NULL;
	Oid			dboid;

	if (IsA(parsetree, DropdbStmt))
		dbname = ((DropdbStmt *) parsetree)->dbname;
	else if (IsA(parsetree, RenameStmt) &&
			 ((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
		dbname = ((RenameStmt *) parsetree)->subname;
	else if (IsA(parsetree, AlterDatabaseStmt))
		dbname = ((AlterDatabaseStmt *) parsetree)->dbname;
	else if (IsA(parsetree, CreatedbStmt))
	{
		ListCell   *lc;

		foreach(lc, ((CreatedbStmt *) parsetree)->options)
		{
			DefElem    *opt = lfirst_node(DefElem, lc);

			if (strcmp(opt->defname, "template") == 0 && opt->arg != NULL)
				dbname = defGetString(opt);
		}
	}
	if (dbname == NULL)
		return;
	dboid = get_database_oid(dbname, true);
	if (OidIsValid(dboid) && dboid != MyDatabaseId &&
		pklimit_database_owner(dboid, GetUserId()))
		pklimit_terminate_workers(dboid);
}

/*
 * Before statements that need a database to themselves, its worker leaves.
 * DROP EXTENSION pklimit: its pg_cron job goes with it.
 */
static void
process_utility(PlannedStmt *pstmt, const char *queryString,
				bool readOnlyTree, ProcessUtilityContext context,
				ParamListInfo params, QueryEnvironment *queryEnv,
				DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	bool		dropping_pklimit = drops_pklimit(parsetree);
	bool		granting = IsA(parsetree, GrantStmt) &&
		((GrantStmt *) parsetree)->is_grant &&
		(((GrantStmt *) parsetree)->objtype == OBJECT_TABLE ||
		 ((GrantStmt *) parsetree)->objtype == OBJECT_COLUMN);
	bool		forbidden_before = granting && table_has_forbidden_grants();

	release_database(parsetree);
	if (prev_ProcessUtility)
		prev_ProcessUtility(pstmt, queryString, readOnlyTree, context,
							params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
	if (dropping_pklimit)
		unschedule_purge();
	/* only a GRANT that gave them now is refused, whatever it targeted */
	if (granting && !forbidden_before && table_has_forbidden_grants())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("TRUNCATE, REFERENCES and TRIGGER cannot be granted on pklimit's table \"platformkit_limits\""),
				 errdetail("They would get around its row level security."),
				 errhint("Grant only SELECT, INSERT, UPDATE or DELETE, or nothing: applications reach the table through pklimit's functions.")));
}

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
	DefineCustomIntVariable("pklimit.timeout",
							"The longest a pklimit call waits for its store.",
							NULL,
							&pklimit_timeout,
							2000, 1, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomEnumVariable("pklimit.on_unavailable",
							 "What a pklimit call answers when its store cannot be reached.",
							 "allow: allow the event, with a warning; deny: refuse it, with a warning; error: raise an error.",
							 &pklimit_on_unavailable,
							 ON_UNAVAILABLE_ALLOW, on_unavailable_options,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("pklimit.worker_idle_timeout",
							"A pklimit worker with no work for this long exits.",
							"0 keeps workers running, so a worker slot taken meanwhile cannot leave a database without one.",
							&pklimit_worker_idle_timeout,
							60, 0, INT_MAX / 1000,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	/* without preload there is no queue: CREATE EXTENSION still works */
	if (!process_shared_preload_libraries_in_progress)
	{
		MarkGUCPrefixReserved("pklimit");
		return;
	}

	DefineCustomIntVariable("pklimit.queue_size",
							"Requests that can wait for pklimit workers at once, across all databases.",
							NULL,
							&pklimit_queue_size,
							1024, 16, 65536,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("pklimit.max_workers",
							"pklimit workers that can run at once: one per database in use.",
							"Each also takes a max_worker_processes slot while it runs.",
							&pklimit_max_workers,
							8, 1, 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	MarkGUCPrefixReserved("pklimit");

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = process_utility;
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
	if (!pklimit_interval_is_finite(window))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window must be finite"),
				 errhint("Give the window in days, hours, minutes or seconds, for example '15 minutes'.")));
	if (window->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window must not contain months or years"),
				 errdetail("Months and years have no fixed length."),
				 errhint("Give the window in days, hours, minutes or seconds, for example '30 days'.")));
	if (pg_mul_s64_overflow((int64) window->day, USECS_PER_DAY, &usec) ||
		pg_add_s64_overflow(usec, window->time, &usec))
		usec = (window->day < 0) ? -1 : PKLIMIT_MAX_WINDOW_USEC + 1;
	if (usec > PKLIMIT_MAX_WINDOW_USEC)
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

static void
check_preloaded(void)
{
	if (!pklimit_preloaded())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pklimit is not loaded"),
				 errdetail("pklimit records events through background workers, which need shared memory set up at server start."),
				 errhint("Add pklimit to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/*
 * Hand one operation to this database's worker and wait for the answer,
 * within pklimit.timeout.
 */
static void
run_operation(FunctionCallInfo fcinfo, PklimitOpKind kind,
			  const char *stored_key, int64 window_usec, PklimitAnswer *answer)
{
	PklimitRequest request;

	check_preloaded();
	memset(answer, 0, sizeof(*answer));
	if (RecoveryInProgress())
	{
		answer->status = PKLIMIT_READ_ONLY;
		return;
	}

	memset(&request, 0, sizeof(request));
	request.kind = kind;
	request.dboid = MyDatabaseId;
	request.nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	request.window_usec = window_usec;
	request.deadline = GetCurrentTimestamp() +
		(TimestampTz) pklimit_timeout * 1000;
	strlcpy(request.key, stored_key, sizeof(request.key));

	pklimit_submit(&request, answer);
}

static const char *
status_name(PklimitStatus status)
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

/* What the call that found the store unavailable does about it. */
typedef enum UnavailableCall
{
	CALL_DECIDES,				/* allow, check: answer as on_unavailable says */
	CALL_READS,					/* count, forget: return NULL */
	CALL_PURGES					/* purge: always an error */
} UnavailableCall;

/*
 * The store could not be reached: raise an error or warn, as
 * pklimit.on_unavailable says.  Returns the answer to give instead: true
 * (allow) or false (deny).
 */
static bool
unavailable(const PklimitAnswer *answer, UnavailableCall call)
{
	bool		force_error = (call == CALL_PURGES);
	const char *outcome;

	int			sqlstate;
	char	   *detail;

	switch (answer->status)
	{
		case PKLIMIT_TIMEOUT:
			sqlstate = ERRCODE_QUERY_CANCELED;
			detail = psprintf("No answer came within pklimit.timeout (%d ms).",
							  pklimit_timeout);
			break;
		case PKLIMIT_QUEUE_FULL:
			sqlstate = ERRCODE_INSUFFICIENT_RESOURCES;
			detail = psprintf("All %d slots of the request queue are in use (pklimit.queue_size).",
							  pklimit_queue_size);
			break;
		case PKLIMIT_NO_WORKER:
			sqlstate = ERRCODE_INSUFFICIENT_RESOURCES;
			detail = pstrdup("No pklimit worker could be started for this database; see max_worker_processes and pklimit.max_workers.");
			break;
		case PKLIMIT_READ_ONLY:
			sqlstate = ERRCODE_READ_ONLY_SQL_TRANSACTION;
			detail = pstrdup("The server is a hot standby or refused the write as read-only; pklimit records events on the primary.");
			break;
		case PKLIMIT_LOCK_TIMEOUT:
			sqlstate = ERRCODE_LOCK_NOT_AVAILABLE;
			if (call == CALL_PURGES)
				detail = pstrdup("A row the purge had to delete, or the table, stayed locked by another transaction for 5 seconds.");
			else
				detail = pstrdup("The key's row, or the table, stayed locked by a transaction, possibly the caller's own, for the whole of pklimit.timeout.");
			break;
		case PKLIMIT_NO_TABLE:
			sqlstate = ERRCODE_UNDEFINED_TABLE;
			detail = pstrdup("The table platformkit_limits does not exist.");
			break;
		default:
			sqlstate = answer->sqlstate ? answer->sqlstate : ERRCODE_INTERNAL_ERROR;
			detail = psprintf("The pklimit worker failed: %s.", answer->message);
			break;
	}

	/* a purge reports its own failure as the error it was */
	if (force_error && answer->status == PKLIMIT_STORE_ERROR)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg_internal("%s", answer->message),
				 errcontext("pklimit purge")));

	if (force_error || pklimit_on_unavailable == ON_UNAVAILABLE_ERROR)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("pklimit store unavailable: %s", status_name(answer->status)),
				 errdetail_internal("%s", detail)));
	if (call == CALL_READS)
		outcome = "The call returned NULL.";
	else if (pklimit_on_unavailable == ON_UNAVAILABLE_ALLOW)
		outcome = "The call was allowed, as pklimit.on_unavailable says.";
	else
		outcome = "The call was denied, as pklimit.on_unavailable says.";
	ereport(WARNING,
			(errcode(sqlstate),
			 errmsg("pklimit store unavailable: %s", status_name(answer->status)),
			 errdetail_internal("%s", detail),
			 errhint("%s", outcome)));
	return pklimit_on_unavailable == ON_UNAVAILABLE_ALLOW;
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
	run_operation(fcinfo, PKLIMIT_OP_HIT, stored_key, window_usec, answer);
	if (answer->status != PKLIMIT_OK)
		return unavailable(answer, CALL_DECIDES);
	return answer->result.count <= max_count;
}

PG_FUNCTION_INFO_V1(pklimit_allow_default);
Datum
pklimit_allow_default(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	PklimitAnswer answer;

	PG_RETURN_BOOL(hit(fcinfo, stored_key, pklimit_default_max,
					   (int64) pklimit_default_window * USECS_PER_SEC,
					   &answer));
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
	values[5] = CStringGetTextDatum(status_name(answer.status));
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

/* The count of the key's open window; NULL if the store was not reached. */
PG_FUNCTION_INFO_V1(pklimit_count);
Datum
pklimit_count(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	PklimitAnswer answer;

	run_operation(fcinfo, PKLIMIT_OP_COUNT, stored_key, 0, &answer);
	if (answer.status != PKLIMIT_OK)
	{
		(void) unavailable(&answer, CALL_READS);
		PG_RETURN_NULL();
	}
	PG_RETURN_INT64(answer.result.found ? answer.result.count : 0);
}

/* Delete the key's row; NULL if the store was not reached. */
PG_FUNCTION_INFO_V1(pklimit_forget);
Datum
pklimit_forget(PG_FUNCTION_ARGS)
{
	char	   *stored_key = stored_key_arg(fcinfo);
	PklimitAnswer answer;

	run_operation(fcinfo, PKLIMIT_OP_FORGET, stored_key, 0, &answer);
	if (answer.status != PKLIMIT_OK)
	{
		(void) unavailable(&answer, CALL_READS);
		PG_RETURN_NULL();
	}
	PG_RETURN_BOOL(answer.result.found);
}

/*
 * Delete rows whose window closed more than retention ago, in batches that
 * the worker commits one by one.  The caller waits pklimit.timeout for a
 * worker to take it, then until the purge is done (statement_timeout and
 * cancel apply).  The batches run
 * as the caller, so its privileges on the table decide; EXECUTE is not
 * granted to PUBLIC.
 */
PG_FUNCTION_INFO_V1(pklimit_purge);
Datum
pklimit_purge(PG_FUNCTION_ARGS)
{
	Interval   *retention;
	Interval	zero = {0};
	TimestampTz now = GetCurrentTimestamp();
	PklimitRequest request;
	PklimitAnswer answer;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("retention must not be null")));
	retention = PG_GETARG_INTERVAL_P(0);

	memset(&request, 0, sizeof(request));
	request.kind = PKLIMIT_OP_PURGE;
	if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(retention),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retention must not be negative")));
	/* its longest span (31-day months) reaching past the earliest timestamp */
	if ((double) retention->month * 31 * USECS_PER_DAY +
		(double) retention->day * USECS_PER_DAY + (double) retention->time >
		(double) (now - MIN_TIMESTAMP) - USECS_PER_DAY)
		request.cutoff = DT_NOBEGIN;	/* older than any window: none */
	else
		request.cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
																 TimestampTzGetDatum(now),
																 IntervalPGetDatum(retention)));
	if (request.cutoff > now)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retention must not be negative")));

	check_preloaded();
	memset(&answer, 0, sizeof(answer));
	if (RecoveryInProgress())
		answer.status = PKLIMIT_READ_ONLY;
	else
	{
		request.dboid = MyDatabaseId;
		request.nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
		request.userid = GetUserId();
		request.deadline = now + (TimestampTz) pklimit_timeout * 1000;
		pklimit_submit(&request, &answer);
	}
	if (answer.status != PKLIMIT_OK)
		(void) unavailable(&answer, CALL_PURGES);
	if (!answer.result.found)
	{
		ereport(NOTICE,
				(errmsg("a purge of this database is already running"),
				 errdetail("This call deleted nothing.")));
		PG_RETURN_INT64(0);
	}
	PG_RETURN_INT64(answer.result.count);
}

/* The last purge of the current database since the server started. */
PG_FUNCTION_INFO_V1(pklimit_purge_status);
Datum
pklimit_purge_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	PklimitPurgeStatus status;
	Datum		values[6];
	bool		nulls[6] = {0};

	check_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	if (pklimit_status_of_purge(MyDatabaseId, &status))
	{
		values[0] = BoolGetDatum(status.running);
		values[1] = TimestampTzGetDatum(status.started_at);
		values[2] = TimestampTzGetDatum(status.finished_at);
		nulls[2] = status.running;
		values[3] = TimestampTzGetDatum(status.cutoff);
		values[4] = Int64GetDatum(status.deleted);
		values[5] = BoolGetDatum(status.failed);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* The row level security predicate: true only inside pklimit's statements. */
PG_FUNCTION_INFO_V1(platformkit_is_system);
Datum
platformkit_is_system(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(pklimit_in_system);
}
