/*-------------------------------------------------------------------------
 *
 * policy.c
 *		Policies (docs/policies.md): limits kept as rows of
 *		platformkit_limit_policies, one default row per name and one row per
 *		tenant that overrides it.  Owns this backend's cache of them, the
 *		trigger that empties every backend's cache at commit of a change,
 *		pklimit_policy_set and pklimit_policy_drop, and the counters of
 *		pklimit_policy_stats() in shared memory.
 *
 * A call reads the invalidations that reached this backend, then finds its
 * policy in the cache; on a miss it reads the table with a snapshot taken
 * after them, so an entry is never older than the last change announced,
 * and the next change (committed, then announced) empties the cache again:
 * the next call of every session sees a committed change, even within a
 * transaction that was open before it.
 * The worker never reads policies: a call hands it the limit it found.
 *
 * Locking: a counters slot is claimed (dbid, name, tenant set) under
 * pklimit_lock, exclusively, and never moves; its counters are atomics.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "api.h"
#include "policy.h"
#include "settings.h"

#define POLICY_TABLE "platformkit_limit_policies"

/* What pklimit_policy_stats() counts of each policy row. */
typedef enum PolicyStat
{
	POLICY_CALLS,
	POLICY_ALLOWED,
	POLICY_REFUSED,
	POLICY_WOULD_REFUSE,
	POLICY_UNAVAILABLE,
	POLICY_TABLE_READS,
	POLICY_STAT_COUNT
} PolicyStat;

/* One policy row's counters; claimed under pklimit_lock, never freed. */
struct PklimitPolicyStats
{
	Oid			dbid;			/* InvalidOid: free */
	bool		shadow;			/* its mode when last read */
	char		name[PKLIMIT_POLICY_NAME_MAX + 1];
	char		tenant[PKLIMIT_POLICY_TENANT_MAX + 1];	/* "": the default */
	pg_atomic_uint64 counters[POLICY_STAT_COUNT];
};

static PklimitPolicyStats *policy_stats = NULL; /* PKLIMIT_POLICY_STATS_MAX */

/* The cache: a policy by schema, name and the session's tenant. */
typedef struct CacheKey
{
	Oid			nspid;
	bool		long_tenant;	/* longer than any override's: the default */
	char		name[PKLIMIT_POLICY_NAME_MAX + 1];
	char		tenant[PKLIMIT_POLICY_TENANT_MAX + 1];
} CacheKey;

typedef struct CacheEntry
{
	CacheKey	key;
	PklimitPolicy policy;
} CacheEntry;

static HTAB *cache = NULL;
static bool cache_stale = false;	/* a change was announced: empty it */
static Oid	cache_relid = InvalidOid;	/* the policy table it was read from */
static Oid	cache_shard_relid = InvalidOid; /* on Citus, its shard here */
static bool callback_registered = false;

Size
pklimit_policy_shmem_size(void)
{
	return mul_size(PKLIMIT_POLICY_STATS_MAX, sizeof(PklimitPolicyStats));
}

/* In shmem_startup, with AddinShmemInitLock held. */
void
pklimit_policy_shmem_init(void)
{
	bool		found;

	policy_stats = ShmemInitStruct("pklimit policy stats",
								   pklimit_policy_shmem_size(), &found);
	if (found)
		return;
	memset(policy_stats, 0, pklimit_policy_shmem_size());
	for (int i = 0; i < PKLIMIT_POLICY_STATS_MAX; i++)
		for (int c = 0; c < POLICY_STAT_COUNT; c++)
			pg_atomic_init_u64(&policy_stats[i].counters[c], 0);
}

/*
 * The slot of a policy row of this database, or NULL; *free_slot: the first
 * free one.  pklimit_lock held.
 */
static PklimitPolicyStats *
find_slot(const char *name, const char *tenant, PklimitPolicyStats **free_slot)
{
	*free_slot = NULL;
	for (int i = 0; i < PKLIMIT_POLICY_STATS_MAX; i++)
	{
		PklimitPolicyStats *s = &policy_stats[i];

		if (s->dbid == MyDatabaseId && strcmp(s->name, name) == 0 &&
			strcmp(s->tenant, tenant) == 0)
			return s;
		if (s->dbid == InvalidOid && *free_slot == NULL)
			*free_slot = s;
	}
	return NULL;
}

