/*-------------------------------------------------------------------------
 *
 * table.c
 *		pklimit's table as the worker and the purge find it: the extension's
 *		own platformkit_limits in the functions' schema (and its
 *		platformkit_leases, for leases), with no trigger or rule, its version, whether Citus has it (and then an owner that
 *		bypasses row level security), whether another transaction locks it
 *		whole, and the oldest end its purge index holds.  Reads the catalogs
 *		only; the statements on the table are store.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "compat.h"
#include "lease.h"
#include "store.h"

/*
 * Is relid a table of Citus's (distributed, reference or local in its
 * metadata)?  Known, for the counts' table [0] and the leases' [1], until
 * the relation changes (Citus invalidates it when it takes a table in or
 * lets it go).
 */
static Oid	citus_checked_relid[2] = {InvalidOid, InvalidOid};
static bool citus_checked_answer[2] = {false, false};

static void
relation_changed(Datum arg, Oid relid)
{
	for (int i = 0; i < 2; i++)
		if (relid == InvalidOid || relid == citus_checked_relid[i])
			citus_checked_relid[i] = InvalidOid;
}

/* Does Citus's metadata name relid?  In an SPI connection. */
static bool
in_citus_metadata(Oid relid)
{
	Oid			argtype = OIDOID;
	Datum		arg = ObjectIdGetDatum(relid);

	return OidIsValid(get_relname_relid("pg_dist_partition",
										PG_CATALOG_NAMESPACE)) &&
		SPI_execute_with_args("SELECT FROM pg_catalog.pg_dist_partition "
							  "WHERE logicalrelid OPERATOR(pg_catalog.=) $1",
							  1, &argtype, &arg, NULL, true, 1) ==
		SPI_OK_SELECT && SPI_processed > 0;
}

static bool
is_citus_table(Oid relid, bool on_citus, int slot)
{
	static bool callback_registered = false;

	if (!on_citus)
		return false;
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(relation_changed, (Datum) 0);
		callback_registered = true;
	}
	if (relid == citus_checked_relid[slot])
		return citus_checked_answer[slot];
	citus_checked_answer[slot] = in_citus_metadata(relid);
	citus_checked_relid[slot] = relid;
	return citus_checked_answer[slot];
}

/*
 * Table relname in schema nspid if it is the extension's own, else
 * InvalidOid: never a table of that name someone else created.  *checked
 * remembers the last one found to be.
 */
static Oid
own_table(Oid nspid, const char *relname, Oid *checked)
{
	Oid			relid = get_relname_relid(relname, nspid);

	if (!OidIsValid(relid) || relid == *checked)
		return relid;
	if (getExtensionOfObject(RelationRelationId, relid) !=
		get_extension_oid("pklimit", true))
		return InvalidOid;
	*checked = relid;
	return relid;
}

/*
 * A trigger or rule on one of pklimit's tables (a foreign key referencing
 * it makes triggers too) would run inside pklimit's statements, as the
 * owner and with the row level security predicate true: refused.  A
 * trigger on TRUNCATE only (Citus puts one on its tables) never fires in
 * them: pklimit does not truncate.  relhastriggers can stay set after the
 * last trigger is dropped, so the relation has the word.
 */
static bool
refuse_triggers(Oid relid, const char *relname, bool has_triggers,
				bool has_rules, bool raise)
{
	Relation	rel;

	if (!has_triggers && !has_rules)
		return true;
	rel = table_open(relid, AccessShareLock);
	has_triggers = false;
	for (int i = 0; rel->trigdesc && i < rel->trigdesc->numtriggers; i++)
		has_triggers |= (rel->trigdesc->triggers[i].tgtype &
						 (TRIGGER_TYPE_INSERT | TRIGGER_TYPE_DELETE |
						  TRIGGER_TYPE_UPDATE)) != 0;
	has_rules = (rel->rd_rules != NULL);
	table_close(rel, AccessShareLock);
	if ((has_triggers || has_rules) && !raise)
		return false;
	if (has_triggers || has_rules)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pklimit refuses to write table \"%s\" because it has %s",
						relname, has_triggers ? "triggers" : "rules"),
				 errdetail("Triggers, foreign keys referencing the table and rules would run with the table owner's privileges."),
				 errhint("Drop them; pklimit's table must have none.")));
	return true;
}

