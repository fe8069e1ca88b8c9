/*-------------------------------------------------------------------------
 *
 * hooks.c
 *		The hooks pklimit installs at preload, and what they do in the life
 *		of a database and of the extension: statements that need a database
 *		to themselves make its worker leave first; DROP EXTENSION pklimit
 *		takes its pg_cron job and, once committed, its keys in memory with
 *		it; DROP DATABASE its statistics and keys in memory.  They
 *		run the guards of pklimit's table and names (guards.c).  Nothing here
 *		records events or touches the queue but to ask a worker to leave.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "commands/tablespace.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"

#include "compat.h"
#include "guards.h"
#include "hooks.h"
#include "memory.h"
#include "policy.h"
#include "registry.h"
#include "stats.h"

static ProcessUtility_hook_type prev_ProcessUtility = NULL;
static object_access_hook_type prev_object_access = NULL;

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
	{
		ListCell   *lc;

		/* only a move to a tablespace that exists needs it */
		foreach(lc, ((AlterDatabaseStmt *) parsetree)->options)
		{
			DefElem    *opt = lfirst_node(DefElem, lc);

			if (strcmp(opt->defname, "tablespace") == 0 &&
				OidIsValid(get_tablespace_oid(defGetString(opt), true)))
				dbname = ((AlterDatabaseStmt *) parsetree)->dbname;
		}
	}
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
 * The (sub)transaction of this transaction that dropped pklimit, if any:
 * its keys in memory go when the transaction commits, and stay if that
 * subtransaction (or one around it) rolls back.
 */
static SubTransactionId dropped_in = InvalidSubTransactionId;
static bool callbacks_registered = false;

static void
drop_at_commit(XactEvent event, void *arg)
{
	if (dropped_in == InvalidSubTransactionId)
		return;

	/*
	 * A prepared drop (Citus runs its DDL on the other nodes so) is taken as
	 * committed: its COMMIT PREPARED may come from any session.  Should it be
	 * rolled back instead, the keys in memory are lost, not miscounted.
	 */
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PREPARE)
		pklimit_memory_drop_extension();
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		dropped_in = InvalidSubTransactionId;
}

static void
drop_in_subtransaction(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	if (dropped_in != mySubid)
		return;
	if (event == SUBXACT_EVENT_COMMIT_SUB)
		dropped_in = parentSubid;
	else if (event == SUBXACT_EVENT_ABORT_SUB)
		dropped_in = InvalidSubTransactionId;
}

/*
 * What is created or altered is checked, not its parts (columns).  pklimit
 * dropped, however (DROP EXTENSION, DROP SCHEMA ... CASCADE): its keys in
 * memory are of a table that is gone once that commits.
 */
static void
object_access(ObjectAccessType access, Oid classId, Oid objectId, int subId,
			  void *arg)
{
	if (prev_object_access)
		prev_object_access(access, classId, objectId, subId, arg);
	if ((access == OAT_POST_CREATE || access == OAT_POST_ALTER) && subId == 0)
		pklimit_guard_name(classId, objectId);
	if (access == OAT_DROP && classId == ExtensionRelationId &&
		objectId == get_extension_oid("pklimit", true))
	{
		if (!callbacks_registered)
		{
			RegisterXactCallback(drop_at_commit, NULL);
			RegisterSubXactCallback(drop_in_subtransaction, NULL);
			callbacks_registered = true;
		}
		if (dropped_in == InvalidSubTransactionId)
			dropped_in = GetCurrentSubTransactionId();
	}
}

/*
 * Before statements that need a database to themselves, its worker leaves.
 * DROP EXTENSION pklimit: its pg_cron job goes with it.  DROP DATABASE: its
 * statistics go with it.
 */
static void
process_utility(PlannedStmt *pstmt, const char *queryString,
				bool readOnlyTree, ProcessUtilityContext context,
				ParamListInfo params, QueryEnvironment *queryEnv,
				DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	bool		dropping_pklimit = drops_pklimit(parsetree);
	bool		granting = pklimit_grants_on_tables(parsetree);
	Oid			dropped_database = InvalidOid;

	if (IsA(parsetree, DropdbStmt))
		dropped_database = get_database_oid(((DropdbStmt *) parsetree)->dbname,
											true);

	/*
	 * The guards read the catalogs: not for a transaction's own statements (a
	 * ROLLBACK of a failed transaction runs with no transaction to read them
	 * in, and would find the rows it created half gone)
	 */
	if (!IsA(parsetree, TransactionStmt) && IsTransactionState())
	{
		pklimit_guard_table(parsetree);
		release_database(parsetree);
	}
	if (prev_ProcessUtility)
		prev_ProcessUtility(pstmt, queryString, readOnlyTree, context,
							params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
	if (dropping_pklimit)
		pklimit_cron_unschedule();
	if (OidIsValid(dropped_database))
	{
		pklimit_stats_forget_database(dropped_database);
		pklimit_policy_forget_database(dropped_database);
		pklimit_memory_forget_database(dropped_database);
	}
	if (granting)
		pklimit_guard_grant();
}

void
pklimit_install_hooks(void)
{
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = process_utility;
	prev_object_access = object_access_hook;
	object_access_hook = object_access;
}
