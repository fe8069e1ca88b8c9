/*-------------------------------------------------------------------------
 *
 * store.c
 *		The statements on platformkit_limits, run through SPI in whatever
 *		transaction is current and as whichever role is current.  The worker
 *		(apply.c, purge.c) decides which transaction that is and runs them as
 *		the table's owner; what a call decides is limit.c's, and so is the
 *		folded upsert's SET list, which applies the same rules in SQL; the
 *		table they run on is found and checked by table.c.  This file knows
 *		only the table, and must not begin, end or wait on anything itself.
 *
 * Every statement names its schema, functions and operators explicitly, so
 * the search_path in force cannot redirect it, and touches one key, so the
 * table stays distributable by key (but for the purge).  The statements come
 * in three sets: for the table of 0.1.0, of 0.2.0 (which has blocked_until)
 * and of 0.3.0 (which keeps every algorithm's state); one library serves a
 * database at any version, and the set follows the table it finds, so an
 * ALTER EXTENSION pklimit UPDATE takes effect at the worker's next
 * transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "lease.h"
#include "store.h"

/* True only while this file's statements run: the RLS predicate. */
bool		pklimit_in_system = false;

/*
 * One statement: its SQL (%1$s stands for the table, or one of its shards,
 * and %2$s, in the hit, for limit.c's rules), arguments and plan.
 */
typedef struct Statement
{
	const char *sql;
	int			nargs;
	Oid			argtypes[12];
	bool		read_latest;	/* read the latest committed rows, whatever
								 * the transaction's snapshot */
	const char *rules;			/* the hit's SET list (limit.c) */
	int			cursor_options; /* CURSOR_OPT_CUSTOM_PLAN: planned each run */
	SPIPlanPtr	plan;			/* prepared once per schema, kept */
	const char *relname;		/* its table: NULL, platformkit_limits */
} Statement;

typedef enum StatementId
{
	STMT_HIT,
	STMT_READ,
	STMT_PEEK,
	STMT_WRITE,
	STMT_CREATE,
	STMT_FORGET,
	STMT_PURGE,
	STMT_PURGE_BY_KEY,
	STMT_FLUSH,
	STMT_FLUSH_IF_SYNCED,
	STMT_READ_MANY,
	STMT_LEASE_READ,
	STMT_LEASE_WRITE,
	STMT_LEASE_CREATE,
	STMT_LEASE_DELETE,
	STMT_LEASE_PURGE,
	NUM_STATEMENTS
} StatementId;

/*
 * The table's versions: 1, the table of 0.1.0; 2, the table of 0.2.0; 3,
 * the table of 0.3.0.
 */
#define NUM_VERSIONS 3

/*
 * The row's columns as the reads return them, in order: a table before
 * 0.3.0 keeps fixed windows only.  Last, the row version's xmin, which
 * every write changes (the memory path's flush on Citus writes only over
 * the version its node last had).
 */
#define ROW_COLUMNS(blocked_until) \
	"l.count, l.window_start, l.window_end, l.updated_at, " blocked_until \
	", 'fixed'::pg_catalog.text, NULL::pg_catalog.int8, NULL::pg_catalog.int8," \
	" NULL::pg_catalog.timestamptz, l.xmin"
#define ROW_COLUMNS_3 \
	"l.count, l.window_start, l.window_end, l.updated_at, l.blocked_until," \
	" l.algorithm, l.max_count, l.previous_count, l.expires_at, l.xmin"

/*
 * The hit: the folded upsert, one INSERT ... ON CONFLICT DO UPDATE of $4
 * events at the event's time $5, read from the server clock just before the
 * statement runs (on one server pklimit's worker is the table's only writer;
 * on Citus each node's worker writes with its own clock, and the upsert is
 * as atomic there).  A new key's row counts them in the call's window ($2,
 * $3); the SET list, the rules of a limit, is limit.c's.
 */
#define HIT_SQL(blocked_until) \
	"INSERT INTO %1$s AS l" \
	" (key, window_start, window_end, count, updated_at)" \
	" VALUES ($1, $2, $3, $4, $5)" \
	" ON CONFLICT (key) DO UPDATE SET%2$s" \
	" RETURNING " ROW_COLUMNS(blocked_until)
#define HIT_SQL_3 \
	"INSERT INTO %1$s AS l" \
	" (key, window_start, window_end, count, updated_at, max_count)" \
	" VALUES ($1, $2, $3, $4, $5, $6)" \
	" ON CONFLICT (key) DO UPDATE SET%2$s" \
	" RETURNING " ROW_COLUMNS_3

/*
 * The row of a key, locked for the rest of the transaction (a call decided
 * in C), or as last committed, not locked (a peek).
 */
#define READ_SQL(columns, lock) \
	"SELECT " columns " FROM %1$s l" \
	" WHERE l.key OPERATOR(pg_catalog.=) $1" lock

/*
 * The row of a key as a call decided it, written whole: over the row it read
 * and locked, or as a new row where it read none.  A new row inserts nothing
 * if another writer created the key since (another node's worker, on
 * Citus).
 */
#define INSERT_ROW_SQL \
	"INSERT INTO %1$s AS l" \
	" (key, window_start, window_end, count, updated_at, blocked_until)" \
	" VALUES ($1, $2, $3, $4, $5, $6)"
#define WRITE_SQL INSERT_ROW_SQL \
	" ON CONFLICT (key) DO UPDATE SET window_start = $2, window_end = $3," \
	" count = $4, updated_at = $5, blocked_until = $6"
