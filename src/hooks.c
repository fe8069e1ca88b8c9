/*-------------------------------------------------------------------------
 *
 * hooks.c
 *		The ProcessUtility guards, installed at preload: statements that need
 *		a database to themselves make its worker leave first; DROP EXTENSION
 *		pklimit takes its pg_cron job with it; a GRANT that would get around
 *		the row level security of pklimit's table is refused.  Nothing here
 *		records events or touches the queue but to ask a worker to leave.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "compat.h"
#include "pklimit.h"

static ProcessUtility_hook_type prev_ProcessUtility = NULL;

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

/* Is this a GRANT on tables or columns? */
static bool
grants_on_tables(Node *parsetree)
{
	GrantStmt  *stmt = (GrantStmt *) parsetree;

	return IsA(parsetree, GrantStmt) && stmt->is_grant &&
		(stmt->objtype == OBJECT_TABLE || stmt->objtype == OBJECT_COLUMN);
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
	bool		granting = grants_on_tables(parsetree);
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
pklimit_install_hooks(void)
{
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = process_utility;
}
