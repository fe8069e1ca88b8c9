/*-------------------------------------------------------------------------
 *
 * guards.c
 *		The guards of pklimit's tables and names, run from hooks.c: a GRANT
 *		that would get around the row level security of pklimit's tables of
 *		counts and leases, or let a role it applies to read their stored
 *		keys, is taken back (the grant guard; the policies' table has its
 *		own); to anyone but a table's owner, a statement that would lock it
 *		against pklimit's writes is refused (the lock guard); and no object in pklimit's schema may take one of pklimit's
 *		names (the planted-name guard).  Nothing here records events or
 *		touches the queue or the workers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/index.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_rewrite.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "rewrite/rewriteSupport.h"
#include "tcop/cmdtag.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "compat.h"
#include "guards.h"
#include "lease.h"

/*
 * The privileges nobody but the owner may hold on pklimit's table: they let
 * a role write it, lock it against pklimit's writes (LOCK TABLE in a strong
 * mode takes UPDATE, DELETE, TRUNCATE or MAINTAIN), or get around its row
 * level security.
 */
#define FORBIDDEN_PRIVILEGES \
	(ACL_INSERT | ACL_UPDATE | ACL_DELETE | ACL_TRUNCATE | ACL_REFERENCES | \
	 ACL_TRIGGER | PKLIMIT_ACL_MAINTAIN)
#define FORBIDDEN_PRIVILEGE_NAMES \
	"INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER" PKLIMIT_MAINTAIN_NAME

/*
 * SELECT shows no row to a role row level security applies to, but the
 * planner checks a query's key conditions in the index before the policy,
 * so EXPLAIN ANALYZE's filter counts would tell that role which keys are
 * stored: only roles that bypass row level security may hold it.
 */
#define READ_PRIVILEGES ACL_SELECT
#define READ_PRIVILEGE_NAMES "SELECT"

/*
 * The privileges nobody but the owner may hold on the policies' table: its
 * writes are pklimit_admin's, by row level security, but TRUNCATE gets
 * around it, a trigger would run in the statements of whoever changes a
 * policy, and a strong lock would hold up every session's reads of it.
 */
#define POLICY_FORBIDDEN_PRIVILEGES \
	(ACL_TRUNCATE | ACL_REFERENCES | ACL_TRIGGER | PKLIMIT_ACL_MAINTAIN)
#define POLICY_FORBIDDEN_PRIVILEGE_NAMES \
	"TRUNCATE, REFERENCES, TRIGGER" PKLIMIT_MAINTAIN_NAME

/* The schema of the installed pklimit extension, or InvalidOid. */
static Oid
extension_schema(Oid extoid)
{
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
	return nspid;
}

/* The schema of pklimit in the current database, or InvalidOid. */
Oid
pklimit_extension_namespace(void)
{
	return extension_schema(get_extension_oid("pklimit", true));
}

/*
 * pklimit's tables that only its statements write, as their row level
 * security says: the counts and the leases.
 */
static const char *const guarded_tables[] = {"platformkit_limits", PKLIMIT_LEASE_TABLE};

/* The OID of pklimit's table relname in the current database, or InvalidOid. */
static Oid
pklimit_table(const char *relname)
{
	Oid			nspid = extension_schema(get_extension_oid("pklimit", true));

	return OidIsValid(nspid) ? get_relname_relid(relname, nspid) : InvalidOid;
}

/* The roles that hold privileges they may not on pklimit's table. */
typedef struct Grantees
{
	List	   *writers;		/* hold one of FORBIDDEN_PRIVILEGES */
	List	   *readers;		/* hold SELECT, but obey row level security */
} Grantees;

/* Does row level security apply to a grantee (ACL_ID_PUBLIC: PUBLIC)? */
static bool
obeys_row_security(Oid grantee)
{
	return grantee == ACL_ID_PUBLIC || !has_bypassrls_privilege(grantee);
}

/*
 * The roles other than the owner that hold privileges they may not on the
 * table or one of its columns, added to *grantees (ACL_ID_PUBLIC for
 * PUBLIC).
 */
static void
add_forbidden_grantees(Datum aclDatum, Oid owner, AclMode forbidden,
					   Grantees *grantees)
{
	Acl		   *acl = DatumGetAclP(aclDatum);
	AclItem    *items = ACL_DAT(acl);

	for (int i = 0; i < ACL_NUM(acl); i++)
	{
		Oid			grantee = items[i].ai_grantee;
		AclMode		privs = ACLITEM_GET_PRIVS(items[i]);

		if (grantee == owner)
			continue;
		if (privs & forbidden)
			grantees->writers = list_append_unique_oid(grantees->writers,
													   grantee);
		if (forbidden == FORBIDDEN_PRIVILEGES &&
			(privs & READ_PRIVILEGES) && obeys_row_security(grantee))
			grantees->readers = list_append_unique_oid(grantees->readers,
													   grantee);
	}
}