#define CREATE_SQL INSERT_ROW_SQL " ON CONFLICT (key) DO NOTHING"

/*
 * The same on the table of 0.3.0, with every algorithm's columns; the row
 * read and locked is written by an UPDATE, which finds it by its key.
 */
#define WRITE_SQL_3 \
	"UPDATE %1$s AS l SET window_start = $2, window_end = $3," \
	" count = $4, updated_at = $5, blocked_until = $6, algorithm = $7," \
	" max_count = $8, previous_count = $9, expires_at = $10" \
	" WHERE l.key OPERATOR(pg_catalog.=) $1"
#define CREATE_SQL_3 \
	"INSERT INTO %1$s AS l" \
	" (key, window_start, window_end, count, updated_at, blocked_until," \
	"  algorithm, max_count, previous_count, expires_at)" \
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)" \
	" ON CONFLICT (key) DO NOTHING"

/*
 * One batch of the purge, in the order of the moment each row stopped
 * counting (its end: the end of its window, or of its block if later, on
 * the table of 0.2.0), from the end where the previous batch stopped, so no
 * batch walks again over the index entries of rows already deleted.  The
 * rows are found in the purge's index on that end, every one it walks
 * deletable (so rows blocked for long never slow a batch down), and deleted
 * by their ctid alone, so the delete is a TID scan whatever the table's
 * statistics say (a condition on the end there would let stale statistics
 * pick a walk over every expired row instead).  A row changed since it was
 * found has another ctid and is left alone.
 */
#define PURGE_SQL(end_e, end_l) \
	"WITH d AS (DELETE FROM %1$s l" \
	" WHERE l.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(" \
	"  SELECT e.ctid FROM %1$s e" \
	"  WHERE " end_e " OPERATOR(pg_catalog.<) $1" \
	"  AND " end_e " OPERATOR(pg_catalog.>=) $3" \
	"  ORDER BY " end_e " LIMIT $2))" \
	" RETURNING " end_l " AS ends)" \
	" SELECT pg_catalog.count(*), pg_catalog.max(d.ends) FROM d"
#define WINDOW_END_E "e.window_end"
#define WINDOW_END_L "l.window_end"
/* the purge index's expression, as the install script writes it */
#define ROW_END_E "GREATEST(e.window_end, e.blocked_until)"
#define ROW_END_L "GREATEST(l.window_end, l.blocked_until)"
#define ROW_END_3_E "GREATEST(e.window_end, e.blocked_until, e.expires_at)"
#define ROW_END_3_L "GREATEST(l.window_end, l.blocked_until, l.expires_at)"

/*
 * The purge of a Citus table: a ctid names a row only within one shard (one
 * replica), so the rows are deleted by key, and only while still expired.
 */
#define PURGE_BY_KEY_SQL(end_e, end_l) \
	"WITH d AS (DELETE FROM %1$s l" \
	" WHERE l.key OPERATOR(pg_catalog.=) ANY (ARRAY(" \
	"  SELECT e.key FROM %1$s e" \
	"  WHERE " end_e " OPERATOR(pg_catalog.<) $1" \
	"  AND " end_e " OPERATOR(pg_catalog.>=) $3" \
	"  ORDER BY " end_e " LIMIT $2))" \
	" AND " end_l " OPERATOR(pg_catalog.<) $1" \
	" RETURNING " end_l " AS ends)" \
	" SELECT pg_catalog.count(*), pg_catalog.max(d.ends) FROM d"
/*
 * The memory path's flush (memory/flush.c): the states of many keys
 * written whole, as one statement over arrays, on the table of 0.3.0 only.
 * On Citus it runs on one shard of this node at a time, so this is the one
 * statement that touches many keys but the purge.
 */
#define FLUSH_SQL \
	"INSERT INTO %1$s AS l" \
	" (key, window_start, window_end, count, updated_at, blocked_until," \
	"  algorithm, max_count, previous_count, expires_at)" \
	" SELECT * FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)," \
	"  pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5)," \
	"  pg_catalog.unnest($6), pg_catalog.unnest($7), pg_catalog.unnest($8)," \
	"  pg_catalog.unnest($9), pg_catalog.unnest($10))" \
	" ON CONFLICT (key) DO UPDATE SET window_start = EXCLUDED.window_start," \
	" window_end = EXCLUDED.window_end, count = EXCLUDED.count," \
	" updated_at = EXCLUDED.updated_at, blocked_until = EXCLUDED.blocked_until," \
	" algorithm = EXCLUDED.algorithm, max_count = EXCLUDED.max_count," \
	" previous_count = EXCLUDED.previous_count, expires_at = EXCLUDED.expires_at"
/*
 * The flush on Citus, on one shard of this node: each row written only if
 * it is still the version this node last read or wrote ($11: it had a row
 * then, $12: that version's xmin), since a call made on another node may have
 * written it through Citus meanwhile, which the whole state in memory must
 * not overwrite.  Returns the places (from 1) of the rows written.
 */
