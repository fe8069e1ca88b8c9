/* pklimit--0.3.0--0.4.0.sql: update script from pklimit 0.3.0 to 0.4.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pklimit UPDATE TO '0.4.0'" to load this file. \quit

--@include guard.sql

-- 0.4.0: the fixed window's anchor (docs/algorithms.md): 'epoch', windows
-- aligned to the Unix epoch as before, or 'first', a window that starts at
-- the event that finds none open.  pklimit_allow, pklimit_check,
-- pklimit_check_all and pklimit_allow_all take it as their last parameter,
-- so they are replaced (their C functions read it when it is there, and
-- serve databases still at 0.3.0 too).  pklimit_memory_stats() gains the
-- memory table's hits, misses and admissions refused (docs/memory.md,
-- "Sizing"), as columns at its end, so it is replaced too; the view
-- pklimit_stats keeps its columns.
SELECT pg_catalog.set_config('pklimit_update.replaced',
		'@extschema@.pklimit_memory_stats();'
		'@extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);'
		'@extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);'
		'@extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);'
		'@extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool)',
		true),
	   pg_catalog.set_config('pklimit_update.privileges_from',
		'pklimit_count=@extschema@.pklimit_count(pg_catalog.text);'
		'pklimit_forget=@extschema@.pklimit_forget(pg_catalog.text);'
		'pklimit_decrement=@extschema@.pklimit_decrement(pg_catalog.text, pg_catalog.int8, pg_catalog.bool);'
		'pklimit_policy_stats=@extschema@.pklimit_stats();'
		'pklimit_acquire=@extschema@.pklimit_allow(pg_catalog.text);'
		'pklimit_acquire_check=@extschema@.pklimit_allow(pg_catalog.text);'
		'pklimit_release=@extschema@.pklimit_forget(pg_catalog.text);'
		'pklimit_renew=@extschema@.pklimit_forget(pg_catalog.text);'
		'pklimit_leases=@extschema@.pklimit_forget(pg_catalog.text)',
		true);

--@include replace_begin.sql

-- The view pklimit_stats reads pklimit_memory_stats(): it reads a stand-in
-- while the function is replaced, so that it, its grants and the objects of
-- users that depend on it stay.
CREATE FUNCTION @extschema@.pklimit_memory_stats_0_4(
	OUT dbid pg_catalog.oid, OUT memory_calls pg_catalog.int8,
	OUT memory_reads pg_catalog.int8, OUT memory_fallbacks pg_catalog.int8,
	OUT memory_evictions pg_catalog.int8, OUT flushes pg_catalog.int8,
	OUT rows_flushed pg_catalog.int8, OUT memory_keys pg_catalog.int8,
	OUT flush_lag_ms pg_catalog.float8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_memory_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE OR REPLACE VIEW @extschema@.pklimit_stats AS
	SELECT s.*, m.memory_calls, m.memory_reads, m.memory_fallbacks,
		   m.memory_evictions, m.flushes, m.rows_flushed, m.memory_keys,
		   m.flush_lag_ms
	  FROM @extschema@.pklimit_stats() s
	  LEFT JOIN @extschema@.pklimit_memory_stats_0_4() m
		ON m.dbid OPERATOR(pg_catalog.=) s.dbid;

DROP FUNCTION @extschema@.pklimit_memory_stats();
DROP FUNCTION @extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);
DROP FUNCTION @extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);
DROP FUNCTION @extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);
DROP FUNCTION @extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);

CREATE FUNCTION @extschema@.pklimit_allow(key pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval,
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true, anchor pg_catalog.text DEFAULT 'epoch',
	time_zone pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool, pg_catalog.text, pg_catalog.text) IS
'Records cost events (default 1) for key; true if the key is not blocked and its limit of max_count per window allows them, as algorithm counts: fixed (default), gcra or sliding. record_refused => false: a refused call records nothing. block: a refusal blocks the key that long. durable => false: decided in shared memory and written to the table within pklimit.flush_interval (a crash may lose the last of them). anchor: where a fixed window starts, epoch (default: aligned to the Unix epoch) or first (at the event that finds no window open). time_zone: a calendar window of the fixed algorithm, from local midnight in that zone, with window ''1 day'', ''7 days'' (from Monday), ''1 month'' or ''1 year''.';

CREATE FUNCTION @extschema@.pklimit_check(key pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval,
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true, anchor pg_catalog.text DEFAULT 'epoch',
	time_zone pg_catalog.text DEFAULT NULL,
	OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_check_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool, pg_catalog.text, pg_catalog.text) IS
'The same call as pklimit_allow, returning allowed, count, remaining, reset_at, retry_after and status for RateLimit and Retry-After headers.';

CREATE FUNCTION @extschema@.pklimit_check_all(keys pg_catalog.text[],
	max_counts pg_catalog.int8[], windows pg_catalog.interval[],
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true, anchor pg_catalog.text DEFAULT 'epoch',
	time_zone pg_catalog.text DEFAULT NULL,
	OUT key pg_catalog.text, OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_check_all_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool, pg_catalog.text, pg_catalog.text) IS
'Several limits in one call, recorded together in one transaction or not at all, every key by the one algorithm, anchor and time_zone: one row per key, in the order of the arrays, with the columns of pklimit_check. record_refused => false: nothing is recorded unless every limit allows.';

CREATE FUNCTION @extschema@.pklimit_allow_all(keys pg_catalog.text[],
	max_counts pg_catalog.int8[], windows pg_catalog.interval[],
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true, anchor pg_catalog.text DEFAULT 'epoch',
	time_zone pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_all_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool, pg_catalog.text, pg_catalog.text) IS
'Several limits in one call, as pklimit_check_all: true iff every limit allows.';

CREATE FUNCTION @extschema@.pklimit_memory_stats(
	OUT dbid pg_catalog.oid, OUT memory_calls pg_catalog.int8,
	OUT memory_reads pg_catalog.int8, OUT memory_fallbacks pg_catalog.int8,
	OUT memory_evictions pg_catalog.int8, OUT flushes pg_catalog.int8,
	OUT rows_flushed pg_catalog.int8, OUT memory_keys pg_catalog.int8,
	OUT flush_lag_ms pg_catalog.float8, OUT hits pg_catalog.int8,
	OUT misses pg_catalog.int8, OUT admissions_refused pg_catalog.int8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_memory_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_memory_stats() IS
'Per database, the memory path''s part of pklimit_stats: calls decided in memory, keys read into memory, memory calls applied durably instead (fallbacks), keys given back, flushes and the rows they wrote, the keys held in memory now, the flush lag in milliseconds (NULL while memory is closed or unused); then the memory calls that found their keys in memory (hits) and those that did not (misses), and the keys the admission rule kept out of a full memory (admissions_refused).';

CREATE OR REPLACE VIEW @extschema@.pklimit_stats AS
	SELECT s.*, m.memory_calls, m.memory_reads, m.memory_fallbacks,
		   m.memory_evictions, m.flushes, m.rows_flushed, m.memory_keys,
		   m.flush_lag_ms
	  FROM @extschema@.pklimit_stats() s
	  LEFT JOIN @extschema@.pklimit_memory_stats() m
		ON m.dbid OPERATOR(pg_catalog.=) s.dbid;

DROP FUNCTION @extschema@.pklimit_memory_stats_0_4();

-- 0.4.0: routing on Citus (docs/citus.md): the stored key a call makes of a
-- key under the session's tenant, and the node that holds its row.
CREATE FUNCTION @extschema@.pklimit_stored_key(key pg_catalog.text)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'pklimit_stored_key_sql'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_stored_key(pg_catalog.text) IS
'The key of the row that calls on key count in, under the session''s platformkit.tenant: what Citus hashes to place the row.';

CREATE FUNCTION @extschema@.pklimit_node(key pg_catalog.text,
	OUT node_name pg_catalog.text, OUT node_port pg_catalog.int4,
	OUT shard_id pg_catalog.int8)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_node'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_node(pg_catalog.text) IS
'On Citus, the node (name and port, as Citus knows it) and the shard that hold the row of key under the session''s platformkit.tenant: a call sent there runs on that node alone. All NULL where platformkit_limits is not distributed by key.';

-- 0.4.0: policies (docs/policies.md): limits as rows, a default row per
-- name and a row per tenant that overrides it.  The calls read them through
-- a cache in each backend (src/policy.c) that the trigger below empties at
-- commit of any change, however made.  Only the table's owner and members
-- of pklimit_admin change them; roles are the cluster's, so the role is
-- made only where it is missing, and one grant of it serves every database.
DO $admin$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
					WHERE r.rolname OPERATOR(pg_catalog.=) 'pklimit_admin') THEN
		CREATE ROLE pklimit_admin NOLOGIN;
		COMMENT ON ROLE pklimit_admin IS
			'May change pklimit''s policies (pklimit_policy_set, pklimit_policy_drop) in every database with pklimit.';
	ELSIF EXISTS (SELECT FROM pg_catalog.pg_roles r
				   WHERE r.rolname OPERATOR(pg_catalog.=) 'pklimit_admin'
					 AND (r.rolcanlogin OR EXISTS (SELECT FROM pg_catalog.pg_auth_members m
													WHERE m.roleid OPERATOR(pg_catalog.=) r.oid))) THEN
		RAISE WARNING 'the role pklimit_admin exists already, with members or LOGIN: they may change the policies of this database'
			USING HINT = 'Check the role''s members: \du pklimit_admin.';
	END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
	NULL;						-- made meanwhile by an install in another database
END
$admin$;

CREATE TABLE @extschema@.platformkit_limit_policies (
	name pg_catalog.text NOT NULL
		CHECK (pg_catalog.octet_length(name) OPERATOR(pg_catalog.>=) 1
			   AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 63),
	tenant pg_catalog.text NOT NULL DEFAULT ''
		CHECK (pg_catalog.octet_length(tenant) OPERATOR(pg_catalog.<=) 255),
	max_count pg_catalog.int8 NOT NULL CHECK (max_count OPERATOR(pg_catalog.>=) 0),
	"window" pg_catalog.interval NOT NULL,
	algorithm pg_catalog.text NOT NULL DEFAULT 'fixed'
		CHECK (algorithm OPERATOR(pg_catalog.=) ANY (ARRAY['fixed', 'gcra', 'sliding'])),
	cost pg_catalog.int8 NOT NULL DEFAULT 1 CHECK (cost OPERATOR(pg_catalog.>=) 0),
	record_refused pg_catalog.bool NOT NULL DEFAULT true,
	block pg_catalog.interval,
	durable pg_catalog.bool NOT NULL DEFAULT true,
	anchor pg_catalog.text NOT NULL DEFAULT 'epoch'
		CHECK (anchor OPERATOR(pg_catalog.=) ANY (ARRAY['epoch', 'first'])),
	mode pg_catalog.text NOT NULL DEFAULT 'enforce'
		CHECK (mode OPERATOR(pg_catalog.=) ANY (ARRAY['enforce', 'shadow'])),
	time_zone pg_catalog.text,
	updated_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (name, tenant)
);

COMMENT ON TABLE @extschema@.platformkit_limit_policies IS
'pklimit policies: a named limit per row, the default row (tenant empty) and overrides for one tenant each. Changed with pklimit_policy_set and pklimit_policy_drop or directly by the owner; every change is seen by the next call of every session once committed. Row level security: a session sees the default rows and its platformkit.tenant''s, or every row as a member of pklimit_admin with no tenant set.';
COMMENT ON COLUMN @extschema@.platformkit_limit_policies.tenant IS
'Empty: the default row, for calls with no platformkit.tenant or whose tenant has no row of its own; otherwise the tenant whose calls it decides.';
COMMENT ON COLUMN @extschema@.platformkit_limit_policies.mode IS
'enforce, or shadow: calls are counted and allowed, and a refusal shows as status shadow and in pklimit_policy_stats() as would_refuse.';

ALTER TABLE @extschema@.platformkit_limit_policies ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.platformkit_limit_policies FORCE ROW LEVEL SECURITY;

-- A session reads the default rows and its platformkit.tenant's, or every
-- row as a member of pklimit_admin with no tenant set; it writes only as a
-- member of pklimit_admin, the same rows (so a grant of the table, such as
-- GRANT ALL ON ALL TABLES IN SCHEMA, gives no other role a policy to write).
CREATE POLICY platformkit_tenant ON @extschema@.platformkit_limit_policies
	FOR SELECT
	USING (tenant OPERATOR(pg_catalog.=) ''
		   OR tenant OPERATOR(pg_catalog.=) pg_catalog.current_setting('platformkit.tenant', true)
		   OR (COALESCE(pg_catalog.current_setting('platformkit.tenant', true), '') OPERATOR(pg_catalog.=) ''
			   AND pg_catalog.pg_has_role('pklimit_admin', 'USAGE')));

CREATE POLICY platformkit_admin_insert ON @extschema@.platformkit_limit_policies
	FOR INSERT
	WITH CHECK (pg_catalog.pg_has_role('pklimit_admin', 'USAGE')
		   AND (tenant OPERATOR(pg_catalog.=) ''
				OR tenant OPERATOR(pg_catalog.=) pg_catalog.current_setting('platformkit.tenant', true)
				OR COALESCE(pg_catalog.current_setting('platformkit.tenant', true), '') OPERATOR(pg_catalog.=) ''));

CREATE POLICY platformkit_admin_update ON @extschema@.platformkit_limit_policies
	FOR UPDATE
	USING (pg_catalog.pg_has_role('pklimit_admin', 'USAGE')
		   AND (tenant OPERATOR(pg_catalog.=) ''
				OR tenant OPERATOR(pg_catalog.=) pg_catalog.current_setting('platformkit.tenant', true)
				OR COALESCE(pg_catalog.current_setting('platformkit.tenant', true), '') OPERATOR(pg_catalog.=) ''))
	WITH CHECK (pg_catalog.pg_has_role('pklimit_admin', 'USAGE')
		   AND (tenant OPERATOR(pg_catalog.=) ''
				OR tenant OPERATOR(pg_catalog.=) pg_catalog.current_setting('platformkit.tenant', true)
				OR COALESCE(pg_catalog.current_setting('platformkit.tenant', true), '') OPERATOR(pg_catalog.=) ''));

CREATE POLICY platformkit_admin_delete ON @extschema@.platformkit_limit_policies
	FOR DELETE
	USING (pg_catalog.pg_has_role('pklimit_admin', 'USAGE')
		   AND (tenant OPERATOR(pg_catalog.=) ''
				OR tenant OPERATOR(pg_catalog.=) pg_catalog.current_setting('platformkit.tenant', true)
				OR COALESCE(pg_catalog.current_setting('platformkit.tenant', true), '') OPERATOR(pg_catalog.=) ''));

REVOKE ALL ON @extschema@.platformkit_limit_policies FROM PUBLIC;

-- Policies are the database's data: pg_dump keeps them.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.platformkit_limit_policies', '');

CREATE FUNCTION @extschema@.pklimit_policies_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'pklimit_policies_changed'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.pklimit_policies_changed() IS
'Trigger of platformkit_limit_policies: at commit of any change, every session''s cached policies are dropped, so the next call reads the table again.';

CREATE TRIGGER platformkit_limit_policies_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.platformkit_limit_policies
	FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.pklimit_policies_changed();
-- also for changes applied by logical replication or with
-- session_replication_role = replica
ALTER TABLE @extschema@.platformkit_limit_policies
	ENABLE ALWAYS TRIGGER platformkit_limit_policies_changed;

-- The view reads the rows through pklimit_policy_rows(), which shows the
-- caller what the table's row level security would: read as the owner, so
-- that it reads alike on one server and on Citus.
CREATE FUNCTION @extschema@.pklimit_policy_rows(
	OUT name pg_catalog.text, OUT tenant pg_catalog.text,
	OUT max_count pg_catalog.int8, OUT "window" pg_catalog.interval,
	OUT algorithm pg_catalog.text, OUT cost pg_catalog.int8,
	OUT record_refused pg_catalog.bool, OUT block pg_catalog.interval,
	OUT durable pg_catalog.bool, OUT anchor pg_catalog.text,
	OUT mode pg_catalog.text, OUT time_zone pg_catalog.text,
	OUT updated_at pg_catalog.timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_policy_rows'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_policy_rows() IS
'The rows of the view pklimit_policies: the default rows (tenant NULL) and the session''s platformkit.tenant''s overrides, or every row to a member of pklimit_admin with no tenant set.';

CREATE VIEW @extschema@.pklimit_policies AS
	SELECT r.name, r.tenant, r.max_count, r."window", r.algorithm, r.cost,
		   r.record_refused, r.block, r.durable, r.anchor, r.mode, r.time_zone,
		   r.updated_at
	  FROM @extschema@.pklimit_policy_rows() r;

COMMENT ON VIEW @extschema@.pklimit_policies IS
'pklimit''s policies as the session may see them: the default rows (tenant NULL) and the session''s platformkit.tenant''s overrides, or every row to a member of pklimit_admin with no tenant set.';

-- Default privileges (ALTER DEFAULT PRIVILEGES) may have granted something
-- on the new table and view: nobody but their owner keeps it; then the
-- grants pklimit means.
DO $do$
DECLARE
	grant_ record;
BEGIN
	FOR grant_ IN
		SELECT DISTINCT c.oid::pg_catalog.regclass AS rel,
			   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			   ELSE pg_catalog.quote_ident(r.rolname) END AS grantee
		  FROM pg_catalog.pg_class c,
			   pg_catalog.aclexplode(c.relacl) a
			   LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		 WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
				'@extschema@.platformkit_limit_policies'::pg_catalog.regclass,
				'@extschema@.pklimit_policies'::pg_catalog.regclass])
		   AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %s FROM %s', grant_.rel, grant_.grantee);
	END LOOP;
END
$do$;
GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.platformkit_limit_policies TO pklimit_admin;
GRANT SELECT ON @extschema@.pklimit_policies TO PUBLIC;

CREATE FUNCTION @extschema@.pklimit_policy_set(name pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval,
	algorithm pg_catalog.text DEFAULT 'fixed', cost pg_catalog.int8 DEFAULT 1,
	record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, durable pg_catalog.bool DEFAULT true,
	anchor pg_catalog.text DEFAULT 'epoch', mode pg_catalog.text DEFAULT 'enforce',
	time_zone pg_catalog.text DEFAULT NULL, tenant pg_catalog.text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'pklimit_policy_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_policy_set(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.text, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
'Creates or changes the policy name: the limit of the calls that name it, with the arguments and defaults of pklimit_allow, and mode enforce or shadow. tenant => NULL (default): the default row; a tenant: the override for calls made with that platformkit.tenant. Seen by every call once committed.';

CREATE FUNCTION @extschema@.pklimit_policy_drop(name pg_catalog.text,
	tenant pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_policy_drop'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_policy_drop(pg_catalog.text, pg_catalog.text) IS
'Deletes the default row of the policy name (tenant => NULL) or one tenant''s override; true if there was one. Counts already made under it stay until purged.';

CREATE FUNCTION @extschema@.pklimit_allow(key pg_catalog.text,
	policy pg_catalog.text, cost pg_catalog.int8 DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow(pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
'Records cost events (default: the policy''s cost) for key under the limit of policy (its override for the session''s platformkit.tenant, else its default row); true if the limit allows them, or if the policy is in shadow mode. A key is counted apart under each policy.';

CREATE FUNCTION @extschema@.pklimit_check(key pg_catalog.text,
	policy pg_catalog.text, cost pg_catalog.int8 DEFAULT NULL,
	OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_check_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check(pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
'The same call as pklimit_allow(key, policy, cost), returning allowed, count, remaining, reset_at, retry_after and status (shadow when a policy in shadow mode refused it).';

CREATE FUNCTION @extschema@.pklimit_check_all(keys pg_catalog.text[],
	policies pg_catalog.text[], cost pg_catalog.int8 DEFAULT NULL,
	OUT key pg_catalog.text, OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_check_all_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.text[], pg_catalog.int8) IS
'Several (key, policy) pairs in one call, recorded together in one transaction or not at all: one row per pair, in order, with the columns of pklimit_check. cost (default: each policy''s own) applies to every pair.';

CREATE FUNCTION @extschema@.pklimit_allow_all(keys pg_catalog.text[],
	policies pg_catalog.text[], cost pg_catalog.int8 DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_all_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.text[], pg_catalog.int8) IS
'Several (key, policy) pairs in one call, as pklimit_check_all(keys, policies): true iff every enforcing policy allows.';

CREATE FUNCTION @extschema@.pklimit_count(key pg_catalog.text,
	policy pg_catalog.text)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'pklimit_count_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_count(pg_catalog.text, pg_catalog.text) IS
'The events counted for key under policy, as pklimit_count(key) reads a key''s count; the policy must exist.';

CREATE FUNCTION @extschema@.pklimit_forget(key pg_catalog.text,
	policy pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_forget_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_forget(pg_catalog.text, pg_catalog.text) IS
'Deletes the count of key under policy, as pklimit_forget(key) does a key''s; true if there was one. The policy must exist.';

CREATE FUNCTION @extschema@.pklimit_decrement(key pg_catalog.text,
	policy pg_catalog.text, cost pg_catalog.int8 DEFAULT NULL)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'pklimit_decrement_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_decrement(pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
'Takes up to cost (default: the policy''s cost) events back from key''s state under policy, as pklimit_decrement(key, cost) does, on the policy''s path (durable or memory).';

CREATE FUNCTION @extschema@.pklimit_policy_stats(
	OUT dbid pg_catalog.oid, OUT name pg_catalog.text, OUT tenant pg_catalog.text,
	OUT mode pg_catalog.text, OUT calls pg_catalog.int8,
	OUT allowed pg_catalog.int8, OUT refused pg_catalog.int8,
	OUT would_refuse pg_catalog.int8, OUT unavailable pg_catalog.int8,
	OUT table_reads pg_catalog.int8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_policy_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_policy_stats() IS
'Per database and policy row (tenant NULL: the default row) since the server started: the recording calls it decided, allowed, refused, would have refused in shadow mode (would_refuse, allowed), found unavailable, and the reads of the policy table that found it (once per session after each change). At most 1,000 rows are tracked; later ones are not counted.';

CREATE FUNCTION @extschema@.pklimit_stored_key(key pg_catalog.text,
	policy pg_catalog.text)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'pklimit_stored_key_policy'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_stored_key(pg_catalog.text, pg_catalog.text) IS
'The key of the row that calls on key under policy count in, under the session''s platformkit.tenant.';

CREATE FUNCTION @extschema@.pklimit_node(key pg_catalog.text,
	policy pg_catalog.text, OUT node_name pg_catalog.text,
	OUT node_port pg_catalog.int4, OUT shard_id pg_catalog.int8)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_node_policy'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_node(pg_catalog.text, pg_catalog.text) IS
'On Citus, the node and shard that hold the row of key under policy, as pklimit_node(key) for a key''s own row.';

-- 0.4.0: calendar windows (docs/algorithms.md, "Calendar windows"): the
-- window a fixed-window call at a moment counts in.
CREATE FUNCTION @extschema@.pklimit_window("window" pg_catalog.interval,
	time_zone pg_catalog.text DEFAULT NULL,
	at pg_catalog.timestamptz DEFAULT pg_catalog.now(),
	OUT window_start pg_catalog.timestamptz, OUT window_end pg_catalog.timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_window'
LANGUAGE C STABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.pklimit_window(pg_catalog.interval, pg_catalog.text, pg_catalog.timestamptz) IS
'The fixed window (anchor epoch) of length window that holds at (default now()): aligned to the Unix epoch, or with time_zone the calendar window from local midnight (''1 day'', ''7 days'' from Monday, ''1 month'', ''1 year''), as a call counts in it.';

-- 0.4.0: concurrency limits (docs/leases.md): at most max_concurrent leases
-- live at once per key.  A key's leases are one row of a table of their own
-- (so a lease never changes a rate count, nor the reverse), locked by each
-- call as a rate limit's row is; the leases are parallel arrays, at most
-- 1,000 of them.  Written only by pklimit's worker, like platformkit_limits.
CREATE TABLE @extschema@.platformkit_leases (
	key pg_catalog.text COLLATE "C" PRIMARY KEY,
	tokens pg_catalog.uuid[] NOT NULL,
	acquired_at pg_catalog.timestamptz[] NOT NULL,
	expires_at pg_catalog.timestamptz[] NOT NULL,
	leases pg_catalog.interval[] NOT NULL,
	max_concurrent pg_catalog.int8 NOT NULL,
	updated_at pg_catalog.timestamptz NOT NULL,
	held_until pg_catalog.timestamptz NOT NULL
);

-- The purge deletes rows whose last lease ended before its cutoff.
CREATE INDEX platformkit_leases_purge_idx
	ON @extschema@.platformkit_leases (held_until);

COMMENT ON TABLE @extschema@.platformkit_leases IS
'pklimit leases (concurrency limits): one row per stored key, its leases in parallel arrays (at most 1,000), written only by pklimit''s functions. platformkit:tenant-scoping-exempt because the key carries its tenant, as in platformkit_limits.';
COMMENT ON COLUMN @extschema@.platformkit_leases.key IS
'Stored key, as in platformkit_limits: g:<key>, t<tenant bytes>:<tenant>:<key>, or h:<hex SHA-256> of either.';
COMMENT ON COLUMN @extschema@.platformkit_leases.tokens IS
'The tokens of the leases, each given by pklimit_acquire; a lease is live until its expires_at.';
COMMENT ON COLUMN @extschema@.platformkit_leases.leases IS
'The length each lease was acquired with: what pklimit_renew extends it by when given no length.';
COMMENT ON COLUMN @extschema@.platformkit_leases.max_concurrent IS
'The last acquire''s max_concurrent.';
COMMENT ON COLUMN @extschema@.platformkit_leases.held_until IS
'The latest expires_at: the key holds no live lease from then on, and pklimit_purge measures retention from it.';

-- pklimit's statements on both tables run as one role, the owner of
-- platformkit_limits, whoever runs this update.
DO $owner$
BEGIN
	EXECUTE pg_catalog.format('ALTER TABLE @extschema@.platformkit_leases OWNER TO %I',
		(SELECT r.rolname FROM pg_catalog.pg_class c
		   JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) c.relowner
		  WHERE c.oid OPERATOR(pg_catalog.=) '@extschema@.platformkit_limits'::pg_catalog.regclass));
END
$owner$;

ALTER TABLE @extschema@.platformkit_leases ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.platformkit_leases FORCE ROW LEVEL SECURITY;

CREATE POLICY platformkit_system ON @extschema@.platformkit_leases
	USING (@extschema@.platformkit_is_system())
	WITH CHECK (@extschema@.platformkit_is_system());

DO $do$
DECLARE
	grant_ record;
BEGIN
	FOR grant_ IN
		SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			   ELSE pg_catalog.quote_ident(r.rolname) END AS grantee
		  FROM pg_catalog.pg_class c,
			   pg_catalog.aclexplode(c.relacl) a
			   LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		 WHERE c.oid OPERATOR(pg_catalog.=) '@extschema@.platformkit_leases'::pg_catalog.regclass
		   AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON TABLE @extschema@.platformkit_leases FROM %s',
			grant_.grantee);
	END LOOP;
END
$do$;
REVOKE ALL ON @extschema@.platformkit_leases FROM PUBLIC;

-- Live leases are state a restore must keep, as the counts are.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.platformkit_leases', '');

CREATE FUNCTION @extschema@.pklimit_acquire(key pg_catalog.text,
	max_concurrent pg_catalog.int8, lease pg_catalog.interval)
RETURNS pg_catalog.uuid
AS 'MODULE_PATHNAME', 'pklimit_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_acquire(pg_catalog.text, pg_catalog.int8, pg_catalog.interval) IS
'Takes a lease on key if fewer than max_concurrent (0 to 1000) leases are live on it: returns its token, live for lease unless released or renewed, or NULL when none is free. Recorded at once, whatever becomes of the caller''s transaction; always durable.';

CREATE FUNCTION @extschema@.pklimit_acquire_check(key pg_catalog.text,
	max_concurrent pg_catalog.int8, lease pg_catalog.interval,
	OUT token pg_catalog.uuid, OUT held pg_catalog.int8,
	OUT max_concurrent pg_catalog.int8, OUT retry_after pg_catalog.interval,
	OUT status pg_catalog.text)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_acquire_check'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_acquire_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval) IS
'The same call as pklimit_acquire, returning token (NULL: none free), held (live leases on the key after the call), max_concurrent, retry_after (until the oldest live lease ends, when refused) and status (ok; shadow or the reason the store was unavailable when token is not a lease).';

CREATE FUNCTION @extschema@.pklimit_acquire(key pg_catalog.text,
	policy pg_catalog.text)
RETURNS pg_catalog.uuid
AS 'MODULE_PATHNAME', 'pklimit_acquire_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_acquire(pg_catalog.text, pg_catalog.text) IS
'pklimit_acquire with the policy''s max_count as max_concurrent and its window as the lease (its override for the session''s platformkit.tenant, else its default row).';

CREATE FUNCTION @extschema@.pklimit_acquire_check(key pg_catalog.text,
	policy pg_catalog.text,
	OUT token pg_catalog.uuid, OUT held pg_catalog.int8,
	OUT max_concurrent pg_catalog.int8, OUT retry_after pg_catalog.interval,
	OUT status pg_catalog.text)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_acquire_check_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_acquire_check(pg_catalog.text, pg_catalog.text) IS
'pklimit_acquire_check with the policy''s max_count as max_concurrent and its window as the lease; status shadow when a policy in shadow mode refused it.';

CREATE FUNCTION @extschema@.pklimit_release(key pg_catalog.text,
	token pg_catalog.uuid)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_release(pg_catalog.text, pg_catalog.uuid) IS
'Frees the lease token of key: true if it was live and is now freed; false, and nothing changed, for a token that is not a live lease of the key. Recorded at once, whatever becomes of the caller''s transaction.';

CREATE FUNCTION @extschema@.pklimit_renew(key pg_catalog.text,
	token pg_catalog.uuid, lease pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_renew'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_renew(pg_catalog.text, pg_catalog.uuid, pg_catalog.interval) IS
'Extends the live lease token of key to end no sooner than lease from now (NULL: the length it was acquired with); true if it was live, false for a token that is not a live lease of the key.';

CREATE FUNCTION @extschema@.pklimit_leases(key pg_catalog.text,
	OUT token pg_catalog.uuid, OUT acquired_at pg_catalog.timestamptz,
	OUT expires_at pg_catalog.timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_leases'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_leases(pg_catalog.text) IS
'The live leases of key under the session''s platformkit.tenant, oldest first, as last committed.';


--@include replace_end.sql

COMMENT ON COLUMN @extschema@.platformkit_limits.window_start IS
'fixed: start of the window, aligned to the Unix epoch, or the first event''s moment with anchor first; sliding: start of the current window; gcra: where tat is counted from. The window is window_end - window_start.';


-- Changing policies is pklimit_admin's (and the owner's), not PUBLIC's.
REVOKE ALL ON FUNCTION @extschema@.pklimit_policy_set(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.text, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.pklimit_policy_drop(pg_catalog.text, pg_catalog.text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.pklimit_policy_set(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.text, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text) TO pklimit_admin;
GRANT EXECUTE ON FUNCTION @extschema@.pklimit_policy_drop(pg_catalog.text, pg_catalog.text) TO pklimit_admin;
GRANT EXECUTE ON FUNCTION @extschema@.pklimit_policy_stats() TO pklimit_admin;