static bool
forbidden_grantees(Oid relid, Oid *owner, AclMode forbidden,
				   Grantees *grantees)
{
	HeapTuple	tuple;
	Datum		aclDatum;
	bool		isnull;
	int			natts;

	grantees->writers = grantees->readers = NIL;
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		return false;
	*owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	natts = ((Form_pg_class) GETSTRUCT(tuple))->relnatts;
	aclDatum = SysCacheGetAttr(RELOID, tuple, Anum_pg_class_relacl, &isnull);
	if (!isnull)
		add_forbidden_grantees(aclDatum, *owner, forbidden, grantees);
	ReleaseSysCache(tuple);

	for (AttrNumber att = 1; att <= natts; att++)
	{
		tuple = SearchSysCache2(ATTNUM, ObjectIdGetDatum(relid),
								Int16GetDatum(att));
		if (!HeapTupleIsValid(tuple))
			continue;
		aclDatum = SysCacheGetAttr(ATTNUM, tuple, Anum_pg_attribute_attacl,
								   &isnull);
		if (!isnull)
			add_forbidden_grantees(aclDatum, *owner, forbidden, grantees);
		ReleaseSysCache(tuple);
	}
	return grantees->writers != NIL || grantees->readers != NIL;
}

/*
 * Revoke privileges on the table (and so on its columns) from the
 * grantees, as the table's owner, the grantor of every privilege on it.
 */
static void
revoke_privileges(Oid relid, Oid owner, const char *privileges,
				  List *grantees)
{
	StringInfoData sql;
	ListCell   *lc;
	Oid			save_userid;
	int			save_sec_context;

	if (grantees == NIL)
		return;
	initStringInfo(&sql);
	appendStringInfo(&sql, "REVOKE %s ON TABLE %s FROM ", privileges,
					 quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
												get_rel_name(relid)));
	foreach(lc, grantees)
	{
		Oid			grantee = lfirst_oid(lc);

		appendStringInfo(&sql, "%s%s", foreach_current_index(lc) > 0 ? ", " : "",
						 grantee == ACL_ID_PUBLIC ? "PUBLIC" :
						 quote_identifier(GetUserNameFromId(grantee, false)));
	}
	appendStringInfoString(&sql, " CASCADE");

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not revoke privileges on pklimit's table");
	SPI_finish();
	SetUserIdAndSecContext(save_userid, save_sec_context);
}

/*
 * After a GRANT on tables: the privileges that let a role other than the
 * owner write pklimit's table, lock it against pklimit's writes, or get
 * around its row level security (TRUNCATE empties it, a foreign key probes
 * it, a trigger runs inside pklimit's statements), and SELECT for a role
 * that obeys row level security (it would show no row, only which keys are
 * stored), are taken back, and the GRANT succeeds with a WARNING for every
 * other table and privilege.
 */
/* The same after a GRANT, for the policies' table (docs/policies.md). */
static void
guard_policy_grant(void)
{
	Oid			nspid = pklimit_extension_namespace();
	Oid			relid = OidIsValid(nspid) ?
	get_relname_relid("platformkit_limit_policies", nspid) : InvalidOid;
	Oid			owner = InvalidOid;
	Grantees	grantees;

	if (!OidIsValid(relid) ||
		!forbidden_grantees(relid, &owner, POLICY_FORBIDDEN_PRIVILEGES, &grantees))
		return;
	revoke_privileges(relid, owner, POLICY_FORBIDDEN_PRIVILEGE_NAMES,
					  grantees.writers);
	CommandCounterIncrement();
	if (forbidden_grantees(relid, &owner, POLICY_FORBIDDEN_PRIVILEGES, &grantees))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("privileges on pklimit's table \"platformkit_limit_policies\" cannot be granted"),
				 errdetail("Only the table's owner may hold %s on it.",
						   POLICY_FORBIDDEN_PRIVILEGE_NAMES)));
	ereport(WARNING,
			(errcode(ERRCODE_WARNING_PRIVILEGE_NOT_GRANTED),
			 errmsg("privileges on pklimit's table \"platformkit_limit_policies\" were left out of the GRANT"),
			 errdetail("Only the table's owner may hold %s on it: they would let another role empty it, lock it, or run code in the statements of whoever changes a policy.",
					   POLICY_FORBIDDEN_PRIVILEGE_NAMES),
			 errhint("Members of pklimit_admin change policies: grant that role instead.")));
}