#define FLUSH_IF_SYNCED_SQL \
	"WITH x AS (SELECT * FROM ROWS FROM (pg_catalog.unnest($1)," \
	"  pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4)," \
	"  pg_catalog.unnest($5), pg_catalog.unnest($6), pg_catalog.unnest($7)," \
	"  pg_catalog.unnest($8), pg_catalog.unnest($9), pg_catalog.unnest($10)," \
	"  pg_catalog.unnest($11), pg_catalog.unnest($12))" \
	"  WITH ORDINALITY AS x(key, window_start, window_end," \
	"  count, updated_at, blocked_until, algorithm, max_count, previous_count," \
	"  expires_at, synced, synced_xmin, i))," \
	" u AS (UPDATE %1$s l SET window_start = x.window_start," \
	"  window_end = x.window_end, count = x.count, updated_at = x.updated_at," \
	"  blocked_until = x.blocked_until, algorithm = x.algorithm," \
	"  max_count = x.max_count, previous_count = x.previous_count," \
	"  expires_at = x.expires_at FROM x" \
	"  WHERE l.key OPERATOR(pg_catalog.=) x.key AND x.synced" \
	"  AND l.xmin OPERATOR(pg_catalog.=) x.synced_xmin RETURNING x.i)," \
	" n AS (INSERT INTO %1$s AS l (key, window_start, window_end, count," \
	"  updated_at, blocked_until, algorithm, max_count, previous_count, expires_at)" \
	"  SELECT x.key, x.window_start, x.window_end, x.count, x.updated_at," \
	"  x.blocked_until, x.algorithm, x.max_count, x.previous_count, x.expires_at" \
	"  FROM x WHERE NOT x.synced ON CONFLICT (key) DO NOTHING RETURNING l.key)" \
	" SELECT u.i FROM u UNION ALL" \
	" SELECT x.i FROM x, n WHERE x.key OPERATOR(pg_catalog.=) n.key"

/*
 * The memory path's read-in (memory/readin.c): the rows of many keys as
 * last committed, one statement over an array, on the table of 0.3.0 only
 * (and never on Citus: there a key is read in after a call applied on its
 * shard); each row's key last.  Planned for
 * each run (a custom plan): a plan kept from when the table was empty (a
 * TRUNCATE invalidates it) scans the whole table for every batch as it
 * grows, until autovacuum's ANALYZE comes by.
 */
#define READ_MANY_SQL \
	"SELECT " ROW_COLUMNS_3 ", l.key FROM %1$s l" \
	" WHERE l.key OPERATOR(pg_catalog.=) ANY ($1)"
/*
 * A key's leases (lease.c), in platformkit_leases, on the table of 0.4.0:
 * read and locked, written whole over the row read, created (nothing if
 * another node's worker created it since: the call then reads and locks
 * that row), deleted when its last lease ends.  The purge deletes by key
 * (a ctid names a row only within one shard on Citus) the rows whose last
 * lease ended before its cutoff, and only while still so.
 */
#define LEASE_READ_SQL \
	"SELECT l.tokens, l.acquired_at, l.expires_at, l.leases, l.max_concurrent" \
	" FROM %1$s l WHERE l.key OPERATOR(pg_catalog.=) $1 FOR UPDATE OF l"
#define LEASE_WRITE_SQL \
	"UPDATE %1$s AS l SET tokens = $2, acquired_at = $3, expires_at = $4," \
	" leases = $5, max_concurrent = $6, updated_at = $7, held_until = $8" \
	" WHERE l.key OPERATOR(pg_catalog.=) $1"
#define LEASE_CREATE_SQL \
	"INSERT INTO %1$s AS l (key, tokens, acquired_at, expires_at, leases," \
	" max_concurrent, updated_at, held_until)" \
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8)" \
	" ON CONFLICT (key) DO NOTHING RETURNING l.key"
#define LEASE_PURGE_SQL \
	"WITH d AS (DELETE FROM %1$s l" \
	" WHERE l.key OPERATOR(pg_catalog.=) ANY (ARRAY(" \
	"  SELECT e.key FROM %1$s e" \
	"  WHERE e.held_until OPERATOR(pg_catalog.<) $1" \
	"  ORDER BY e.held_until LIMIT $2))" \
	" AND l.held_until OPERATOR(pg_catalog.<) $1 RETURNING l.key)" \
	" SELECT pg_catalog.count(*) FROM d"
#define LEASE_ARGS {TEXTOID, UUIDARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, \
	INTERVALARRAYOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}

#define FLUSH_ARGS {TEXTARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, INT8ARRAYOID, \
	TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, TEXTARRAYOID, INT8ARRAYOID, INT8ARRAYOID, \
	TIMESTAMPTZARRAYOID}

#define FLUSH_IF_SYNCED_ARGS {TEXTARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, \
	INT8ARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, TEXTARRAYOID, INT8ARRAYOID, \
	INT8ARRAYOID, TIMESTAMPTZARRAYOID, BOOLARRAYOID, XIDARRAYOID}

#define PURGE_ARGS {TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID}

#define ROW_ARGS {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
#define ROW_ARGS_3 {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, \
	TEXTOID, INT8OID, INT8OID, TIMESTAMPTZOID}
#define HIT_ARGS_3 {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, INT8OID}