/* The counters of a policy row of this database, claimed if new; or NULL. */
static PklimitPolicyStats *
stats_slot(const char *name, const char *tenant)
{
	PklimitPolicyStats *slot;
	PklimitPolicyStats *free_slot;

	if (policy_stats == NULL)
		return NULL;
	/* most reads find their row's slot: a shared look first */
	LWLockAcquire(pklimit_lock, LW_SHARED);
	slot = find_slot(name, tenant, &free_slot);
	LWLockRelease(pklimit_lock);
	if (slot != NULL)
		return slot;
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	slot = find_slot(name, tenant, &free_slot);
	if (slot == NULL && free_slot != NULL)
	{
		slot = free_slot;
		strlcpy(slot->name, name, sizeof(slot->name));
		strlcpy(slot->tenant, tenant, sizeof(slot->tenant));
		slot->dbid = MyDatabaseId;
	}
	LWLockRelease(pklimit_lock);
	return slot;
}

/*
 * Count one call's decision under a policy: unavailable, or what its own
 * limit decided (in a call on several keys, each policy by its own), and
 * whether shadow mode allowed a refusal.
 */
void
pklimit_policy_count(const PklimitPolicy *policy, PklimitStatus status,
					 bool limit_allowed, bool shadowed)
{
	pg_atomic_uint64 *c;

	if (policy->stats == NULL || !pklimit_track_stats)
		return;
	c = policy->stats->counters;
	pg_atomic_fetch_add_u64(&c[POLICY_CALLS], 1);
	if (status != PKLIMIT_OK)
		pg_atomic_fetch_add_u64(&c[POLICY_UNAVAILABLE], 1);
	else if (limit_allowed)
		pg_atomic_fetch_add_u64(&c[POLICY_ALLOWED], 1);
	else if (shadowed)
	{
		pg_atomic_fetch_add_u64(&c[POLICY_ALLOWED], 1);
		pg_atomic_fetch_add_u64(&c[POLICY_WOULD_REFUSE], 1);
	}
	else
		pg_atomic_fetch_add_u64(&c[POLICY_REFUSED], 1);
}

/*
 * Relcache invalidation: the policy table changed (its trigger asked at
 * commit), or everything is to be read again (InvalidOid).
 */
static void
policy_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == cache_relid || relid == cache_shard_relid)
		cache_stale = true;
}

static void
cache_reset(void)
{
	HASHCTL		ctl;

	if (cache != NULL)
		hash_destroy(cache);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(CacheKey);
	ctl.entrysize = sizeof(CacheEntry);
	ctl.hcxt = CacheMemoryContext;
	cache = hash_create("pklimit policies", 64, &ctl,
						HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	cache_stale = false;
}

/* A policy row's values as read, before they are checked. */
typedef struct PolicyRow
{
	bool		found;
	char	   *tenant;
	int64		max_count;
	Interval   *window;
	text	   *algorithm;
	int64		cost;
	bool		record_refused;
	Interval   *block;			/* NULL: none */
	bool		durable;
	text	   *anchor;
	text	   *mode;
	text	   *time_zone;		/* NULL: none */
} PolicyRow;

/*
 * On Citus, the shard of the policy table when Citus distributes it (as a
 * reference table: docs/citus.md), else 0.  *local: its placement's
 * relation on this node, or InvalidOid.
 */
static int64
citus_shard(Oid relid, Oid nspid, Oid *local)
{
	Oid			argtype = OIDOID;
	Datum		arg = ObjectIdGetDatum(relid);
	int64		shardid = 0;

	*local = InvalidOid;
	if (!OidIsValid(get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE)))
		return 0;
	if (SPI_execute_with_args("SELECT s.shardid FROM pg_catalog.pg_dist_shard s"
							  " WHERE s.logicalrelid OPERATOR(pg_catalog.=) $1",
							  1, &argtype, &arg, NULL, true, 1) == SPI_OK_SELECT &&
		SPI_processed == 1)
	{
		bool		isnull;

		shardid = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull));
		*local = get_relname_relid(psprintf("%s_" INT64_FORMAT, POLICY_TABLE,
											shardid), nspid);
	}
	return shardid;
}

