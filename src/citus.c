/*-------------------------------------------------------------------------
 *
 * citus.c
 *		Citus's shard map of platformkit_limits as pklimit reads it: which
 *		shard holds a stored key (Citus's hash of the distribution column),
 *		which shards are on this node, and the lock that keeps a local
 *		shard here for the rest of a transaction, so that the worker can
 *		write it directly (store.c) with no remote statement and no
 *		two-phase commit.  Also pklimit_node(), which names the node that
 *		holds a caller's key.  Reads Citus's metadata through SPI; never
 *		links against Citus.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "api.h"
#include "policy.h"
#include "compat.h"
#include "store.h"

/* Citus's shard metadata lock, taken as its own writers take it. */
#define SHARD_METADATA_SHARE_LOCK 5

/*
 * The shards of the one table whose map is kept, by their hash ranges in
 * ascending order (Citus's ranges cover every hash without overlap).
 */
static PklimitShardMap map = {InvalidOid};

/* The statement that takes Citus's lock on shards, kept once prepared. */
static SPIPlanPtr lock_plan = NULL;

/* Changes of the map seen: each invalidation and each read. */
static uint64 map_generation = 0;

static void
map_changed(Datum arg, Oid relid)
{
	/* Citus invalidates the table's relcache when its shards change */
	if (relid == InvalidOid || relid == map.relid)
	{
		map.stale = true;
		map_generation++;
	}
}

/*
 * A number that changes whenever the shard map may have: a flush that saw
 * it change looks at every key in memory, changed or not (flush.c).
 */
uint64
pklimit_shards_generation(void)
{
	return map_generation;
}

/* a renamed schema renames the shards too */
static void
schema_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	map.stale = true;
	map_generation++;
}

/*
 * Read the map of relid from Citus's metadata, in an SPI connection: none
 * (nshards 0) unless Citus distributes it by hash of its key column.  Read
 * with a snapshot of its own (not read-only), so that a map read again
 * after waiting for a shard's lock sees the move that held it.
 */
static void
load_map(Oid relid)
{
	static bool callback_registered = false;
	Oid			argtype = OIDOID;
	Datum		arg = ObjectIdGetDatum(relid);
	MemoryContext old;
	uint64		before;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(map_changed, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, schema_changed, (Datum) 0);
		callback_registered = true;
	}
	if (map.shards)
		pfree(map.shards);
	map.shards = NULL;
	map.nshards = 0;
	map.relid = relid;
	map.stale = true;			/* until read whole */
	before = ++map_generation;

	if (SPI_execute_with_args(
							  "SELECT s.shardid, s.shardminvalue::pg_catalog.int4,"
							  " s.shardmaxvalue::pg_catalog.int4,"
							  " EXISTS (SELECT FROM pg_catalog.pg_dist_placement p,"
							  "  pg_catalog.pg_dist_local_group g"
							  "  WHERE p.shardid OPERATOR(pg_catalog.=) s.shardid"
							  "  AND p.groupid OPERATOR(pg_catalog.=) g.groupid),"
							  " pg_catalog.shard_name(s.logicalrelid, s.shardid, false)"
							  " FROM pg_catalog.pg_dist_shard s, pg_catalog.pg_dist_partition d"
							  " WHERE s.logicalrelid OPERATOR(pg_catalog.=) $1"
							  " AND d.logicalrelid OPERATOR(pg_catalog.=) $1"
							  " AND d.partmethod OPERATOR(pg_catalog.=) 'h'"
							  " AND d.repmodel OPERATOR(pg_catalog.=) 's'"
							  " AND pg_catalog.column_to_column_name(d.logicalrelid, d.partkey)"
							  "  OPERATOR(pg_catalog.=) 'key'"
							  " ORDER BY 2",
							  1, &argtype, &arg, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "pklimit: reading Citus's shards failed");
	if (SPI_processed == 0)
	{
		SPI_freetuptable(SPI_tuptable);
		map.stale = (map_generation != before);
		return;
	}

	old = MemoryContextSwitchTo(TopMemoryContext);
	map.shards = palloc0(sizeof(PklimitShard) * SPI_processed);
	MemoryContextSwitchTo(old);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		PklimitShard *s = &map.shards[r];
		bool		isnull;
		char	   *name;

		s->id = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
		s->min = DatumGetInt32(SPI_getbinval(tuple, desc, 2, &isnull));
		s->max = DatumGetInt32(SPI_getbinval(tuple, desc, 3, &isnull));
		s->local = DatumGetBool(SPI_getbinval(tuple, desc, 4, &isnull));
		name = SPI_getvalue(tuple, desc, 5);
		/* shard_name() qualifies and quotes as a statement needs */
		if (strlcpy(s->name, name, sizeof(s->name)) >= sizeof(s->name))
			elog(ERROR, "pklimit: shard name \"%s\" too long", name);
		pfree(name);
	}
	map.nshards = (int) SPI_processed;
	map.collation = DEFAULT_COLLATION_OID;
	if (get_attnum(relid, "key") != InvalidAttrNumber)
	{
		Oid			type;
		int32		typmod;

		get_atttypetypmodcoll(relid, get_attnum(relid, "key"), &type, &typmod,
							  &map.collation);
	}
	SPI_freetuptable(SPI_tuptable);
	map.stale = (map_generation != before);
}