static Statement statements[NUM_VERSIONS][NUM_STATEMENTS] = {
	{
		[STMT_HIT] = {HIT_SQL("NULL::pg_catalog.timestamptz"), 5, ROW_ARGS, false,
		pklimit_hit_rules_no_block_sql},
		[STMT_READ] = {READ_SQL(ROW_COLUMNS("NULL::pg_catalog.timestamptz"), " FOR UPDATE OF l"), 1, {TEXTOID}, false},
		[STMT_PEEK] = {READ_SQL(ROW_COLUMNS("NULL::pg_catalog.timestamptz"), ""), 1, {TEXTOID}, true},
		/* no decided calls on the table of 0.1.0: only 0.2.0 makes them */
		[STMT_WRITE] = {NULL},
		[STMT_FORGET] = {"DELETE FROM %1$s l WHERE l.key OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}, false},
		[STMT_PURGE] = {PURGE_SQL(WINDOW_END_E, WINDOW_END_L), 3, PURGE_ARGS, false},
		[STMT_PURGE_BY_KEY] = {PURGE_BY_KEY_SQL(WINDOW_END_E, WINDOW_END_L), 3,
		PURGE_ARGS, false},
	},
	{
		[STMT_HIT] = {HIT_SQL("l.blocked_until"), 5, ROW_ARGS, false,
		pklimit_hit_rules_sql},
		[STMT_READ] = {READ_SQL(ROW_COLUMNS("l.blocked_until"), " FOR UPDATE OF l"), 1, {TEXTOID}, false},
		[STMT_PEEK] = {READ_SQL(ROW_COLUMNS("l.blocked_until"), ""), 1, {TEXTOID}, true},
		[STMT_WRITE] = {WRITE_SQL, 6, ROW_ARGS, false},
		[STMT_CREATE] = {CREATE_SQL, 6, ROW_ARGS, false},
		[STMT_FORGET] = {"DELETE FROM %1$s l WHERE l.key OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}, false},
		[STMT_PURGE] = {PURGE_SQL(ROW_END_E, ROW_END_L), 3, PURGE_ARGS, false},
		[STMT_PURGE_BY_KEY] = {PURGE_BY_KEY_SQL(ROW_END_E, ROW_END_L), 3,
		PURGE_ARGS, false},
	},
	{
		[STMT_HIT] = {HIT_SQL_3, 6, HIT_ARGS_3, false, pklimit_hit_rules_fixed_sql},
		[STMT_READ] = {READ_SQL(ROW_COLUMNS_3, " FOR UPDATE OF l"), 1, {TEXTOID}, false},
		[STMT_PEEK] = {READ_SQL(ROW_COLUMNS_3, ""), 1, {TEXTOID}, true},
		[STMT_WRITE] = {WRITE_SQL_3, 10, ROW_ARGS_3, false},
		[STMT_CREATE] = {CREATE_SQL_3, 10, ROW_ARGS_3, false},
		[STMT_FORGET] = {"DELETE FROM %1$s l WHERE l.key OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}, false},
		[STMT_PURGE] = {PURGE_SQL(ROW_END_3_E, ROW_END_3_L), 3, PURGE_ARGS, false},
		[STMT_PURGE_BY_KEY] = {PURGE_BY_KEY_SQL(ROW_END_3_E, ROW_END_3_L), 3,
		PURGE_ARGS, false},
		[STMT_FLUSH] = {FLUSH_SQL, 10, FLUSH_ARGS, false},
		[STMT_FLUSH_IF_SYNCED] = {FLUSH_IF_SYNCED_SQL, 12, FLUSH_IF_SYNCED_ARGS, false},
		[STMT_READ_MANY] = {READ_MANY_SQL, 1, {TEXTARRAYOID}, false, NULL,
		CURSOR_OPT_CUSTOM_PLAN},
		[STMT_LEASE_READ] = {LEASE_READ_SQL, 1, {TEXTOID},.relname = PKLIMIT_LEASE_TABLE},
		[STMT_LEASE_WRITE] = {LEASE_WRITE_SQL, 8, LEASE_ARGS,.relname = PKLIMIT_LEASE_TABLE},
		[STMT_LEASE_CREATE] = {LEASE_CREATE_SQL, 8, LEASE_ARGS,.relname = PKLIMIT_LEASE_TABLE},
		[STMT_LEASE_DELETE] = {"DELETE FROM %1$s l WHERE l.key OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID},.relname = PKLIMIT_LEASE_TABLE},
		[STMT_LEASE_PURGE] = {LEASE_PURGE_SQL, 2, {TIMESTAMPTZOID, INT8OID},
		.relname = PKLIMIT_LEASE_TABLE},
	},
};

/*
 * The table the kept plans were prepared for: schema by OID and name, and
 * whether that name is known to be current (no schema has changed since it
 * was read: a catalog invalidation clears it), so that it is not read again
 * for every statement.
 */
static Oid	plans_nspid = InvalidOid;
static char plans_nspname[NAMEDATALEN];
static bool plans_nspname_current = false;

static void
namespace_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	plans_nspname_current = false;
}

/*
 * The kept plans of the statements on one shard of a table Citus
 * distributes by key, which the worker writes directly where the shard is
 * on its node (citus.c), under the name they were prepared for.
 */
typedef struct ShardPlans
{
	int64		shardid;		/* the hash key */
	char		name[4 * NAMEDATALEN + 8];
	SPIPlanPtr	plans[NUM_VERSIONS][NUM_STATEMENTS];
} ShardPlans;

static HTAB *shard_plans = NULL;

/* Prepare one statement on target (a quoted, qualified table) and keep it. */
static SPIPlanPtr
prepare(Statement *stmt, const char *target)
{
	char	   *sql = psprintf(stmt->sql, target, stmt->rules ? stmt->rules : "");
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, stmt->nargs, stmt->argtypes,
										  stmt->cursor_options);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for pklimit statement: %s",
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	pfree(sql);
	return plan;
}

/* Free every kept plan of every shard. */
static void
free_shard_plans(void)
{
	HASH_SEQ_STATUS status;
	ShardPlans *entry;

	if (shard_plans == NULL)
		return;
	hash_seq_init(&status, shard_plans);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		for (int v = 0; v < NUM_VERSIONS; v++)
			for (int i = 0; i < NUM_STATEMENTS; i++)
				if (entry->plans[v][i])
					SPI_freeplan(entry->plans[v][i]);
		(void) hash_search(shard_plans, &entry->shardid, HASH_REMOVE, NULL);
	}
}

/* The kept plan of statement id on shard, prepared on first use. */
static SPIPlanPtr
get_shard_plan(const PklimitTable *table, StatementId id,
			   const PklimitShard *shard)
{
	Statement  *stmt = &statements[table->version - 1][id];
	ShardPlans *entry;
	bool		found;

	if (shard_plans == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(int64);
		ctl.entrysize = sizeof(ShardPlans);
		shard_plans = hash_create("pklimit shard plans", 64, &ctl,
								  HASH_ELEM | HASH_BLOBS);
	}
	entry = hash_search(shard_plans, &shard->id, HASH_ENTER, &found);
	if (!found || strcmp(entry->name, shard->name) != 0)
	{
		if (found)
			for (int v = 0; v < NUM_VERSIONS; v++)
				for (int i = 0; i < NUM_STATEMENTS; i++)
					if (entry->plans[v][i])
						SPI_freeplan(entry->plans[v][i]);
		memset(entry->plans, 0, sizeof(entry->plans));
		strlcpy(entry->name, shard->name, sizeof(entry->name));
	}
	if (entry->plans[table->version - 1][id] == NULL)
		entry->plans[table->version - 1][id] = prepare(stmt, shard->name);
	return entry->plans[table->version - 1][id];
}

/*
 * The kept plan of one statement, prepared on first use for the table, or
 * for one of its shards that this transaction holds on its node.  The
 * statements name the
 * schema, so they are prepared again whenever the schema's name changes: a
 * renamed extension schema must never leave them pointing at a table
 * someone else created under the old name.  The name is read again only
 * after a schema changed.
 */
static SPIPlanPtr
get_plan(const PklimitTable *table, StatementId id, const PklimitShard *shard)
{
	static bool callback_registered = false;
	Statement  *stmt = &statements[table->version - 1][id];

	if (stmt->sql == NULL)
		elog(ERROR, "pklimit: statement %d has no version for table version %d",
			 id, table->version);
	if (!callback_registered)
	{
		CacheRegisterSyscacheCallback(NAMESPACEOID, namespace_changed, (Datum) 0);
		callback_registered = true;
	}
	if (plans_nspid != table->nspid || !plans_nspname_current)
	{
		char	   *nspname = get_namespace_name(table->nspid);

		if (nspname == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("pklimit table \"platformkit_limits\" does not exist")));
		if (plans_nspid != table->nspid || strcmp(plans_nspname, nspname) != 0)
		{
			for (int v = 0; v < NUM_VERSIONS; v++)
				for (int i = 0; i < NUM_STATEMENTS; i++)
				{
					if (statements[v][i].plan)
						SPI_freeplan(statements[v][i].plan);
					statements[v][i].plan = NULL;
				}
			free_shard_plans();
			plans_nspid = table->nspid;
			strlcpy(plans_nspname, nspname, NAMEDATALEN);
		}
		plans_nspname_current = true;
	}

	if (shard != NULL)
		return get_shard_plan(table, id, shard);
	if (stmt->plan == NULL)
		stmt->plan = prepare(stmt,
							 psprintf("%s.%s", quote_identifier(plans_nspname),
									  stmt->relname ? stmt->relname :
									  "platformkit_limits"));
	return stmt->plan;
}