/* The owner of a relation. */
static Oid
relation_owner(Oid relid)
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
 * Run as the owner of relation relid, as a restricted operation, with
 * search_path pg_catalog, pg_temp: nothing a caller planted in a schema of
 * its search_path runs with the owner's rights.  pklimit_as_owner_end()
 * undoes it.
 */
void
pklimit_as_owner_begin(Oid relid, PklimitAsOwner *saved)
{
	GetUserIdAndSecContext(&saved->userid, &saved->sec_context);
	SetUserIdAndSecContext(relation_owner(relid),
						   saved->sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	saved->nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
}

void
pklimit_as_owner_end(const PklimitAsOwner *saved)
{
	AtEOXact_GUC(true, saved->nestlevel);
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
}

/* The columns a call reads of a policy row, and their types. */
static const struct
{
	const char *name;
	Oid			type;
	bool		nullable;
}			policy_columns[] = {
	{"tenant", TEXTOID, false},
	{"max_count", INT8OID, false},
	{"window", INTERVALOID, false},
	{"algorithm", TEXTOID, false},
	{"cost", INT8OID, false},
	{"record_refused", BOOLOID, false},
	{"block", INTERVALOID, true},
	{"durable", BOOLOID, false},
	{"anchor", TEXTOID, false},
	{"mode", TEXTOID, false},
	{"time_zone", TEXTOID, true},
};

/* An owner's change of the table that leaves a row no call can read. */
static void
altered_table(const char *column, const char *problem)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
			 errmsg("column \"%s\" of pklimit's policy table \"%s\" %s",
					column, POLICY_TABLE, problem),
			 errhint("Restore the column as pklimit created it (docs/policies.md).")));
}

/* The values of a policy row SPI read, checked, copied into context. */
static void
spi_row_values(HeapTuple tuple, TupleDesc desc, MemoryContext context,
			   PolicyRow *row)
{
	MemoryContext old = MemoryContextSwitchTo(context);
	Datum		v[lengthof(policy_columns)];
	bool		isnull[lengthof(policy_columns)];

	for (int i = 0; i < lengthof(policy_columns); i++)
	{
		if (SPI_gettypeid(desc, i + 1) != policy_columns[i].type)
			altered_table(policy_columns[i].name, "is not of the type pklimit gave it");
		v[i] = SPI_getbinval(tuple, desc, i + 1, &isnull[i]);
		if (isnull[i] && !policy_columns[i].nullable)
			altered_table(policy_columns[i].name, "is NULL");
	}
	row->found = true;
	row->tenant = TextDatumGetCString(v[0]);
	row->max_count = DatumGetInt64(v[1]);
	row->window = DatumGetIntervalP(datumCopy(v[2], false, sizeof(Interval)));
	row->algorithm = DatumGetTextPCopy(v[3]);
	row->cost = DatumGetInt64(v[4]);
	row->record_refused = DatumGetBool(v[5]);
	row->block = isnull[6] ? NULL :
		DatumGetIntervalP(datumCopy(v[6], false, sizeof(Interval)));
	row->durable = DatumGetBool(v[7]);
	row->anchor = DatumGetTextPCopy(v[8]);
	row->mode = DatumGetTextPCopy(v[9]);
	row->time_zone = isnull[10] ? NULL : DatumGetTextPCopy(v[10]);
	MemoryContextSwitchTo(old);
}

/*
 * Read policy name's row for tenant (NULL: none) and its default row, by
 * the table's primary key, as the table's owner, with a snapshot taken now
 * (after the invalidations this backend has read).  On Citus, where the
 * table is a reference table, the read goes through Citus to the shard on
 * this node, whose relation is remembered: its trigger announces changes.
 */