/*
 * The shard holding stored_key in the map, as Citus finds it: the hash of
 * the key's text by the type's standard hash function under the column's
 * collation, in the shard whose range holds it.  NULL without a map.
 */
PklimitShard *
pklimit_shard_of(const PklimitShardMap *m, const char *stored_key)
{
	static TypeCacheEntry *text_type = NULL;
	int			lo = 0;
	int			hi;
	int32		hash;
	text	   *t;

	if (m == NULL || m->nshards == 0)
		return NULL;
	if (text_type == NULL)
		text_type = lookup_type_cache(TEXTOID, TYPECACHE_HASH_PROC_FINFO);
	t = cstring_to_text(stored_key);
	hash = DatumGetInt32(FunctionCall1Coll(&text_type->hash_proc_finfo,
										   m->collation, PointerGetDatum(t)));
	pfree(t);
	hi = m->nshards - 1;
	while (lo < hi)
	{
		int			mid = lo + (hi - lo + 1) / 2;

		if (m->shards[mid].min <= hash)
			lo = mid;
		else
			hi = mid - 1;
	}
	if (m->shards[lo].min > hash || m->shards[lo].max < hash)
		return NULL;			/* a gap: let Citus route it */
	return &m->shards[lo];
}

/*
 * The shard map of table, current for this transaction, in an SPI
 * connection (NULL unless Citus distributes the table by key).
 */
static PklimitShardMap *
current_map(const PklimitTable *table)
{
	if (map.relid != table->relid || map.stale)
		load_map(table->relid);
	return map.nshards > 0 ? &map : NULL;
}