/* Run one statement with pklimit_in_system set; returns SPI's result code. */
static int
run_on(const PklimitTable *table, StatementId id, const PklimitShard *shard,
	   Datum *values, const char *nulls)
{
	SPIPlanPtr	plan = get_plan(table, id, shard);
	int			rc;

	pklimit_in_system = true;
	PG_TRY();
	{
		if (statements[table->version - 1][id].read_latest)
			rc = SPI_execute_snapshot(plan, values, nulls, GetLatestSnapshot(),
									  InvalidSnapshot, false, false, 1);
		else
			rc = SPI_execute_plan(plan, values, nulls, false, 0);
	}
	PG_FINALLY();
	{
		pklimit_in_system = false;
	}
	PG_END_TRY();
	return rc;
}

/*
 * Run one statement on the table, or, for a statement on one key (its first
 * argument) in a unit that runs on this node alone (table->direct), on the
 * key's shard.
 */
static int
run(const PklimitTable *table, StatementId id, Datum *values, const char *nulls)
{
	const PklimitShard *shard = NULL;

	if (table->direct && statements[table->version - 1][id].relname == NULL &&
		statements[table->version - 1][id].argtypes[0] == TEXTOID)
	{
		char	   *key = TextDatumGetCString(values[0]);

		shard = pklimit_shard_usable(table, key);
		pfree(key);
	}
	return run_on(table, id, shard, values, nulls);
}

/* Column col of result row r, or 0 for NULL. */
static Datum
get_col(int r, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc,
								  col, &isnull);

	return isnull ? (Datum) 0 : d;
}

/* The row result row r of a hit or a read gives (its first 10 columns). */
static void
get_row_at(int r, PklimitRow *row)
{
	bool		isnull;
	Datum		algorithm = SPI_getbinval(SPI_tuptable->vals[r],
										  SPI_tuptable->tupdesc, 6, &isnull);
	char	   *name = isnull ? pstrdup("") : TextDatumGetCString(algorithm);

	row->exists = true;
	row->count = DatumGetInt64(get_col(r, 1));
	row->window_start = DatumGetTimestampTz(get_col(r, 2));
	row->window_end = DatumGetTimestampTz(get_col(r, 3));
	row->updated_at = DatumGetTimestampTz(get_col(r, 4));
	row->blocked_until = DatumGetTimestampTz(get_col(r, 5));
	row->max_count = DatumGetInt64(get_col(r, 7));
	(void) SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 7,
						 &row->no_max_count);
	row->previous_count = DatumGetInt64(get_col(r, 8));
	row->expires_at = DatumGetTimestampTz(get_col(r, 9));
	row->xmin = DatumGetTransactionId(get_col(r, 10));
	if (!pklimit_algorithm_of_name(name, &row->algorithm))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pklimit row has unknown algorithm \"%s\"", name),
				 errhint("Only pklimit writes platformkit_limits; delete the row with pklimit_forget(key).")));
	pfree(name);
}