/*
 * The leases table (platformkit_leases) of table's schema, checked as
 * pklimit_table_open() checks platformkit_limits, for a statement on it,
 * and on Citus distributed too.  If there is none that is the extension's
 * own (a database at 0.3.0), or it fails a check: InvalidOid if missing_ok
 * (the purge, whose counts go on without it), else an error.
 */
Oid
pklimit_table_leases(const PklimitTable *table, bool missing_ok)
{
	static Oid	checked_relid = InvalidOid;
	Oid			relid = own_table(table->nspid, PKLIMIT_LEASE_TABLE,
								  &checked_relid);
	HeapTuple	tuple;
	bool		has_triggers;
	bool		has_rules;

	if (!OidIsValid(relid) && missing_ok)
		return InvalidOid;
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("pklimit table \"platformkit_leases\" does not exist"),
				 errdetail("The schema of pklimit's functions has no table platformkit_leases that belongs to the extension.")));
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	has_triggers = ((Form_pg_class) GETSTRUCT(tuple))->relhastriggers;
	has_rules = ((Form_pg_class) GETSTRUCT(tuple))->relhasrules;
	if (((Form_pg_class) GETSTRUCT(tuple))->relowner != table->owner &&
		missing_ok)
	{
		ReleaseSysCache(tuple);
		return InvalidOid;
	}
	if (((Form_pg_class) GETSTRUCT(tuple))->relowner != table->owner)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pklimit refuses to write table \"platformkit_leases\" owned by another role than \"platformkit_limits\""),
				 errhint("Give both tables to the same role with ALTER TABLE ... OWNER TO.")));
	ReleaseSysCache(tuple);
	if (!refuse_triggers(relid, PKLIMIT_LEASE_TABLE, has_triggers, has_rules,
						 !missing_ok))
		return InvalidOid;

	/*
	 * Kept on each node alone, a key's leases would be counted per node (the
	 * purge may still delete a node's expired ones).
	 */
	if (!missing_ok && table->citus && !is_citus_table(relid, true, 1))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pklimit's table \"platformkit_leases\" is not distributed like \"platformkit_limits\""),
				 errdetail("Each node would keep leases of its own, and a key could hold max_concurrent leases on every node."),
				 errhint("On the coordinator: SELECT create_distributed_table('platformkit_leases', 'key', colocate_with => 'platformkit_limits');")));
	return relid;
}

void
pklimit_table_open(Oid nspid, bool on_citus, PklimitTable *table)
{
	static Oid	checked_relid = InvalidOid;
	Oid			relid = own_table(nspid, "platformkit_limits", &checked_relid);
	HeapTuple	tuple;
	bool		has_triggers;
	bool		has_rules;

	/* only the extension's own table: its owner is the role we become */
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("pklimit table \"platformkit_limits\" does not exist"),
				 errdetail("The schema of pklimit's functions has no table platformkit_limits that belongs to the extension.")));
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	table->nspid = nspid;
	table->relid = relid;
	table->owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	has_triggers = ((Form_pg_class) GETSTRUCT(tuple))->relhastriggers;
	has_rules = ((Form_pg_class) GETSTRUCT(tuple))->relhasrules;
	ReleaseSysCache(tuple);
	table->version =
		(get_attnum(relid, "algorithm") != InvalidAttrNumber &&
		 get_attnum(relid, "expires_at") != InvalidAttrNumber) ? 3 :
		(get_attnum(relid, "blocked_until") != InvalidAttrNumber) ? 2 : 1;

	(void) refuse_triggers(relid, "platformkit_limits", has_triggers, has_rules,
						   true);

	/* Citus takes a table in under this lock, so the answer is current */
	if (on_citus)
		LockRelationOid(relid, RowExclusiveLock);

	/*
	 * On Citus the rows are read and written by other nodes' backends, as the
	 * owner, where the row level security policy's flag of pklimit's
	 * statements is not set: only an owner that bypasses row level security
	 * sees the rows there, and any other would count from nothing.
	 */
	table->citus = is_citus_table(relid, on_citus, 0);
	table->shards = NULL;
	table->direct = false;
	if (!table->citus)
		return;
	if (!superuser_arg(table->owner) && !has_bypassrls_privilege(table->owner))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pklimit refuses to write Citus table \"platformkit_limits\" owned by role \"%s\"",
						GetUserNameFromId(table->owner, false)),
				 errdetail("On Citus nodes pklimit's statements run as the table's owner under its row level security, which only a superuser or a role with BYPASSRLS passes."),
				 errhint("Make the owner a superuser or a role with BYPASSRLS that nothing else uses, or give the table to one with ALTER TABLE ... OWNER TO.")));
}