/* Two shard ids (int8 Datums), ascending. */
static int
compare_ids(const void *a, const void *b)
{
	int64		x = DatumGetInt64(*(const Datum *) a);
	int64		y = DatumGetInt64(*(const Datum *) b);

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * Make the shards on this node that hold the n stored keys usable for the
 * rest of the transaction: each locked as Citus's own writers lock a shard,
 * so that no move or split of it can finish before this transaction ends,
 * and the map read again if a move finished before the lock was granted.
 * Sets table->shards, and usable[k] to the shard of keys[k] if the
 * transaction may write it directly (NULL otherwise), as
 * pklimit_shard_usable() says.  Returns false, with table->shards NULL, if
 * the shards kept moving meanwhile (Citus routes every key then); true
 * otherwise, with table->shards NULL where the table is not distributed by
 * key.  As the table's owner (Citus lets only the owner take the lock), in
 * an SPI connection.
 */
bool
pklimit_shards_prepare(PklimitTable *table, const char *const *keys, int n,
					   PklimitShard **usable)
{
	PklimitShardMap *m;

	table->shards = NULL;
	for (int k = 0; k < n; k++)
		usable[k] = NULL;
	if (!table->citus)
		return true;
	for (int tries = 0; tries < 3; tries++)
	{
		Datum	   *ids;
		int			nids = 0;
		Oid			types[2] = {INT4OID, INT8ARRAYOID};
		Datum		args[2];
		bool		again = false;

		if ((m = current_map(table)) == NULL)
			return true;
		for (int i = 0; i < m->nshards; i++)
			m->shards[i].locked = false;
		ids = palloc(sizeof(Datum) * Max(n, 1));
		for (int k = 0; k < n; k++)
		{
			PklimitShard *s = pklimit_shard_of(m, keys[k]);

			usable[k] = (s != NULL && s->local) ? s : NULL;
			if (usable[k] != NULL && !s->locked)
			{
				s->locked = true;
				ids[nids++] = Int64GetDatum(s->id);
			}
		}
		if (nids > 0)
		{
			/* in the order Citus takes them, lest two takers wait in a circle */
			qsort(ids, nids, sizeof(Datum), compare_ids);
			args[0] = Int32GetDatum(SHARD_METADATA_SHARE_LOCK);
			args[1] = PointerGetDatum(construct_array(ids, nids, INT8OID, 8,
													  FLOAT8PASSBYVAL,
													  TYPALIGN_DOUBLE));
			if (lock_plan == NULL)
			{
				SPIPlanPtr	plan = SPI_prepare("SELECT pg_catalog.lock_shard_metadata($1, $2)",
											   2, types);

				if (plan == NULL || SPI_keepplan(plan) != 0)
					elog(ERROR, "pklimit: preparing the lock of Citus's shards failed");
				lock_plan = plan;
			}
			if (SPI_execute_plan(lock_plan, args, NULL, false, 0) !=
				SPI_OK_SELECT)
				elog(ERROR, "pklimit: locking Citus's shards failed");
			/* a move that finished while we waited has changed the map */
			AcceptInvalidationMessages();
			again = m->stale;
		}
		pfree(ids);
		if (!again)
		{
			table->shards = m;
			return true;
		}
	}
	for (int k = 0; k < n; k++)
		usable[k] = NULL;
	return false;
}

/*
 * Is stored_key's shard on this node, as the map last read says (any
 * schema's key: the map is of one table)?
 */
bool
pklimit_key_on_this_node(const char *stored_key)
{
	PklimitShard *s = pklimit_shard_of(map.nshards > 0 ? &map : NULL,
									   stored_key);

	return s != NULL && s->local;
}

/* May this transaction write stored_key's shard directly? */
PklimitShard *
pklimit_shard_usable(const PklimitTable *table, const char *stored_key)
{
	PklimitShard *s = pklimit_shard_of(table->shards, stored_key);

	return (s != NULL && s->local && s->locked) ? s : NULL;
}

PG_FUNCTION_INFO_V1(pklimit_stored_key_sql);
PG_FUNCTION_INFO_V1(pklimit_stored_key_policy);
PG_FUNCTION_INFO_V1(pklimit_node);
PG_FUNCTION_INFO_V1(pklimit_node_policy);

/*
 * pklimit_stored_key(key text) → text: the row's key for key under the
 * session's tenant, as a call would store it.
 */
Datum
pklimit_stored_key_sql(PG_FUNCTION_ARGS)
{
	pklimit_arg_not_null(fcinfo, 0, "key");
	PG_RETURN_TEXT_P(cstring_to_text(pklimit_key_value(PG_GETARG_TEXT_PP(0),
													   "key")));
}

/*
 * pklimit_stored_key(key text, policy text) → text: the same, for the row
 * key counts in under policy.
 */
Datum
pklimit_stored_key_policy(PG_FUNCTION_ARGS)
{
	char	   *policy = pklimit_policy_name_value(fcinfo, 1);

	PG_RETURN_TEXT_P(cstring_to_text(pklimit_policy_key(fcinfo, 0, policy)));
}

/*
 * The row of pklimit_node for a stored key: the node that holds it, to send
 * the call to; all NULL where the table is not distributed by key (any node
 * will do).
 */
static Datum
node_row(FunctionCallInfo fcinfo, const char *stored)
{
	TupleDesc	desc;
	Datum		values[3] = {0};
	bool		nulls[3] = {true, true, true};
	Oid			relid;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "pklimit_node must return a row");
	relid = get_relname_relid("platformkit_limits",
							  get_func_namespace(fcinfo->flinfo->fn_oid));
	if (OidIsValid(relid) &&
		OidIsValid(get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE)))
	{
		PklimitTable table = {.relid = relid,.citus = true};
		PklimitShard *s;

		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		s = pklimit_shard_of(current_map(&table), stored);
		if (s != NULL)
		{
			Oid			argtype = INT8OID;
			Datum		arg = Int64GetDatum(s->id);

			values[2] = Int64GetDatum(s->id);
			nulls[2] = false;
			if (SPI_execute_with_args("SELECT n.nodename, n.nodeport"
									  " FROM pg_catalog.pg_dist_placement p"
									  " JOIN pg_catalog.pg_dist_node n"
									  "  ON n.groupid OPERATOR(pg_catalog.=) p.groupid"
									  " WHERE p.shardid OPERATOR(pg_catalog.=) $1"
									  " AND n.noderole OPERATOR(pg_catalog.=) 'primary'"
									  " ORDER BY n.nodeid LIMIT 1",
									  1, &argtype, &arg, NULL, true, 1) ==
				SPI_OK_SELECT && SPI_processed == 1)
			{
				bool		isnull;

				values[0] = SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0],
															SPI_tuptable->tupdesc,
															1, &isnull),
											  false, -1);
				values[1] = SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 2, &isnull);
				nulls[0] = nulls[1] = false;
			}
		}
		SPI_finish();
	}
	return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}

/*
 * pklimit_node(key text) → (node_name, node_port, shard_id): the node that
 * holds key's row under the session's tenant.
 */
Datum
pklimit_node(PG_FUNCTION_ARGS)
{
	pklimit_arg_not_null(fcinfo, 0, "key");
	PG_RETURN_DATUM(node_row(fcinfo,
							 pklimit_key_value(PG_GETARG_TEXT_PP(0), "key")));
}

/* pklimit_node(key text, policy text): the same, for key under policy. */
Datum
pklimit_node_policy(PG_FUNCTION_ARGS)
{
	char	   *policy = pklimit_policy_name_value(fcinfo, 1);

	PG_RETURN_DATUM(node_row(fcinfo, pklimit_policy_key(fcinfo, 0, policy)));
}