static void
read_rows(Oid relid, Oid nspid, const char *name, const char *tenant,
		  PolicyRow *row, PolicyRow *default_row)
{
	MemoryContext context = CurrentMemoryContext;
	PklimitAsOwner owner;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	SPIPlanPtr	plan;
	Snapshot	snapshot;

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(tenant ? tenant : "");
	pklimit_as_owner_begin(relid, &owner);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(psprintf("SELECT tenant, max_count, \"window\", algorithm, cost,"
								" record_refused, block, durable, anchor, mode, time_zone"
								" FROM %s.%s"
								" WHERE name OPERATOR(pg_catalog.=) $1"
								" AND (tenant OPERATOR(pg_catalog.=) ''"
								"  OR tenant OPERATOR(pg_catalog.=) $2)",
								quote_identifier(get_namespace_name(nspid)),
								POLICY_TABLE), 2, types);
	if (plan == NULL)
		elog(ERROR, "could not prepare the read of pklimit's policies");
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	if (SPI_execute_snapshot(plan, values, NULL, snapshot, InvalidSnapshot,
							 true, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read pklimit's policies");
	UnregisterSnapshot(snapshot);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		PolicyRow	r = {0};

		spi_row_values(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, context, &r);
		if (r.tenant[0] == '\0')
			*default_row = r;
		else if (tenant != NULL)
			*row = r;
	}
	if (OidIsValid(get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE)))
		(void) citus_shard(relid, nspid, &cache_shard_relid);
	SPI_finish();
	pklimit_as_owner_end(&owner);
}

/*
 * Policy name's row for tenant (NULL: none), or else its default row.
 * Returns false if it has neither.
 */
static bool
read_policy(Oid nspid, const char *name, const char *tenant, PolicyRow *row)
{
	Oid			relid = get_relname_relid(POLICY_TABLE, nspid);
	PolicyRow	default_row = {0};

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("pklimit's policy table \"%s\" does not exist", POLICY_TABLE),
				 errhint("Update pklimit: ALTER EXTENSION pklimit UPDATE.")));
	memset(row, 0, sizeof(*row));
	cache_relid = relid;
	read_rows(relid, nspid, name, tenant, row, &default_row);
	if (!row->found)
		*row = default_row;
	return row->found;
}

/* errcontext: which policy's row is being checked */
static void
policy_context(void *arg)
{
	errcontext("policy \"%s\"", (const char *) arg);
}

/* A row's values as a call's limit: the checks of a call's arguments. */
static void
row_policy(const char *name, const PolicyRow *row, PklimitPolicy *policy)
{
	ErrorContextCallback context;
	char	   *mode = text_to_cstring(row->mode);

	context.callback = policy_context;
	context.arg = (void *) name;
	context.previous = error_context_stack;
	error_context_stack = &context;
	memset(policy, 0, sizeof(*policy));
	policy->call.max_count = pklimit_max_count_value(row->max_count, "max_count");
	policy->call.algorithm = pklimit_algorithm_value(row->algorithm, "algorithm");
	if (row->cost < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost must not be negative"),
				 errdetail("cost is " INT64_FORMAT ".", row->cost)));
	policy->call.cost = row->cost;
	policy->call.record_refused = row->record_refused;
	policy->call.block_usec = row->block ?
		pklimit_window_value(row->block, "block") : 0;
	policy->call.memory = !row->durable;
	policy->call.anchor = pklimit_anchor_value(row->anchor, policy->call.algorithm);
	/* a calendar window: its bounds are the call's, from its clock */
	if (row->time_zone != NULL)
	{
		policy->tz = pklimit_time_zone_value(row->time_zone);
		policy->call.calendar = pklimit_calendar_value(row->window,
													   policy->call.algorithm,
													   policy->call.anchor);
	}
	else
		policy->call.window_usec = pklimit_window_value(row->window, "window");
	if (strcmp(mode, "shadow") == 0)
		policy->shadow = true;
	else if (strcmp(mode, "enforce") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown mode \"%s\"", mode),
				 errhint("The modes are enforce and shadow.")));
	error_context_stack = context.previous;
}

/*
 * The policy a call names, for the session's platformkit.tenant: from the
 * cache, or read from the table (an unknown policy is an error).
 */