/* An array of n values of type, with their nulls, as a Datum. */
static Datum
array_datum(Datum *values, bool *nulls, int n, Oid type)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			dims[1] = {n};
	int			lbs[1] = {1};

	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_md_array(values, nulls, 1, dims, lbs, type,
											  typlen, typbyval, typalign));
}

/* The row the single result row of a hit or a read gives. */
static void
get_row(PklimitRow *row)
{
	get_row_at(0, row);
}

/*
 * Record events on stored_key at now, in the window the call starts would
 * start if the key's has closed, max_count the last call's; *row is the row
 * after.  The caller has connected to SPI.
 */
void
pklimit_store_hit(const PklimitTable *table, const char *stored_key,
				  const PklimitCall *starts, int64 max_count, int64 events,
				  TimestampTz now, PklimitRow *row)
{
	PklimitRow	window;
	Datum		values[6];
	int			rc;

	pklimit_new_window(now, starts, &window);
	values[0] = CStringGetTextDatum(stored_key);
	values[1] = TimestampTzGetDatum(window.window_start);
	values[2] = TimestampTzGetDatum(window.window_end);
	values[3] = Int64GetDatum(events);
	values[4] = TimestampTzGetDatum(now);
	values[5] = Int64GetDatum(max_count);
	rc = run(table, STMT_HIT, values, NULL);
	if (rc != SPI_OK_INSERT_RETURNING || SPI_processed != 1)
		elog(ERROR, "pklimit: recording an event returned %d", rc);
	get_row(row);
	SPI_freetuptable(SPI_tuptable);
}

/*
 * The row of stored_key, locked for the rest of the transaction (lock), or
 * as last committed.  Returns false, and row->exists false, if there is
 * none.
 */
bool
pklimit_store_read(const PklimitTable *table, const char *stored_key,
				   bool lock, PklimitRow *row)
{
	Datum		values[1];
	int			rc;

	memset(row, 0, sizeof(*row));
	values[0] = CStringGetTextDatum(stored_key);
	rc = run(table, lock ? STMT_READ : STMT_PEEK, values, NULL);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "pklimit: reading a row returned %d", rc);
	if (SPI_processed == 1)
		get_row(row);
	SPI_freetuptable(SPI_tuptable);
	return row->exists;
}

/*
 * The rows of the n stored keys as last committed, into rows[] in their
 * order (exists false for a key without one), in one statement, on the
 * table of 0.3.0.
 */
void
pklimit_store_read_many(const PklimitTable *table, const char *const *keys,
						int n, PklimitRow *rows)
{
	Datum	   *elements = palloc(sizeof(Datum) * n);
	bool	   *nulls = palloc0(sizeof(bool) * n);
	Datum		values[1];
	int			rc;

	if (table->version < 3)
		elog(ERROR, "pklimit: a read of many keys on the table of version %d",
			 table->version);
	for (int i = 0; i < n; i++)
	{
		elements[i] = CStringGetTextDatum(keys[i]);
		memset(&rows[i], 0, sizeof(PklimitRow));
	}
	values[0] = array_datum(elements, nulls, n, TEXTOID);
	rc = run(table, STMT_READ_MANY, values, NULL);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "pklimit: reading rows returned %d", rc);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		char	   *key = TextDatumGetCString(get_col(r, 11));

		for (int i = 0; i < n; i++)
			if (!rows[i].exists && strcmp(keys[i], key) == 0)
				get_row_at(r, &rows[i]);
		pfree(key);
	}
	SPI_freetuptable(SPI_tuptable);
}

/*
 * Write the row of stored_key as a call decided it, over the row it read
 * (existed) or as a new one.  A new row that another writer created since
 * the read is a serialization failure: the transaction is tried again, and
 * then reads and locks that row.
 */
void
pklimit_store_write(const PklimitTable *table, const char *stored_key,
					const PklimitRow *row, bool existed)
{
	Datum		values[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int			rc;

	if (table->version < 3 && row->algorithm != PKLIMIT_FIXED)
		elog(ERROR, "pklimit: a %s state on the table of version %d",
			 pklimit_algorithm_name(row->algorithm), table->version);
	values[0] = CStringGetTextDatum(stored_key);
	values[1] = TimestampTzGetDatum(row->window_start);
	values[2] = TimestampTzGetDatum(row->window_end);
	values[3] = Int64GetDatum(row->count);
	values[4] = TimestampTzGetDatum(row->updated_at);
	values[5] = TimestampTzGetDatum(row->blocked_until);
	values[6] = CStringGetTextDatum(pklimit_algorithm_name(row->algorithm));
	values[7] = Int64GetDatum(row->max_count);
	values[8] = Int64GetDatum(row->previous_count);
	values[9] = TimestampTzGetDatum(row->expires_at);
	if (row->blocked_until == 0)
		nulls[5] = 'n';
	if (row->no_max_count)
		nulls[7] = 'n';
	if (row->algorithm != PKLIMIT_SLIDING)
		nulls[8] = nulls[9] = 'n';
	rc = run(table, existed ? STMT_WRITE : STMT_CREATE, values, nulls);
	if (rc != (existed && table->version >= 3 ? SPI_OK_UPDATE : SPI_OK_INSERT))
		elog(ERROR, "pklimit: writing a row returned %d", rc);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("pklimit key row was created by another transaction meanwhile")));
}