/*
 * Is platformkit_limits in schema nspid free to write, or does another
 * transaction hold a lock on the whole table?  Takes the table's
 * RowExclusiveLock, which pklimit's statements take anyway, if it is
 * granted at once; in a transaction.
 */
bool
pklimit_table_free(Oid nspid)
{
	Oid			relid = get_relname_relid("platformkit_limits", nspid);

	return !OidIsValid(relid) ||
		ConditionalLockRelationOid(relid, RowExclusiveLock);
}

/*
 * The purge's index of relid in schema nspid, if it is one: a btree of
 * relid on one ascending key (the install script's expression), InvalidOid
 * otherwise.
 */
static Oid
purge_index(Oid nspid, Oid relid)
{
	Oid			indexid = get_relname_relid("platformkit_limits_purge_idx", nspid);
	HeapTuple	tuple;
	Form_pg_index form;
	bool		isnull;
	bool		ok;

	if (!OidIsValid(indexid) ||
		!HeapTupleIsValid(tuple = SearchSysCache1(INDEXRELID,
												  ObjectIdGetDatum(indexid))))
		return InvalidOid;
	form = (Form_pg_index) GETSTRUCT(tuple);
	ok = form->indrelid == relid && form->indnkeyatts == 1 &&
		form->indisvalid &&
		heap_attisnull(tuple, Anum_pg_index_indpred, NULL);
	if (ok)
	{
		int2vector *options = (int2vector *)
		DatumGetPointer(SysCacheGetAttr(INDEXRELID, tuple,
										Anum_pg_index_indoption, &isnull));

		ok = !isnull && (options->values[0] & INDOPTION_DESC) == 0;
	}
	ReleaseSysCache(tuple);
	if (ok && HeapTupleIsValid(tuple = SearchSysCache1(RELOID,
													   ObjectIdGetDatum(indexid))))
	{
		ok = ((Form_pg_class) GETSTRUCT(tuple))->relam == BTREE_AM_OID;
		ReleaseSysCache(tuple);
	}
	return ok ? indexid : InvalidOid;
}

/*
 * When the row of pklimit's table of schema nspid that stopped counting
 * first did so (the end of its window, of its block or of its sliding
 * window's weight, whichever is latest), read in
 * the caller's backend from the first entry of the purge's index, without a
 * statement and so without row level security, for monitoring (purge.c).
 * *found is false for an empty table.  Returns false if it cannot be known
 * here without waiting: the table or its index is missing or locked against
 * reads, or its rows are on Citus's nodes.
 */
bool
pklimit_table_oldest_end(Oid nspid, TimestampTz *oldest, bool *found)
{
	static Oid	checked_relid = InvalidOid;
	Oid			relid = own_table(nspid, "platformkit_limits", &checked_relid);
	Oid			indexid;
	bool		on_citus;
	Relation	rel;
	Relation	index;
	Snapshot	snapshot;
	IndexScanDesc scan;
	TupleTableSlot *slot;

	*found = false;
	if (!OidIsValid(relid) ||
		!OidIsValid(indexid = purge_index(nspid, relid)) ||
		!ConditionalLockRelationOid(relid, AccessShareLock) ||
		!ConditionalLockRelationOid(indexid, AccessShareLock))
		return false;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	on_citus = in_citus_metadata(relid);
	SPI_finish();
	if (on_citus)
		return false;

	rel = table_open(relid, NoLock);
	index = index_open(indexid, NoLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	scan = pklimit_index_beginscan(rel, index, snapshot, 0, 0);
	index_rescan(scan, NULL, 0, NULL, 0);
	slot = table_slot_create(rel, NULL);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		static const char *const ends[] = {"window_end", "blocked_until",
		"expires_at"};

		*found = true;
		*oldest = DT_NOBEGIN;
		for (int i = 0; i < lengthof(ends); i++)
		{
			AttrNumber	attnum = get_attnum(relid, ends[i]);
			bool		isnull = true;
			Datum		end = attnum == InvalidAttrNumber ? (Datum) 0 :
			slot_getattr(slot, attnum, &isnull);

			if (!isnull)
				*oldest = Max(*oldest, DatumGetTimestampTz(end));
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	UnregisterSnapshot(snapshot);
	index_close(index, NoLock);
	table_close(rel, NoLock);
	return true;
}