void
pklimit_policy_get(Oid nspid, const char *name, PklimitPolicy *policy)
{
	const char *tenant = GetConfigOption("platformkit.tenant", true, false);
	CacheKey	key;
	CacheEntry *entry;
	PolicyRow	row;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(policy_invalidate, (Datum) 0);
		callback_registered = true;
	}
	/* a change committed since: seen by this call, in or out of a transaction */
	AcceptInvalidationMessages();
	if (cache == NULL || cache_stale)
		cache_reset();
	memset(&key, 0, sizeof(key));
	key.nspid = nspid;
	strlcpy(key.name, name, sizeof(key.name));
	if (tenant != NULL && strlen(tenant) > PKLIMIT_POLICY_TENANT_MAX)
		key.long_tenant = true;
	else if (tenant != NULL)
		strlcpy(key.tenant, tenant, sizeof(key.tenant));
	entry = hash_search(cache, &key, HASH_FIND, NULL);
	if (entry != NULL)
	{
		*policy = entry->policy;
		return;
	}

	if (!read_policy(nspid, name,
					 key.long_tenant || key.tenant[0] == '\0' ? NULL : key.tenant,
					 &row))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("policy \"%s\" does not exist", name),
				 errhint("Create it with pklimit_policy_set(%s, max_count, window); pklimit_policies lists the policies there are.",
						 quote_literal_cstr(name))));
	row_policy(name, &row, policy);
	policy->stats = stats_slot(name, row.tenant);
	if (policy->stats != NULL)
	{
		policy->stats->shadow = policy->shadow;
		pg_atomic_fetch_add_u64(&policy->stats->counters[POLICY_TABLE_READS], 1);
	}

	/*
	 * a change announced while the table was read: what was cached goes; and
	 * so does all of it once it holds PKLIMIT_POLICY_CACHE_MAX entries (a
	 * session that serves many tenants reads again the ones it uses)
	 */
	if (cache_stale)
	{
		/* the row may be older than the change: for this call only */
		cache_reset();
		return;
	}
	if (hash_get_num_entries(cache) >= PKLIMIT_POLICY_CACHE_MAX)
		cache_reset();
	entry = hash_search(cache, &key, HASH_ENTER, NULL);
	entry->policy = *policy;
}

/* A policy name argument: not NULL, not empty, not too long. */
char *
pklimit_policy_name_value(FunctionCallInfo fcinfo, int argno)
{
	char	   *name;

	pklimit_arg_not_null(fcinfo, argno, "policy");
	name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("policy must not be empty"),
				 errhint("Name a policy of pklimit_policies.")));
	if (strlen(name) > PKLIMIT_POLICY_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("policy name is too long"),
				 errdetail("A policy name has at most %d bytes; this one has %zu.",
						   PKLIMIT_POLICY_NAME_MAX, strlen(name))));
	return name;
}

/*
 * The stored key of a key argument under policy (a name checked by
 * pklimit_policy_name_value).
 */
char *
pklimit_policy_key(FunctionCallInfo fcinfo, int keyarg, const char *policy)
{
	text	   *key;

	pklimit_arg_not_null(fcinfo, keyarg, "key");
	key = PG_GETARG_TEXT_PP(keyarg);
	pklimit_key_check(key, "key");
	return pklimit_stored_key_in(key, policy);
}

/*
 * The trigger of the policy table, for each statement that changed it: the
 * cache of every backend is emptied when the change commits (and this
 * backend's at its next command).
 */
PG_FUNCTION_INFO_V1(pklimit_policies_changed);
Datum
pklimit_policies_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("pklimit_policies_changed() is the trigger of pklimit's policy table"),
				 errhint("It is not called directly.")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}

/* The policy table, schema-qualified, for SQL. */
static char *
policy_table_sql(FunctionCallInfo fcinfo)
{
	Oid			nspid = get_func_namespace(fcinfo->flinfo->fn_oid);

	return psprintf("%s.%s", quote_identifier(get_namespace_name(nspid)),
					POLICY_TABLE);
}

/* A tenant argument of a policy row: NULL for the default row, as "". */
static char *
tenant_value(FunctionCallInfo fcinfo, int argno)
{
	char	   *tenant;

	if (PG_ARGISNULL(argno))
		return "";
	tenant = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (tenant[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tenant must not be empty"),
				 errhint("Leave tenant NULL for the policy's default row.")));
	if (strlen(tenant) > PKLIMIT_POLICY_TENANT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("tenant is too long for a policy override"),
				 errdetail("An override's tenant has at most %d bytes; this one has %zu.",
						   PKLIMIT_POLICY_TENANT_MAX, strlen(tenant))));
	return tenant;
}