static void
guard_table_grant(const char *relname)
{
	Oid			relid = pklimit_table(relname);
	Oid			owner = InvalidOid;
	Grantees	grantees;
	bool		writers;
	bool		readers;

	if (!OidIsValid(relid) ||
		!forbidden_grantees(relid, &owner, FORBIDDEN_PRIVILEGES, &grantees))
		return;
	writers = (grantees.writers != NIL);
	readers = (grantees.readers != NIL);
	revoke_privileges(relid, owner, FORBIDDEN_PRIVILEGE_NAMES, grantees.writers);
	revoke_privileges(relid, owner, READ_PRIVILEGE_NAMES, grantees.readers);
	CommandCounterIncrement();
	if (forbidden_grantees(relid, &owner, FORBIDDEN_PRIVILEGES, &grantees))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("privileges on pklimit's table \"%s\" cannot be granted",
						relname),
				 errdetail("Only the table's owner may hold %s on it, and SELECT only a role that bypasses row level security.",
						   FORBIDDEN_PRIVILEGE_NAMES)));
	ereport(WARNING,
			(errcode(ERRCODE_WARNING_PRIVILEGE_NOT_GRANTED),
			 errmsg("privileges on pklimit's table \"%s\" were left out of the GRANT",
					relname),
			 writers && readers ?
			 errdetail("Only the table's owner may hold %s on it: they would let another role write or lock the table, or get around its row level security. %s is left out for roles that row level security applies to: it would show them no row, but let them learn which keys are stored.",
					   FORBIDDEN_PRIVILEGE_NAMES, READ_PRIVILEGE_NAMES) :
			 writers ?
			 errdetail("Only the table's owner may hold %s on it: they would let another role write or lock the table, or get around its row level security.",
					   FORBIDDEN_PRIVILEGE_NAMES) :
			 errdetail("%s is left out for roles that row level security applies to: it would show them no row, but let them learn which keys are stored.",
					   READ_PRIVILEGE_NAMES),
			 errhint("Applications reach the table through pklimit's functions; a role that must read every row needs BYPASSRLS.")));
}

void
pklimit_guard_grant(void)
{
	guard_policy_grant();
	for (int i = 0; i < lengthof(guarded_tables); i++)
		guard_table_grant(guarded_tables[i]);
}

static Oid
table_owner(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}

/*
 * Does a lock on relid lock pklimit's table: is it the table, or a view that
 * reads it?  LOCK on a view locks the relations the view reads, checking the
 * view owner's privileges, which a member of pg_write_all_data or
 * pg_maintain has.
 */