/*
 * Write the n rows (each with a state) of keys whole, as they are in memory,
 * in one statement (the memory path's flush): on the table, or on shard,
 * which holds every one of the keys and which this transaction holds on its
 * node.  With synced (on Citus), a row is written only if it is still the
 * version this node last had: synced[i], whether it had a row then,
 * synced_xmin[i] that version's xmin; written[i] says whether it was.
 */
void
pklimit_store_flush(const PklimitTable *table, const PklimitShard *shard,
					const char *const *keys, const PklimitRow *rows, int n,
					const bool *synced, const TransactionId *synced_xmin,
					bool *written)
{
	/* the element types of FLUSH_IF_SYNCED_ARGS, in its order */
	static const Oid types[] = {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT8OID, INT8OID,
	TIMESTAMPTZOID, BOOLOID, XIDOID};
	int			ncolumns = synced ? lengthof(types) : 10;
	Datum	   *columns[lengthof(types)];
	bool	   *column_nulls[lengthof(types)];
	Datum		values[lengthof(types)];
	int			rc;

	if (table->version < 3)
		elog(ERROR, "pklimit: a flush on the table of version %d",
			 table->version);
	for (int c = 0; c < ncolumns; c++)
	{
		columns[c] = palloc(sizeof(Datum) * n);
		column_nulls[c] = palloc0(sizeof(bool) * n);
	}
	for (int i = 0; i < n; i++)
	{
		const PklimitRow *row = &rows[i];

		columns[0][i] = CStringGetTextDatum(keys[i]);
		columns[1][i] = TimestampTzGetDatum(row->window_start);
		columns[2][i] = TimestampTzGetDatum(row->window_end);
		columns[3][i] = Int64GetDatum(row->count);
		columns[4][i] = TimestampTzGetDatum(row->updated_at);
		columns[5][i] = TimestampTzGetDatum(row->blocked_until);
		columns[6][i] = CStringGetTextDatum(pklimit_algorithm_name(row->algorithm));
		columns[7][i] = Int64GetDatum(row->max_count);
		columns[8][i] = Int64GetDatum(row->previous_count);
		columns[9][i] = TimestampTzGetDatum(row->expires_at);
		column_nulls[5][i] = (row->blocked_until == 0);
		column_nulls[7][i] = row->no_max_count;
		column_nulls[8][i] = column_nulls[9][i] =
			(row->algorithm != PKLIMIT_SLIDING);
		if (synced)
		{
			columns[10][i] = BoolGetDatum(synced[i]);
			columns[11][i] = TransactionIdGetDatum(synced_xmin[i]);
		}
	}
	for (int c = 0; c < ncolumns; c++)
		values[c] = array_datum(columns[c], column_nulls[c], n, types[c]);
	if (synced == NULL)
	{
		rc = run_on(table, STMT_FLUSH, shard, values, NULL);
		if (rc != SPI_OK_INSERT || SPI_processed != (uint64) n)
			elog(ERROR, "pklimit: a flush of %d rows returned %d, " UINT64_FORMAT " rows",
				 n, rc, SPI_processed);
	}
	else
	{
		rc = run_on(table, STMT_FLUSH_IF_SYNCED, shard, values, NULL);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "pklimit: a flush of %d rows returned %d", n, rc);
		memset(written, 0, sizeof(bool) * n);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			int64		i = DatumGetInt64(get_col(r, 1));

			if (i >= 1 && i <= n)
				written[i - 1] = true;
		}
		SPI_freetuptable(SPI_tuptable);
	}
	for (int c = 0; c < ncolumns; c++)
	{
		pfree(columns[c]);
		pfree(column_nulls[c]);
	}
}

/* Delete the row of stored_key; false if there was none. */
bool
pklimit_store_forget(const PklimitTable *table, const char *stored_key)
{
	Datum		values[1];
	int			rc;

	values[0] = CStringGetTextDatum(stored_key);
	rc = run(table, STMT_FORGET, values, NULL);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "pklimit: forgetting a key returned %d", rc);
	return SPI_processed > 0;
}

/*
 * Delete at most limit rows that stopped counting (window, or block) before
 * cutoff, from *from on; returns rows deleted and moves *from to the last
 * end deleted.
 */
int64
pklimit_store_purge(const PklimitTable *table, TimestampTz cutoff, int64 limit,
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
	rc = run(table, table->citus ? STMT_PURGE_BY_KEY : STMT_PURGE, values,
			 NULL);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "pklimit: purge returned %d", rc);
	deleted = DatumGetInt64(get_col(0, 1));
	last = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
						 &isnull);
	if (!isnull)
		*from = DatumGetTimestampTz(last);
	SPI_freetuptable(SPI_tuptable);
	return deleted;
}

/* The elements of array column col of result row 0, n of them, no NULL. */
static Datum *
lease_column(int col, Oid type, int *n)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								  col, &isnull);
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elements;
	bool	   *nulls;

	if (isnull)
		*n = -1;
	else
	{
		get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
		deconstruct_array(DatumGetArrayTypeP(d), type, typlen, typbyval,
						  typalign, &elements, &nulls, n);
		for (int i = 0; i < *n; i++)
			if (nulls[i])
				*n = -1;
	}
	if (*n < 0 || *n > PKLIMIT_LEASES_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pklimit's leases row has a column that is not pklimit's"),
				 errhint("Only pklimit writes platformkit_leases.")));
	return elements;
}

