/* pklimit--0.2.0--0.3.0.sql: update script from pklimit 0.2.0 to 0.3.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pklimit UPDATE TO '0.3.0'" to load this file. \quit

-- An object of one of pklimit's names in its schema that is not pklimit's
-- own could take the place of pklimit's functions in a call, whatever its
-- arguments: an overload such as pklimit_allow(text, integer, interval)
-- would be a better match for a call than pklimit's own.  CREATE EXTENSION
-- refuses a schema holding one, and so does the update (for one planted
-- while an older version was installed).  An index on pklimit's table is
-- pklimit's own.
DO $check$
DECLARE
	installing pg_catalog.bool;
	planted pg_catalog.text;
BEGIN
	WITH pklimit_names(names) AS (
		SELECT ARRAY['platformkit_is_system', 'platformkit_limits', 'pklimit_allow',
				'pklimit_check', 'pklimit_count', 'pklimit_forget', 'pklimit_purge',
				'pklimit_purge_status', 'pklimit_schedule_purge', 'pklimit_check_all',
				'pklimit_allow_all', 'pklimit_stats', 'pklimit_stats_reset',
				'pklimit_purge_job_error', 'platformkit_limits_pkey',
				'pklimit_decrement', 'pklimit_memory_stats',
				'platformkit_limits_purge_idx']::pg_catalog.name[]),
	members AS (
		SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
		 WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
		   AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
				WHERE e.extname OPERATOR(pg_catalog.=) 'pklimit')
		   AND d.deptype OPERATOR(pg_catalog.=) 'e')
	SELECT NOT EXISTS (SELECT FROM members),
		   pg_catalog.string_agg(o.kind OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) o.name,
			', ' ORDER BY o.name, o.kind)
	  INTO installing, planted
	  FROM (SELECT 'function' AS kind, p.oid::pg_catalog.regprocedure::pg_catalog.text AS name,
				   'pg_catalog.pg_proc'::pg_catalog.regclass AS classid, p.oid AS objid
			  FROM pg_catalog.pg_proc p, pklimit_names n
			 WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
			   AND p.proname OPERATOR(pg_catalog.=) ANY (n.names)
			UNION ALL
			SELECT 'relation', c.relname::pg_catalog.text, 'pg_catalog.pg_class'::pg_catalog.regclass,
				   COALESCE(x.indrelid, c.oid)
			  FROM pg_catalog.pg_class c
				   LEFT JOIN pg_catalog.pg_index x ON x.indexrelid OPERATOR(pg_catalog.=) c.oid,
				   pklimit_names n
			 WHERE c.relnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
			   AND c.relname OPERATOR(pg_catalog.=) ANY (n.names)
			UNION ALL
			SELECT 'type', t.typname::pg_catalog.text, 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid
			  FROM pg_catalog.pg_type t, pklimit_names n
			 WHERE t.typnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
			   AND t.typname OPERATOR(pg_catalog.=) ANY (n.names)
			   AND t.typrelid OPERATOR(pg_catalog.=) 0) o
	 WHERE NOT EXISTS (SELECT FROM members m
						WHERE m.classid OPERATOR(pg_catalog.=) o.classid
						  AND m.objid OPERATOR(pg_catalog.=) o.objid);
	IF planted IS NOT NULL THEN
		RAISE EXCEPTION USING ERRCODE = 'duplicate_object',
			MESSAGE = pg_catalog.format(CASE WHEN installing
				THEN 'schema %s already has objects with pklimit''s names: %s'
				ELSE 'schema %s has objects with pklimit''s names that are not pklimit''s: %s' END,
				'@extschema@', planted),
			DETAIL = 'An object of one of pklimit''s names in its schema could take the place of pklimit''s own in a call.',
			HINT = CASE WHEN installing
				THEN 'Rename or drop them, or install pklimit in a schema of its own (CREATE EXTENSION pklimit SCHEMA pklimit).'
				ELSE 'Rename or drop them, then update again.' END;
	END IF;
END
$check$;


-- 0.3.0: an algorithm per call (fixed, gcra, sliding; docs/algorithms.md).
-- pklimit_allow, pklimit_check, pklimit_check_all and pklimit_allow_all
-- take it as their last parameter; with its default beside 0.2.0's they
-- would be ambiguous, so they are replaced (their C functions stay, for
-- databases still at 0.2.0).  A view or function of a user that depends on
-- one of them makes the update fail, naming them; their privileges are
-- carried over, first kept in settings of this transaction.
DO $dependents$
DECLARE
	dependents pg_catalog.text;
BEGIN
	-- a view by its name, not by its rule's
	SELECT pg_catalog.string_agg(DISTINCT COALESCE(
			(SELECT pg_catalog.pg_describe_object('pg_catalog.pg_class'::pg_catalog.regclass,
						r.ev_class, 0)
			   FROM pg_catalog.pg_rewrite r
			  WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
				AND r.oid OPERATOR(pg_catalog.=) d.objid
				AND r.rulename OPERATOR(pg_catalog.=) '_RETURN'),
			pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)), ', ')
	  INTO dependents
	  FROM pg_catalog.pg_depend d
	  JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.refobjid
	 WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
	   AND d.deptype OPERATOR(pg_catalog.=) 'n'
	   AND p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
	   AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['pklimit_allow', 'pklimit_check',
			'pklimit_check_all', 'pklimit_allow_all']::pg_catalog.name[])
	   AND p.pronargs OPERATOR(pg_catalog.=) 6;
	IF dependents IS NOT NULL THEN
		RAISE EXCEPTION USING ERRCODE = 'dependent_objects_still_exist',
			MESSAGE = pg_catalog.format('cannot update pklimit while objects depend on its recording functions: %s',
				dependents),
			DETAIL = 'Version 0.3.0 replaces pklimit_allow, pklimit_check, pklimit_check_all and pklimit_allow_all with functions that take an algorithm.',
			HINT = 'Drop those objects, run ALTER EXTENSION pklimit UPDATE, then create them again.';
	END IF;
END
$dependents$;

SELECT pg_catalog.set_config('pklimit_update.acl_' OPERATOR(pg_catalog.||) p.proname,
		COALESCE(p.proacl::pg_catalog.text, ''), true),
	   pg_catalog.set_config('pklimit_update.owner_' OPERATOR(pg_catalog.||) p.proname,
		p.proowner::pg_catalog.regrole::pg_catalog.text, true)
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
   AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['pklimit_allow', 'pklimit_check',
		'pklimit_check_all', 'pklimit_allow_all']::pg_catalog.name[])
   AND p.pronargs OPERATOR(pg_catalog.=) 6;

DROP FUNCTION @extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval);
DROP FUNCTION @extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval);
DROP FUNCTION @extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval);
DROP FUNCTION @extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval);

CREATE FUNCTION @extschema@.pklimit_allow(key pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval,
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool) IS
'Records cost events (default 1) for key; true if the key is not blocked and its limit of max_count per window allows them, as algorithm counts: fixed (default), gcra or sliding. record_refused => false: a refused call records nothing. block: a refusal blocks the key that long. durable => false: decided in shared memory and written to the table within pklimit.flush_interval (a crash may lose the last of them).';

CREATE FUNCTION @extschema@.pklimit_check(key pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval,
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true,
	OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_check_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool) IS
'The same call as pklimit_allow, returning allowed, count, remaining, reset_at, retry_after and status for RateLimit and Retry-After headers.';

CREATE FUNCTION @extschema@.pklimit_check_all(keys pg_catalog.text[],
	max_counts pg_catalog.int8[], windows pg_catalog.interval[],
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true,
	OUT key pg_catalog.text, OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_check_all_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool) IS
'Several limits in one call, recorded together in one transaction or not at all, every key by the one algorithm: one row per key, in the order of the arrays, with the columns of pklimit_check. record_refused => false: nothing is recorded unless every limit allows.';

CREATE FUNCTION @extschema@.pklimit_allow_all(keys pg_catalog.text[],
	max_counts pg_catalog.int8[], windows pg_catalog.interval[],
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_all_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool) IS
'Several limits in one call, as pklimit_check_all: true iff every limit allows.';

-- 0.3.0: events taken back, for a middleware's decrement (docs/algorithms.md,
-- "Taking events back"); its privileges are pklimit_forget's (below).
CREATE FUNCTION @extschema@.pklimit_decrement(key pg_catalog.text,
	cost pg_catalog.int8 DEFAULT 1, durable pg_catalog.bool DEFAULT true)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'pklimit_decrement'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_decrement(pg_catalog.text, pg_catalog.int8, pg_catalog.bool) IS
'Takes up to cost (default 1) events back from key''s open state, never below zero, in its own transaction: a fixed window''s count, a sliding window''s current then previous count, a GCRA bucket''s level (never below empty); creates no row, changes nothing once the state has closed, and leaves a block in place. Returns the count after, as pklimit_count reads it (0 if no state is open). durable => false: taken back in memory, as the memory path records.';

-- 0.3.0: the memory path's statistics (docs/memory.md), as columns added
-- at the end of pklimit_stats.  The view is replaced in place, as only a
-- member of the extension can be (a planted one is refused above), which
-- keeps the grants a DBA gave on it and the objects that depend on it.
CREATE FUNCTION @extschema@.pklimit_memory_stats(
	OUT dbid pg_catalog.oid, OUT memory_calls pg_catalog.int8,
	OUT memory_reads pg_catalog.int8, OUT memory_fallbacks pg_catalog.int8,
	OUT memory_evictions pg_catalog.int8, OUT flushes pg_catalog.int8,
	OUT rows_flushed pg_catalog.int8, OUT memory_keys pg_catalog.int8,
	OUT flush_lag_ms pg_catalog.float8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_memory_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_memory_stats() IS
'Per database, the memory path''s part of pklimit_stats: calls decided in memory, keys read into memory, memory calls applied durably instead (fallbacks), entries given back, flushes and the rows they wrote, the keys held in memory now, and the flush lag in milliseconds (NULL while memory is closed or unused).';

CREATE OR REPLACE VIEW @extschema@.pklimit_stats AS
	SELECT s.*, m.memory_calls, m.memory_reads, m.memory_fallbacks,
		   m.memory_evictions, m.flushes, m.rows_flushed, m.memory_keys,
		   m.flush_lag_ms
	  FROM @extschema@.pklimit_stats() s
	  LEFT JOIN @extschema@.pklimit_memory_stats() m
		ON m.dbid OPERATOR(pg_catalog.=) s.dbid;

COMMENT ON VIEW @extschema@.pklimit_stats IS
'What pklimit did in each database since the server started or the last reset (see pklimit_stats() and pklimit_memory_stats()); dbid 0, with datname NULL, counts together the databases beyond the first 63 (until the server restarts).';

-- Each replaced function's owner and privileges go to its successor, the
-- privileges as the grants of a user (which pg_dump dumps) made by the
-- owner: what default privileges (ALTER DEFAULT PRIVILEGES) gave the new
-- one gives way to them.  pklimit_decrement, new, gets pklimit_forget's
-- privileges, as another way to lower a count: a database that took
-- forgetting away from PUBLIC (or whose default privileges did at install)
-- does not get decrementing.  pklimit_memory_stats, new, gets
-- pklimit_stats()'s, which a reader of the view needs as well.
DO $privileges$
DECLARE
	f record;
	a record;
BEGIN
	FOR f IN
		SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text AS signature,
			   pg_catalog.current_setting('pklimit_update.owner_' OPERATOR(pg_catalog.||)
					p.proname) AS owner
		  FROM pg_catalog.pg_proc p
		 WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
		   AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['pklimit_allow', 'pklimit_check',
				'pklimit_check_all', 'pklimit_allow_all']::pg_catalog.name[])
		   AND p.pronargs OPERATOR(pg_catalog.=) 8
		   AND p.proowner OPERATOR(pg_catalog.<>) pg_catalog.current_setting('pklimit_update.owner_'
				OPERATOR(pg_catalog.||) p.proname)::pg_catalog.regrole
	LOOP
		EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO %s', f.signature, f.owner);
	END LOOP;
	FOR f IN
		SELECT p.oid, p.oid::pg_catalog.regprocedure::pg_catalog.text AS signature,
			   p.proowner, p.proacl,
			   CASE p.proname
			   WHEN 'pklimit_decrement' THEN
				   (SELECT q.proacl FROM pg_catalog.pg_proc q
					 WHERE q.oid OPERATOR(pg_catalog.=)
						   '@extschema@.pklimit_forget(pg_catalog.text)'::pg_catalog.regprocedure)
			   WHEN 'pklimit_memory_stats' THEN
				   (SELECT q.proacl FROM pg_catalog.pg_proc q
					 WHERE q.oid OPERATOR(pg_catalog.=)
						   '@extschema@.pklimit_stats()'::pg_catalog.regprocedure)
			   ELSE NULLIF(pg_catalog.current_setting('pklimit_update.acl_' OPERATOR(pg_catalog.||)
						p.proname), '')::pg_catalog.aclitem[]
			   END AS saved
		  FROM pg_catalog.pg_proc p
		 WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
		   AND (p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['pklimit_allow', 'pklimit_check',
					'pklimit_check_all', 'pklimit_allow_all']::pg_catalog.name[])
				AND p.pronargs OPERATOR(pg_catalog.=) 8
				OR p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['pklimit_decrement',
					'pklimit_memory_stats']::pg_catalog.name[]))
	LOOP
		IF f.saved IS NULL AND f.proacl IS NULL THEN
			CONTINUE;			-- the defaults, before and after
		END IF;
		FOR a IN
			SELECT DISTINCT CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
				   ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(x.grantee)) END AS grantee
			  FROM pg_catalog.aclexplode(COALESCE(f.proacl,
					pg_catalog.acldefault('f', f.proowner))) x
			 WHERE x.grantee OPERATOR(pg_catalog.<>) f.proowner
		LOOP
			EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s', f.signature, a.grantee);
		END LOOP;
		FOR a IN
			SELECT CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
				   ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(x.grantee)) END AS grantee,
				   x.is_grantable
			  FROM pg_catalog.aclexplode(COALESCE(f.saved,
					pg_catalog.acldefault('f', f.proowner))) x
			 WHERE x.grantee OPERATOR(pg_catalog.<>) f.proowner
		LOOP
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', f.signature,
				a.grantee, CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
		END LOOP;
		DELETE FROM pg_catalog.pg_init_privs i
		 WHERE i.objoid OPERATOR(pg_catalog.=) f.oid
		   AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass;
	END LOOP;
END
$privileges$;

-- The row keeps every algorithm's state (docs/algorithms.md, "The row"),
-- and the purge deletes by the moment a row stops counting, now also the
-- end of a sliding window's weight: its index is built again on that.
-- All run as commands of their own (EXECUTE), for Citus, as in the update
-- to 0.2.0: Citus passes an ALTER TABLE or CREATE INDEX of its tables on to
-- its shards and other nodes as the text of the command, and then runs this
-- update on its worker nodes too, where the columns and the index have
-- already come.
DO $table$
DECLARE
	wrong pg_catalog.text;
BEGIN
	EXECUTE 'ALTER TABLE @extschema@.platformkit_limits
		ADD COLUMN IF NOT EXISTS algorithm pg_catalog.text COLLATE pg_catalog."C" NOT NULL DEFAULT ''fixed'',
		ADD COLUMN IF NOT EXISTS max_count pg_catalog.int8,
		ADD COLUMN IF NOT EXISTS previous_count pg_catalog.int8,
		ADD COLUMN IF NOT EXISTS expires_at pg_catalog.timestamptz';
	SELECT pg_catalog.string_agg(pg_catalog.quote_ident(c.name), ', ' ORDER BY c.name)
	  INTO wrong
	  FROM (VALUES ('algorithm', 'pg_catalog.text'::pg_catalog.regtype, true),
				   ('max_count', 'pg_catalog.int8', false), ('previous_count', 'pg_catalog.int8', false),
				   ('expires_at', 'pg_catalog.timestamptz', false)) c(name, type, not_null)
	  JOIN pg_catalog.pg_attribute a
		ON a.attrelid OPERATOR(pg_catalog.=) '@extschema@.platformkit_limits'::pg_catalog.regclass
	   AND a.attname OPERATOR(pg_catalog.=) c.name AND NOT a.attisdropped
	 WHERE a.atttypid OPERATOR(pg_catalog.<>) c.type
		OR a.attnotnull OPERATOR(pg_catalog.<>) c.not_null;
	IF wrong IS NOT NULL THEN
		RAISE EXCEPTION USING ERRCODE = 'duplicate_column',
			MESSAGE = pg_catalog.format('columns of platformkit_limits are not pklimit''s: %s', wrong),
			DETAIL = 'Version 0.3.0 adds the columns algorithm (text, not null), max_count and previous_count (bigint) and expires_at (timestamptz).',
			HINT = 'Drop or rename those columns, then update again.';
	END IF;
	-- (a relation of this name that is not an index on this table is
	-- refused above, with the other planted names)
	IF pg_catalog.pg_get_indexdef(pg_catalog.to_regclass('@extschema@.platformkit_limits_purge_idx'))
		   OPERATOR(pg_catalog.!~) 'expires_at' THEN
		EXECUTE 'DROP INDEX @extschema@.platformkit_limits_purge_idx';
	END IF;
	EXECUTE 'CREATE INDEX IF NOT EXISTS platformkit_limits_purge_idx
		ON @extschema@.platformkit_limits ((GREATEST(window_end, blocked_until, expires_at)))';
END
$table$;

COMMENT ON COLUMN @extschema@.platformkit_limits.algorithm IS
'How the row counts: fixed, gcra or sliding (docs/algorithms.md, "The row"). Rows written before 0.3.0 are fixed.';
COMMENT ON COLUMN @extschema@.platformkit_limits.window_start IS
'fixed: start of the window, aligned to the Unix epoch; sliding: start of the current window; gcra: where tat is counted from. The window is window_end - window_start.';
COMMENT ON COLUMN @extschema@.platformkit_limits.window_end IS
'End of that window: a fixed window''s count is 0 from this moment; gcra: window_start plus the window, later than tat.';
COMMENT ON COLUMN @extschema@.platformkit_limits.count IS
'fixed: events in the window; sliding: events in the current window; gcra: steps of window / max_count from window_start to tat. Each call adds its cost, refused ones included unless record_refused is false; saturates at the largest bigint.';
COMMENT ON COLUMN @extschema@.platformkit_limits.max_count IS
'max_count of the last call that recorded (NULL before 0.3.0); gcra: count is in its steps.';
COMMENT ON COLUMN @extschema@.platformkit_limits.previous_count IS
'sliding: events in the window before the current one; NULL for the others.';
COMMENT ON COLUMN @extschema@.platformkit_limits.expires_at IS
'sliding: the end of the window after the current one, when its count stops weighing; NULL for the others. pklimit_purge measures retention from the latest of window_end, blocked_until and expires_at.';

COMMENT ON FUNCTION @extschema@.pklimit_count(pg_catalog.text) IS
'The count of key''s open state, as its algorithm reads it: the events of a fixed window, the events a GCRA bucket holds (rounded up), a sliding window''s estimate (rounded up); 0 if none is open. Records nothing.';

COMMENT ON FUNCTION @extschema@.pklimit_purge(pg_catalog.interval) IS
'Deletes every row, for all tenants, that stopped counting (its window, block or sliding window''s weight ended) more than retention (default 1 day) ago, in batches committed one by one; returns the number of rows deleted, or 0 if a purge of this database is already running.';

-- the control file's comment, which CREATE EXTENSION alone sets
COMMENT ON EXTENSION pklimit IS
'shared, exact, durable rate limits (fixed window, GCRA, sliding window): one counter row per key';