static bool
locks_table(Oid relid, Oid table)
{
	HeapTuple	tuple;
	Oid			rule;
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key[2];
	bool		found = false;

	check_stack_depth();
	if (relid == table)
		return true;
	if (get_rel_relkind(relid) != RELKIND_VIEW)
		return false;
	tuple = SearchSysCache2(RULERELNAME, ObjectIdGetDatum(relid),
							CStringGetDatum(ViewSelectRuleName));
	if (!HeapTupleIsValid(tuple))
		return false;
	rule = ((Form_pg_rewrite) GETSTRUCT(tuple))->oid;
	ReleaseSysCache(tuple);

	/* the relations the view's query reads are what its rule depends on */
	rel = table_open(DependRelationId, AccessShareLock);
	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(RewriteRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(rule));
	scan = systable_beginscan(rel, DependDependerIndexId, true, NULL, 2, key);
	while (!found && HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tuple);

		found = (dep->refclassid == RelationRelationId &&
				 dep->refobjid != relid && locks_table(dep->refobjid, table));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/* The table a foreign key of a constraint or column references, if any. */
static List *
referenced(Node *node, List *names)
{
	ListCell   *lc;

	if (node != NULL && IsA(node, Constraint) &&
		((Constraint *) node)->contype == CONSTR_FOREIGN)
		return lappend(names, ((Constraint *) node)->pktable);
	if (node != NULL && IsA(node, ColumnDef))
		foreach(lc, ((ColumnDef *) node)->constraints)
			names = referenced(lfirst(lc), names);
	return names;
}

/*
 * The relations a statement locks before it checks the privileges needed on
 * them, in a mode that would hold up pklimit's writes: the relation of CREATE
 * RULE and CREATE TRIGGER, a parent or partition in CREATE [FOREIGN] TABLE
 * and ALTER TABLE, a table that a foreign key references, and what ALTER ... DEPENDS
 * ON EXTENSION names.  LOCK is checked apart, with views.
 */
static List *
locked_before_checked(Node *parsetree)
{
	List	   *names = NIL;
	ListCell   *lc;

	switch (nodeTag(parsetree))
	{
		case T_RuleStmt:
			return list_make1(((RuleStmt *) parsetree)->relation);
		case T_CreateTrigStmt:
			return list_make1(((CreateTrigStmt *) parsetree)->relation);
		case T_AlterObjectDependsStmt:
			if (((AlterObjectDependsStmt *) parsetree)->relation != NULL)
				names = list_make1(((AlterObjectDependsStmt *) parsetree)->relation);
			return names;
		case T_CreateStmt:
		case T_CreateForeignTableStmt:	/* a CreateStmt, and more */
			{
				CreateStmt *stmt = (CreateStmt *) parsetree;

				names = list_copy(stmt->inhRelations);
				foreach(lc, stmt->tableElts)
					names = referenced(lfirst(lc), names);
				foreach(lc, stmt->constraints)
					names = referenced(lfirst(lc), names);
				return names;
			}
		case T_AlterTableStmt:
			foreach(lc, ((AlterTableStmt *) parsetree)->cmds)
			{
				Node	   *def = lfirst_node(AlterTableCmd, lc)->def;

				if (def != NULL && IsA(def, PartitionCmd))
					names = lappend(names, ((PartitionCmd *) def)->name);
				else if (def != NULL && IsA(def, RangeVar))
					names = lappend(names, def);	/* [NO] INHERIT */
				else
					names = referenced(def, names);
			}
			return names;
		default:
			return NIL;
	}
}

/*
 * Only the owner of pklimit's table (or a superuser) may lock it or name it
 * where PostgreSQL takes its lock before checking privileges: a lock held in
 * an open transaction, or one merely waiting for its turn behind a reader,
 * holds up every pklimit call for as long as it lasts.
 */
static void
guard_table(Node *parsetree, const char *relname)
{
	Oid			table = pklimit_table(relname);
	ListCell   *lc;

	if (!OidIsValid(table) || has_privs_of_role(GetUserId(), table_owner(table)))
		return;
	if (IsA(parsetree, LockStmt))
	{
		foreach(lc, ((LockStmt *) parsetree)->relations)
		{
			Oid			relid = RangeVarGetRelid(lfirst_node(RangeVar, lc), NoLock, true);

			if (OidIsValid(relid) && locks_table(relid, table))
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("only the owner of pklimit's table \"%s\" can lock it",
								relname),
						 errdetail("A lock on the table would hold up every pklimit call for as long as it is held."),
						 relid != table ? errhint("Locking view \"%s\" locks the table.", get_rel_name(relid)) : 0));
		}
		return;
	}
	foreach(lc, locked_before_checked(parsetree))
	{
		Oid			relid = RangeVarGetRelid(lfirst_node(RangeVar, lc), NoLock, true);

		if (OidIsValid(relid) && get_rel_relkind(relid) == RELKIND_INDEX)
			relid = IndexGetRelation(relid, false);
		if (relid == table)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("only the owner of pklimit's table \"%s\" can name it in %s",
							relname, GetCommandTagName(CreateCommandTag(parsetree))),
					 errdetail("PostgreSQL locks the table before it checks privileges for this statement, and a lock waiting for its turn would hold up every pklimit call.")));
	}
}

void
pklimit_guard_table(Node *parsetree)
{
	for (int i = 0; i < lengthof(guarded_tables); i++)
		guard_table(parsetree, guarded_tables[i]);
}

/* Is this a GRANT on tables or columns? */
bool
pklimit_grants_on_tables(Node *parsetree)
{
	GrantStmt  *stmt = (GrantStmt *) parsetree;

	return IsA(parsetree, GrantStmt) && stmt->is_grant &&
		(stmt->objtype == OBJECT_TABLE || stmt->objtype == OBJECT_COLUMN);
}

/*
 * The name and schema of a catalog object just created or altered, or false
 * for an object of another kind or a relation's row type.  The current command's change is not
 * visible to the catalog snapshot yet, hence SnapshotSelf.
 */