/*
 * pklimit_policy_set(name, max_count, window, algorithm, cost,
 * record_refused, block, durable, anchor, mode, time_zone, tenant): insert
 * or update one row, its values checked as a call's are.  Runs as the
 * caller: the table's privileges and row level security decide who may.
 */
PG_FUNCTION_INFO_V1(pklimit_policy_set);
Datum
pklimit_policy_set(PG_FUNCTION_ARGS)
{
	static const char *const not_null[] = {
		"name", "max_count", "window", "algorithm", "cost", "record_refused",
		NULL, "durable", "anchor", "mode"
	};
	Oid			types[12] = {TEXTOID, TEXTOID, INT8OID, INTERVALOID, TEXTOID,
	INT8OID, BOOLOID, INTERVALOID, BOOLOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[12];
	char		nulls[12];
	char	   *name = pklimit_policy_name_value(fcinfo, 0);
	char	   *mode;
	PolicyRow	row = {0};
	PklimitPolicy checked;

	for (int i = 0; i < lengthof(not_null); i++)
		if (not_null[i] != NULL)
			pklimit_arg_not_null(fcinfo, i, not_null[i]);
	mode = text_to_cstring(PG_GETARG_TEXT_PP(9));
	if (strcmp(mode, "enforce") != 0 && strcmp(mode, "shadow") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown mode \"%s\"", mode),
				 errhint("The modes are enforce and shadow.")));

	/* the checks of a call, on the values as given */
	row.max_count = PG_GETARG_INT64(1);
	row.window = PG_GETARG_INTERVAL_P(2);
	row.algorithm = PG_GETARG_TEXT_PP(3);
	row.cost = PG_GETARG_INT64(4);
	row.record_refused = PG_GETARG_BOOL(5);
	row.block = PG_ARGISNULL(6) ? NULL : PG_GETARG_INTERVAL_P(6);
	row.durable = PG_GETARG_BOOL(7);
	row.anchor = PG_GETARG_TEXT_PP(8);
	row.mode = PG_GETARG_TEXT_PP(9);
	row.time_zone = PG_ARGISNULL(10) ? NULL : PG_GETARG_TEXT_PP(10);
	row_policy(name, &row, &checked);

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(tenant_value(fcinfo, 11));
	for (int i = 1; i <= 10; i++)
		values[i + 1] = PG_GETARG_DATUM(i);
	for (int i = 0; i < 12; i++)
		nulls[i] = (i >= 2 && PG_ARGISNULL(i - 1)) ? 'n' : ' ';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(psprintf("INSERT INTO %s AS p"
									   " (name, tenant, max_count, \"window\", algorithm, cost,"
									   "  record_refused, block, durable, anchor, mode, time_zone,"
									   "  updated_at)"
									   " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,"
									   "  pg_catalog.now())"
									   " ON CONFLICT (name, tenant) DO UPDATE SET"
									   "  max_count = EXCLUDED.max_count,"
									   "  \"window\" = EXCLUDED.\"window\","
									   "  algorithm = EXCLUDED.algorithm, cost = EXCLUDED.cost,"
									   "  record_refused = EXCLUDED.record_refused,"
									   "  block = EXCLUDED.block, durable = EXCLUDED.durable,"
									   "  anchor = EXCLUDED.anchor, mode = EXCLUDED.mode,"
									   "  time_zone = EXCLUDED.time_zone,"
									   "  updated_at = EXCLUDED.updated_at",
									   policy_table_sql(fcinfo)),
							  12, types, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "pklimit_policy_set: the insert failed");
	SPI_finish();
	PG_RETURN_VOID();
}

/* pklimit_policy_drop(name, tenant): true if the row was there. */
PG_FUNCTION_INFO_V1(pklimit_policy_drop);
Datum
pklimit_policy_drop(PG_FUNCTION_ARGS)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		dropped;

	values[0] = CStringGetTextDatum(pklimit_policy_name_value(fcinfo, 0));
	values[1] = CStringGetTextDatum(tenant_value(fcinfo, 1));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(psprintf("DELETE FROM %s"
									   " WHERE name OPERATOR(pg_catalog.=) $1"
									   " AND tenant OPERATOR(pg_catalog.=) $2",
									   policy_table_sql(fcinfo)),
							  2, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "pklimit_policy_drop: the delete failed");
	dropped = SPI_processed > 0;
	SPI_finish();
	PG_RETURN_BOOL(dropped);
}