/*
 * The leases of stored_key, locked for the rest of the transaction.
 * Returns false, and row->exists false, if it has no row.
 */
bool
pklimit_store_lease_read(const PklimitTable *table, const char *stored_key,
						 PklimitLeaseRow *row)
{
	Datum		values[1];
	int			rc;

	(void) pklimit_table_leases(table, false);
	row->exists = false;
	row->n = 0;
	row->max_concurrent = 0;
	values[0] = CStringGetTextDatum(stored_key);
	rc = run(table, STMT_LEASE_READ, values, NULL);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "pklimit: reading leases returned %d", rc);
	if (SPI_processed == 1)
	{
		int			n[4];
		Datum	   *tokens = lease_column(1, UUIDOID, &n[0]);
		Datum	   *acquired = lease_column(2, TIMESTAMPTZOID, &n[1]);
		Datum	   *expires = lease_column(3, TIMESTAMPTZOID, &n[2]);
		Datum	   *leases = lease_column(4, INTERVALOID, &n[3]);

		if (n[1] != n[0] || n[2] != n[0] || n[3] != n[0])
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("pklimit's leases row has arrays of different lengths"),
					 errhint("Only pklimit writes platformkit_leases.")));
		row->exists = true;
		row->n = n[0];
		row->max_concurrent = DatumGetInt64(get_col(0, 5));
		for (int i = 0; i < row->n; i++)
		{
			PklimitLease *l = &row->leases[i];
			Interval   *lease = DatumGetIntervalP(leases[i]);

			l->token = *DatumGetUUIDP(tokens[i]);
			l->acquired_at = DatumGetTimestampTz(acquired[i]);
			l->expires_at = DatumGetTimestampTz(expires[i]);
			l->lease_usec = lease->time + lease->day * USECS_PER_DAY;
		}
	}
	SPI_freetuptable(SPI_tuptable);
	return row->exists;
}

/*
 * Write the leases of stored_key as a call left them, at now: over the row
 * read, as a new row, or, with no lease left, by deleting it.  Returns
 * false if a new row met one another writer created since the read
 * (nothing written).
 */
bool
pklimit_store_lease_write(const PklimitTable *table, const char *stored_key,
						  const PklimitLeaseRow *row, TimestampTz now)
{
	Datum		values[8];
	Datum	   *tokens;
	Datum	   *acquired;
	Datum	   *expires;
	Datum	   *leases;
	bool	   *nulls;
	int			rc;

	values[0] = CStringGetTextDatum(stored_key);
	if (row->n == 0)
	{
		if (row->exists &&
			(rc = run(table, STMT_LEASE_DELETE, values, NULL)) != SPI_OK_DELETE)
			elog(ERROR, "pklimit: deleting leases returned %d", rc);
		return true;
	}
	tokens = palloc(sizeof(Datum) * row->n);
	acquired = palloc(sizeof(Datum) * row->n);
	expires = palloc(sizeof(Datum) * row->n);
	leases = palloc(sizeof(Datum) * row->n);
	nulls = palloc0(sizeof(bool) * row->n);
	for (int i = 0; i < row->n; i++)
	{
		const PklimitLease *l = &row->leases[i];
		Interval   *lease = palloc0(sizeof(Interval));

		lease->time = l->lease_usec;
		tokens[i] = UUIDPGetDatum(&l->token);
		acquired[i] = TimestampTzGetDatum(l->acquired_at);
		expires[i] = TimestampTzGetDatum(l->expires_at);
		leases[i] = IntervalPGetDatum(lease);
	}
	values[1] = array_datum(tokens, nulls, row->n, UUIDOID);
	values[2] = array_datum(acquired, nulls, row->n, TIMESTAMPTZOID);
	values[3] = array_datum(expires, nulls, row->n, TIMESTAMPTZOID);
	values[4] = array_datum(leases, nulls, row->n, INTERVALOID);
	values[5] = Int64GetDatum(row->max_concurrent);
	values[6] = TimestampTzGetDatum(now);
	values[7] = TimestampTzGetDatum(pklimit_lease_held_until(row));
	if (row->exists)
	{
		rc = run(table, STMT_LEASE_WRITE, values, NULL);
		if (rc != SPI_OK_UPDATE || SPI_processed != 1)
			elog(ERROR, "pklimit: writing leases returned %d", rc);
		return true;
	}
	rc = run(table, STMT_LEASE_CREATE, values, NULL);
	if (rc != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "pklimit: creating leases returned %d", rc);
	return SPI_processed == 1;
}

/*
 * One batch of the purge of leases: at most limit rows whose last lease
 * ended before cutoff deleted.  Returns the rows deleted (0 in a database
 * at 0.3.0, which has no leases).
 */
int64
pklimit_store_lease_purge(const PklimitTable *table, TimestampTz cutoff,
						  int64 limit)
{
	Datum		values[2];
	int			rc;
	int64		deleted;

	if (limit <= 0 || !OidIsValid(pklimit_table_leases(table, true)))
		return 0;
	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = Int64GetDatum(limit);
	rc = run(table, STMT_LEASE_PURGE, values, NULL);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "pklimit: purge of leases returned %d", rc);
	deleted = DatumGetInt64(get_col(0, 1));
	SPI_freetuptable(SPI_tuptable);
	return deleted;
}