static bool
object_name(Oid classId, Oid objectId, char *name, Oid *nspid)
{
	Oid			indexId;
	AttrNumber	oidcol;
	AttrNumber	namecol;
	AttrNumber	nspcol;
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;
	bool		found = false;

	if (classId == ProcedureRelationId)
	{
		indexId = ProcedureOidIndexId;
		oidcol = Anum_pg_proc_oid;
		namecol = Anum_pg_proc_proname;
		nspcol = Anum_pg_proc_pronamespace;
	}
	else if (classId == RelationRelationId)
	{
		indexId = ClassOidIndexId;
		oidcol = Anum_pg_class_oid;
		namecol = Anum_pg_class_relname;
		nspcol = Anum_pg_class_relnamespace;
	}
	else if (classId == TypeRelationId)
	{
		indexId = TypeOidIndexId;
		oidcol = Anum_pg_type_oid;
		namecol = Anum_pg_type_typname;
		nspcol = Anum_pg_type_typnamespace;
	}
	else
		return false;

	rel = table_open(classId, AccessShareLock);
	ScanKeyInit(&key, oidcol, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(objectId));
	scan = systable_beginscan(rel, indexId, true, SnapshotSelf, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;

		strlcpy(name, NameStr(*DatumGetName(heap_getattr(tuple, namecol,
														 RelationGetDescr(rel),
														 &isnull))),
				NAMEDATALEN);
		*nspid = DatumGetObjectId(heap_getattr(tuple, nspcol,
											   RelationGetDescr(rel), &isnull));
		/* a relation's row type is the relation's, checked with it */
		found = (classId != TypeRelationId ||
				 !OidIsValid(((Form_pg_type) GETSTRUCT(tuple))->typrelid));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/* The name of one of pklimit's member objects, or NULL. */
static char *
member_name(Oid classid, Oid objid)
{
	if (classid == ProcedureRelationId)
		return get_func_name(objid);
	if (classid == RelationRelationId)
		return get_rel_name(objid);
	if (classid == TypeRelationId)
	{
		HeapTuple	tuple = SearchSysCache1(TYPEOID, ObjectIdGetDatum(objid));
		Form_pg_type type;
		char	   *name = NULL;

		if (!HeapTupleIsValid(tuple))
			return NULL;
		type = (Form_pg_type) GETSTRUCT(tuple);
		/* a relation's row type (a member from PostgreSQL 17) is its own */
		if (!OidIsValid(type->typrelid))
			name = pstrdup(NameStr(type->typname));
		ReleaseSysCache(tuple);
		return name;
	}
	return NULL;
}

/*
 * Is name the name of one of pklimit's objects (its functions, table, view
 * or types) other than the object (classId, objectId) itself?
 */
static bool
is_pklimit_name(Oid extoid, const char *name, Oid classId, Oid objectId)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key[2];
	HeapTuple	tuple;
	bool		found = false;

	rel = table_open(DependRelationId, AccessShareLock);
	ScanKeyInit(&key[0], Anum_pg_depend_refclassid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(ExtensionRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_refobjid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(extoid));
	scan = systable_beginscan(rel, DependReferenceIndexId, true, NULL, 2, key);
	while (!found && HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tuple);
		char	   *other;

		if (dep->deptype != DEPENDENCY_EXTENSION ||
			(dep->classid == classId && dep->objid == objectId))
			continue;
		other = member_name(dep->classid, dep->objid);
		found = (other != NULL && strcmp(other, name) == 0);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * A function, relation or type created in pklimit's schema, or renamed or
 * moved there, may not take one of pklimit's names, whatever its arguments:
 * an overload planted there (pklimit_allow(text, integer, interval)) would
 * be a better match for a call than pklimit's own and answer in its place.
 * Only pklimit's own scripts, and pg_upgrade, create objects of those names.
 */
void
pklimit_guard_name(Oid classId, Oid objectId)
{
	Oid			extoid;
	Oid			nspid;
	char		name[NAMEDATALEN];

	if (IsBinaryUpgrade || !IsTransactionState() ||
		!OidIsValid(extoid = get_extension_oid("pklimit", true)) ||
		(creating_extension && CurrentExtensionObject == extoid) ||
		!object_name(classId, objectId, name, &nspid) ||
		nspid != extension_schema(extoid) ||
		!is_pklimit_name(extoid, name, classId, objectId))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_DUPLICATE_OBJECT),
			 errmsg("schema \"%s\" already has pklimit's objects named \"%s\"",
					get_namespace_name(nspid), name),
			 errdetail("An object of that name in pklimit's schema could take the place of pklimit's own in a call."),
			 errhint("Give it another name, or create it in another schema.")));
}