/* pklimit_policy_stats(): one row per policy row counted, every database. */
PG_FUNCTION_INFO_V1(pklimit_policy_stats);
Datum
pklimit_policy_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	pklimit_check_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(pklimit_lock, LW_SHARED);
	for (int i = 0; i < PKLIMIT_POLICY_STATS_MAX; i++)
	{
		PklimitPolicyStats *s = &policy_stats[i];
		Datum		values[4 + POLICY_STAT_COUNT];
		bool		nulls[4 + POLICY_STAT_COUNT] = {0};

		if (s->dbid == InvalidOid)
			continue;
		values[0] = ObjectIdGetDatum(s->dbid);
		values[1] = CStringGetTextDatum(s->name);
		values[2] = CStringGetTextDatum(s->tenant);
		nulls[2] = (s->tenant[0] == '\0');
		values[3] = CStringGetTextDatum(s->shadow ? "shadow" : "enforce");
		for (int c = 0; c < POLICY_STAT_COUNT; c++)
			values[4 + c] = Int64GetDatum((int64) pg_atomic_read_u64(&s->counters[c]));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(pklimit_lock);
	return (Datum) 0;
}

/* After DROP DATABASE: its policies' counters are free again. */
void
pklimit_policy_forget_database(Oid dboid)
{
	if (policy_stats == NULL || !OidIsValid(dboid))
		return;
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int i = 0; i < PKLIMIT_POLICY_STATS_MAX; i++)
		if (policy_stats[i].dbid == dboid)
		{
			for (int c = 0; c < POLICY_STAT_COUNT; c++)
				pg_atomic_write_u64(&policy_stats[i].counters[c], 0);
			policy_stats[i].dbid = InvalidOid;
		}
	LWLockRelease(pklimit_lock);
}

/*
 * pklimit_policy_rows(): the rows of the view pklimit_policies, as the
 * table's row level security would show them to the caller: the default
 * rows and those of its platformkit.tenant, or every row to a member of
 * pklimit_admin with no tenant set.  Read as the table's owner, so that on
 * Citus (which checks a reader's privileges on the shard, not on the view)
 * the view reads as on one server.
 */
PG_FUNCTION_INFO_V1(pklimit_policy_rows);
Datum
pklimit_policy_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	Oid			relid = get_relname_relid(POLICY_TABLE, nspid);
	const char *tenant = GetConfigOption("platformkit.tenant", true, false);
	Oid			admin = get_role_oid("pklimit_admin", true);
	bool		every_row;
	PklimitAsOwner owner;
	Oid			argtype = TEXTOID;
	Datum		arg;

	if (tenant == NULL)
		tenant = "";
	every_row = tenant[0] == '\0' && OidIsValid(admin) &&
		has_privs_of_role(GetUserId(), admin);
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("pklimit's policy table \"%s\" does not exist", POLICY_TABLE),
				 errhint("Update pklimit: ALTER EXTENSION pklimit UPDATE.")));
	InitMaterializedSRF(fcinfo, 0);
	arg = CStringGetTextDatum(tenant);
	pklimit_as_owner_begin(relid, &owner);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(psprintf("SELECT name,"
									   " CASE WHEN tenant OPERATOR(pg_catalog.=) '' THEN NULL"
									   " ELSE tenant END, max_count,"
									   " \"window\", algorithm, cost, record_refused, block,"
									   " durable, anchor, mode, time_zone, updated_at"
									   " FROM %s.%s"
									   " WHERE %s OR tenant OPERATOR(pg_catalog.=) ''"
									   " OR tenant OPERATOR(pg_catalog.=) $1",
									   quote_identifier(get_namespace_name(nspid)),
									   POLICY_TABLE, every_row ? "true" : "false"),
							  1, &argtype, &arg, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read pklimit's policies");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Datum		values[13];
		bool		nulls[13];

		heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
						  values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	pklimit_as_owner_end(&owner);
	return (Datum) 0;
}
