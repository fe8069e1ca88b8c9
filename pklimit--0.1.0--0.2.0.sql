/* pklimit--0.1.0--0.2.0.sql: update script from pklimit 0.1.0 to 0.2.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pklimit UPDATE TO '0.2.0'" to load this file. \quit

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


-- The table's CHECK constraints go: only pklimit's worker writes the
-- table, and its C code keeps every window positive and every count at 0
-- or more; a CHECK would have its expression read again by every one of
-- its statements.
-- A refused call can block its key: blocked_until.
-- The purge deletes by the moment a row stops counting, the end of its
-- window or of its block if later: its index is on that (src/store.c writes
-- the expression the same way), built here for the rows of 0.1.0.
-- All run as commands of their own (EXECUTE): on Citus, which passes an
-- ALTER TABLE of a distributed or reference table on to its shards and other
-- nodes as the text of its command, that text must not be this script's.
-- Citus then runs this update on its worker nodes too, where the column has
-- already come with that ALTER TABLE: it must be pklimit's.
DO $table$
BEGIN
	EXECUTE 'ALTER TABLE @extschema@.platformkit_limits
		DROP CONSTRAINT IF EXISTS platformkit_limits_window_check,
		DROP CONSTRAINT IF EXISTS platformkit_limits_count_check';
	EXECUTE 'ALTER TABLE @extschema@.platformkit_limits
		ADD COLUMN IF NOT EXISTS blocked_until pg_catalog.timestamptz';
	IF (SELECT a.atttypid FROM pg_catalog.pg_attribute a
		 WHERE a.attrelid OPERATOR(pg_catalog.=) '@extschema@.platformkit_limits'::pg_catalog.regclass
		   AND a.attname OPERATOR(pg_catalog.=) 'blocked_until'
		   AND NOT a.attisdropped) OPERATOR(pg_catalog.<>) 'pg_catalog.timestamptz'::pg_catalog.regtype THEN
		RAISE EXCEPTION USING ERRCODE = 'duplicate_column',
			MESSAGE = 'column "blocked_until" of platformkit_limits is not pklimit''s',
			DETAIL = 'Version 0.2.0 adds a column blocked_until of type timestamptz.',
			HINT = 'Drop or rename that column, then update again.';
	END IF;
	EXECUTE 'DROP INDEX IF EXISTS @extschema@.platformkit_limits_window_end_idx';
	-- a relation of this name that is not an index on this table is
	-- refused above, with the other planted names
	EXECUTE 'CREATE INDEX IF NOT EXISTS platformkit_limits_purge_idx
		ON @extschema@.platformkit_limits ((GREATEST(window_end, blocked_until)))';
END
$table$;
COMMENT ON COLUMN @extschema@.platformkit_limits.window_end IS
'End of that window: the count is 0 from this moment, and pklimit_purge measures retention from it (or from blocked_until if later).';
COMMENT ON COLUMN @extschema@.platformkit_limits.count IS
'Events recorded in the window (each call adds its cost), refused ones included unless record_refused is false; saturates at the largest bigint.';
COMMENT ON COLUMN @extschema@.platformkit_limits.blocked_until IS
'While later than the server clock, the key is blocked: every call is refused and records nothing. Set by a refused call with block.';

-- pklimit_allow and pklimit_check take cost, record_refused and block; with
-- their defaults the three-argument functions would be ambiguous, so they
-- are replaced (their C functions stay, for databases still at 0.1.0).  A
-- view or function of a user that depends on one of them makes this update
-- fail: drop it, update, and create it again.  Their privileges are carried
-- over; first kept in settings of this transaction.
SELECT pg_catalog.set_config('pklimit_update.acl_' OPERATOR(pg_catalog.||) f.name,
		COALESCE(p.proacl::pg_catalog.text, ''), true)
  FROM (VALUES ('pklimit_allow'), ('pklimit_check')) f(name)
  JOIN pg_catalog.pg_proc p
	ON p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('@extschema@.'
		OPERATOR(pg_catalog.||) f.name
		OPERATOR(pg_catalog.||) '(pg_catalog.text, pg_catalog.int8, pg_catalog.interval)');

DROP FUNCTION @extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval);
DROP FUNCTION @extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval);

CREATE FUNCTION @extschema@.pklimit_allow(key pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval,
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_0_2'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval) IS
'Records cost events (default 1) for key; true if the key is not blocked and its count in the current fixed window, these events included, is at most max_count. record_refused => false: a refused call records nothing. block: a refusal blocks the key that long.';

CREATE FUNCTION @extschema@.pklimit_check(key pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval,
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL,
	OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_check_0_2'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval) IS
'The same call as pklimit_allow, returning allowed, count, remaining, reset_at, retry_after and status for RateLimit and Retry-After headers.';

CREATE FUNCTION @extschema@.pklimit_check_all(keys pg_catalog.text[],
	max_counts pg_catalog.int8[], windows pg_catalog.interval[],
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL,
	OUT key pg_catalog.text, OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_check_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval) IS
'Several limits in one call, recorded together in one transaction or not at all: one row per key, in the order of the arrays, with the columns of pklimit_check. record_refused => false: nothing is recorded unless every limit allows.';

CREATE FUNCTION @extschema@.pklimit_allow_all(keys pg_catalog.text[],
	max_counts pg_catalog.int8[], windows pg_catalog.interval[],
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval) IS
'Several limits in one call, as pklimit_check_all: true iff every limit allows.';

-- Default privileges (ALTER DEFAULT PRIVILEGES) may have granted something
-- on the new functions: nobody but their owner keeps any of it, as at
-- install.  Then the privileges of the replaced functions go to their
-- successors, and to the new calls on several keys (pklimit_check's to
-- pklimit_check_all, pklimit_allow's to pklimit_allow_all: a database that
-- took recording away from PUBLIC does not get it back), as their owner's
-- grants, recorded as no initial privileges of the extension, so that
-- pg_dump dumps them as a user's.
DO $do$
DECLARE
	f record;
	a record;
	acl text;
BEGIN
	FOR f IN
		SELECT p.oid, p.oid::pg_catalog.regprocedure::pg_catalog.text AS signature,
			   p.proname::pg_catalog.text AS name, p.proowner,
			   p.proacl IS NULL AS default_acl
		FROM pg_catalog.pg_proc p
		WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
		AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['pklimit_allow', 'pklimit_check',
				'pklimit_check_all', 'pklimit_allow_all']::pg_catalog.name[])
		AND p.pronargs OPERATOR(pg_catalog.=) 6
	LOOP
		FOR a IN
			SELECT DISTINCT pg_catalog.quote_ident(r.rolname) AS grantee
			FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) x
				 JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) x.grantee
			WHERE p.oid OPERATOR(pg_catalog.=) f.oid
			AND x.grantee OPERATOR(pg_catalog.<>) p.proowner
		LOOP
			EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s', f.signature, a.grantee);
		END LOOP;
		acl := pg_catalog.current_setting('pklimit_update.acl_' OPERATOR(pg_catalog.||)
			CASE WHEN f.name OPERATOR(pg_catalog.=) 'pklimit_check_all' THEN 'pklimit_check'
				 WHEN f.name OPERATOR(pg_catalog.=) 'pklimit_allow_all' THEN 'pklimit_allow'
				 ELSE f.name END, true);
		-- the replaced function had the default privileges (PUBLIC may
		-- execute): nothing to carry, unless default privileges gave the
		-- new one others
		IF acl IS NULL OR acl OPERATOR(pg_catalog.=) '' THEN
			IF f.default_acl THEN
				CONTINUE;
			END IF;
			acl := pg_catalog.acldefault('f', f.proowner)::pg_catalog.text;
		END IF;
		EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.signature);
		FOR a IN
			SELECT CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
				   ELSE pg_catalog.quote_ident(r.rolname) END AS grantee,
				   x.is_grantable
			FROM pg_catalog.aclexplode(acl::pg_catalog.aclitem[]) x
				 LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) x.grantee
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
$do$;

-- From 0.2.0 nobody but the table's owner holds the privileges that let a
-- role write the table, lock it against pklimit's writes or get around its
-- row level security, and only roles that bypass row level security hold
-- SELECT, which would show any other role no row but let it learn the
-- stored keys through EXPLAIN ANALYZE (the GRANT guard leaves them out);
-- 0.1.0 allowed INSERT, UPDATE, DELETE and SELECT to be granted.
DO $do$
DECLARE
	grant_ record;
	writes text := 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER';
	initial pg_catalog.aclitem[] := (SELECT i.initprivs FROM pg_catalog.pg_init_privs i
		WHERE i.objoid OPERATOR(pg_catalog.=) '@extschema@.platformkit_limits'::pg_catalog.regclass
		  AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
		  AND i.objsubid OPERATOR(pg_catalog.=) 0);
BEGIN
	IF pg_catalog.current_setting('server_version_num')::pg_catalog.int4 OPERATOR(pg_catalog.>=) 170000 THEN
		writes := writes OPERATOR(pg_catalog.||) ', MAINTAIN';
	END IF;
	FOR grant_ IN
		SELECT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			   ELSE pg_catalog.quote_ident(r.rolname) END AS grantee,
			   pg_catalog.bool_or(a.privilege_type OPERATOR(pg_catalog.<>) 'SELECT') AS writer,
			   pg_catalog.bool_or(a.privilege_type OPERATOR(pg_catalog.=) 'SELECT'
					AND NOT COALESCE(r.rolsuper OR r.rolbypassrls, false)) AS reader
		FROM (SELECT c.relowner, c.relacl AS acl
				FROM pg_catalog.pg_class c
			   WHERE c.oid OPERATOR(pg_catalog.=) '@extschema@.platformkit_limits'::pg_catalog.regclass
			  UNION ALL
			  SELECT c.relowner, t.attacl
				FROM pg_catalog.pg_class c
				JOIN pg_catalog.pg_attribute t ON t.attrelid OPERATOR(pg_catalog.=) c.oid
			   WHERE c.oid OPERATOR(pg_catalog.=) '@extschema@.platformkit_limits'::pg_catalog.regclass
				 AND t.attacl IS NOT NULL) o,
			 pg_catalog.aclexplode(o.acl) a
			 LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		WHERE a.grantee OPERATOR(pg_catalog.<>) o.relowner
		GROUP BY 1
	LOOP
		IF grant_.writer OR grant_.reader THEN
			EXECUTE pg_catalog.format('REVOKE %s ON @extschema@.platformkit_limits FROM %s CASCADE',
				pg_catalog.concat_ws(', ', CASE WHEN grant_.writer THEN writes END,
					CASE WHEN grant_.reader THEN 'SELECT' END),
				grant_.grantee);
		END IF;
	END LOOP;
	-- a REVOKE here records the table's whole ACL as the extension's initial
	-- privileges: those stay what the install gave, so that pg_dump dumps
	-- the grants that are left as a user's
	UPDATE pg_catalog.pg_init_privs i SET initprivs = initial
	 WHERE i.objoid OPERATOR(pg_catalog.=) '@extschema@.platformkit_limits'::pg_catalog.regclass
	   AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
	   AND i.objsubid OPERATOR(pg_catalog.=) 0 AND initial IS NOT NULL;
	DELETE FROM pg_catalog.pg_init_privs i
	 WHERE i.objoid OPERATOR(pg_catalog.=) '@extschema@.platformkit_limits'::pg_catalog.regclass
	   AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
	   AND (i.objsubid OPERATOR(pg_catalog.>) 0 OR initial IS NULL);
END
$do$;

-- Statistics, as pg_stat_statements keeps them: per database, from server
-- start (a crash restart starts them again) or the last reset, for every
-- database of the server.  Readable by pg_read_all_stats (and so pg_monitor)
-- and superusers; the reset is a superuser's unless granted.
CREATE FUNCTION @extschema@.pklimit_stats(
	OUT dbid pg_catalog.oid, OUT datname pg_catalog.name, OUT calls pg_catalog.int8,
	OUT allowed pg_catalog.int8, OUT refused pg_catalog.int8,
	OUT unavailable pg_catalog.int8, OUT failed_open pg_catalog.int8,
	OUT timeouts pg_catalog.int8,
	OUT queue_full pg_catalog.int8, OUT no_worker pg_catalog.int8,
	OUT lock_timeouts pg_catalog.int8, OUT read_only pg_catalog.int8,
	OUT no_table pg_catalog.int8, OUT errors pg_catalog.int8,
	OUT shadow_refused pg_catalog.int8, OUT events pg_catalog.int8,
	OUT batches pg_catalog.int8, OUT worker_starts pg_catalog.int8,
	OUT queue_depth pg_catalog.int8, OUT worker_pid pg_catalog.int4,
	OUT total_wait_ms pg_catalog.float8, OUT mean_wait_ms pg_catalog.float8,
	OUT max_wait_ms pg_catalog.float8, OUT stats_reset pg_catalog.timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_stats() IS
'Per database since the server started or pklimit_stats_reset(): recording calls and how they were answered (allowed + refused + unavailable = calls, unavailable by reason, and failed_open: those of them answered allowed), shadow_refused, events and batches recorded, worker starts, requests waiting now, the worker''s pid, and the callers'' total, mean and longest wait in milliseconds.';

CREATE VIEW @extschema@.pklimit_stats AS
	SELECT * FROM @extschema@.pklimit_stats();

COMMENT ON VIEW @extschema@.pklimit_stats IS
'What pklimit did in each database since the server started or the last reset (see pklimit_stats()); dbid 0, with datname NULL, counts together the databases beyond the first 63 (until the server restarts).';

CREATE FUNCTION @extschema@.pklimit_stats_reset(dbid pg_catalog.oid DEFAULT NULL)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'pklimit_stats_reset'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_stats_reset(pg_catalog.oid) IS
'Sets the counters of pklimit_stats of database dbid (default NULL: of every database) back to 0 and its stats_reset to now.';

REVOKE ALL ON FUNCTION @extschema@.pklimit_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.pklimit_stats_reset(pg_catalog.oid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.pklimit_stats() TO pg_read_all_stats;
GRANT SELECT ON @extschema@.pklimit_stats TO pg_read_all_stats;

-- Default privileges (ALTER DEFAULT PRIVILEGES) may have granted something
-- on the statistics' view and functions: nobody but their owner keeps any
-- of it (PUBLIC included), but for the grants to pg_read_all_stats above,
-- as at install.
DO $do$
DECLARE
	grant_ record;
BEGIN
	FOR grant_ IN
		SELECT DISTINCT 'TABLE @extschema@.pklimit_stats' AS obj,
			   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			   ELSE pg_catalog.quote_ident(r.rolname) END AS grantee
		FROM pg_catalog.pg_class c,
			 pg_catalog.aclexplode(c.relacl) a
			 LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		WHERE c.oid OPERATOR(pg_catalog.=) '@extschema@.pklimit_stats'::pg_catalog.regclass
		AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
		AND a.grantee OPERATOR(pg_catalog.<>) 'pg_read_all_stats'::pg_catalog.regrole
		UNION
		SELECT DISTINCT pg_catalog.format('FUNCTION %s', p.oid::pg_catalog.regprocedure),
			   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			   ELSE pg_catalog.quote_ident(r.rolname) END
		FROM pg_catalog.pg_proc p,
			 pg_catalog.aclexplode(p.proacl) a
			 LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
				'@extschema@.pklimit_stats()'::pg_catalog.regprocedure,
				'@extschema@.pklimit_stats_reset(pg_catalog.oid)'::pg_catalog.regprocedure])
		AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
		AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_read_all_stats'::pg_catalog.regrole
				 AND p.proname OPERATOR(pg_catalog.=) 'pklimit_stats')
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s', grant_.obj, grant_.grantee);
	END LOOP;
END
$do$;

-- pklimit_purge_status takes a retention and shows the oldest row's end and
-- how long it has outlived it, and pklimit_schedule_purge makes sure pg_cron
-- can connect to run the purge: both are replaced, and so is the view on
-- the first.  Their privileges are carried over (below); first kept in
-- settings of this transaction.
SELECT pg_catalog.set_config('pklimit_update.acl_' OPERATOR(pg_catalog.||) o.name,
		COALESCE(o.acl::pg_catalog.text, ''), true)
  FROM (SELECT 'purge_status' AS name, p.proacl AS acl FROM pg_catalog.pg_proc p
		 WHERE p.oid OPERATOR(pg_catalog.=) '@extschema@.pklimit_purge_status()'::pg_catalog.regprocedure
		UNION ALL
		SELECT 'purge_status_view', c.relacl FROM pg_catalog.pg_class c
		 WHERE c.oid OPERATOR(pg_catalog.=) '@extschema@.pklimit_purge_status'::pg_catalog.regclass
		UNION ALL
		SELECT 'schedule_purge', p.proacl FROM pg_catalog.pg_proc p
		 WHERE p.oid OPERATOR(pg_catalog.=) '@extschema@.pklimit_schedule_purge(pg_catalog.text)'::pg_catalog.regprocedure) o;

DROP VIEW @extschema@.pklimit_purge_status;
DROP FUNCTION @extschema@.pklimit_purge_status();
DROP FUNCTION @extschema@.pklimit_schedule_purge(pg_catalog.text);

CREATE FUNCTION @extschema@.pklimit_purge_status(
	retention pg_catalog.interval DEFAULT '1 day',
	OUT running pg_catalog.bool, OUT started_at pg_catalog.timestamptz,
	OUT finished_at pg_catalog.timestamptz, OUT cutoff pg_catalog.timestamptz,
	OUT deleted pg_catalog.int8, OUT failed pg_catalog.bool,
	OUT oldest_end pg_catalog.timestamptz, OUT overdue pg_catalog.interval)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_purge_status_0_2'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_purge_status(pg_catalog.interval) IS
'The purges of the current database: whether one runs, and of the last since the server started when it started and finished, its cutoff, rows deleted and whether it failed (NULL if none ran); when the row that stopped counting first did so (the end of its window, or of its block if later), and how long it has outlived retention (default 1 day): more than the schedule''s period means purges are not running.';

CREATE VIEW @extschema@.pklimit_purge_status AS
	SELECT * FROM @extschema@.pklimit_purge_status();

COMMENT ON VIEW @extschema@.pklimit_purge_status IS
'The purges of the current database, with the default retention of 1 day (see pklimit_purge_status(interval)).';

REVOKE ALL ON FUNCTION @extschema@.pklimit_purge_status(pg_catalog.interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.pklimit_purge_status(pg_catalog.interval) TO pg_monitor;
GRANT SELECT ON @extschema@.pklimit_purge_status TO pg_monitor;

-- Whether pg_cron can run a job: the connection it makes to run one, made
-- here (none is needed with cron.use_background_workers on).
CREATE FUNCTION @extschema@.pklimit_purge_job_error(job pg_catalog.int8)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'pklimit_purge_job_error'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_purge_job_error(pg_catalog.int8) IS
'NULL if pg_cron can run its job job (with cron.use_background_workers off, it connects to the job''s nodename and nodeport as the job''s user, and this function makes that connection), else the error that connection meets.';

REVOKE ALL ON FUNCTION @extschema@.pklimit_purge_job_error(pg_catalog.int8) FROM PUBLIC;

-- Scheduling the purge with pg_cron.  pg_cron runs in one database
-- (cron.database_name); pklimit schedules its purge there itself, and from
-- any other database says how to schedule it from there.  Only the pg_cron
-- extension's own functions are called, never a planted "cron" schema.
-- With cron.use_background_workers off (its default) pg_cron runs a job
-- over a connection to cron.host, localhost over TCP by default, where a
-- stock server asks for a password pg_cron does not have, or which a server
-- listening on a socket only refuses: where that connection fails and one
-- to the server's own socket works, the job runs on the socket; where
-- neither works, a WARNING says so and how to mend it.
CREATE FUNCTION @extschema@.pklimit_schedule_purge(
	schedule pg_catalog.text DEFAULT '0 * * * *')
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	cron_db text;
	command text := 'SELECT @extschema@.pklimit_purge()';
	socket text;
	job_id bigint;
	job record;
	problem text;
	socket_problem text;
BEGIN
	IF schedule IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
			MESSAGE = 'schedule must not be null';
	END IF;
	-- pg_cron's settings are a superuser's to read
	BEGIN
		cron_db := pg_catalog.current_setting('cron.database_name', true);
	EXCEPTION WHEN insufficient_privilege THEN
		RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
			MESSAGE = 'pklimit_schedule_purge must read pg_cron''s settings, which this role may not',
			HINT = 'Run it as a superuser, or as a member of pg_read_all_settings.';
	END;
	IF cron_db IS NULL OR cron_db = '' THEN
		RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
			MESSAGE = 'pg_cron is not loaded, so the pklimit purge is not scheduled',
			HINT = pg_catalog.format('Add pg_cron to shared_preload_libraries and restart, or run %s hourly from another scheduler.', command);
	END IF;
	IF cron_db OPERATOR(pg_catalog.<>) pg_catalog.current_database() THEN
		RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
			MESSAGE = pg_catalog.format('pg_cron runs in database %s, so the pklimit purge of database %s is not scheduled',
				cron_db, pg_catalog.current_database()),
			HINT = pg_catalog.format('Connected to database %s, run: SELECT cron.schedule_in_database(%L, %L, %L, %L);',
				cron_db, 'pklimit-purge-' OPERATOR(pg_catalog.||) pg_catalog.current_database(),
				schedule, command, pg_catalog.current_database());
	END IF;
	-- the schema "cron" must be the pg_cron extension's own
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
				   JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
				   WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
				   AND d.objid OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('cron')
				   AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
				   AND d.deptype OPERATOR(pg_catalog.=) 'e'
				   AND e.extname OPERATOR(pg_catalog.=) 'pg_cron') THEN
		RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
			MESSAGE = 'the pg_cron extension is not installed in this database, so the pklimit purge is not scheduled',
			HINT = 'Run CREATE EXTENSION pg_cron; then SELECT pklimit_schedule_purge();';
	END IF;
	-- cron.schedule replaces a job of the same name and owner: never a
	-- duplicate, and its nodename stays
	EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO job_id
		USING 'pklimit-purge', schedule, command;

	-- pg_cron's connection to run the job, tried where the caller may
	IF NOT pg_catalog.has_function_privilege('@extschema@.pklimit_purge_job_error(pg_catalog.int8)',
											 'EXECUTE') THEN
		RAISE WARNING USING ERRCODE = 'insufficient_privilege',
			MESSAGE = pg_catalog.format('whether pg_cron can connect to run the pklimit purge (job %s) was not checked',
				job_id),
			HINT = pg_catalog.format('A superuser can check it: SELECT pklimit_purge_job_error(%s);', job_id);
		RETURN job_id;
	END IF;
	problem := @extschema@.pklimit_purge_job_error(job_id);
	IF problem IS NOT NULL THEN
		BEGIN
			-- a superuser's reading and change (pg_cron grants no UPDATE),
			-- undone if the socket fails too
			socket := pg_catalog.btrim(pg_catalog.split_part(
				pg_catalog.current_setting('unix_socket_directories'), ',', 1), ' "');
			IF socket OPERATOR(pg_catalog.<>) '' THEN
				EXECUTE 'UPDATE cron.job SET nodename = $1 WHERE jobid OPERATOR(pg_catalog.=) $2'
					USING socket, job_id;
				socket_problem := @extschema@.pklimit_purge_job_error(job_id);
				IF socket_problem IS NOT NULL THEN
					RAISE EXCEPTION USING ERRCODE = 'no_data_found';
				END IF;
				problem := NULL;
			END IF;
		EXCEPTION WHEN no_data_found OR insufficient_privilege THEN
			NULL;
		END;
	END IF;
	IF problem IS NOT NULL THEN
		EXECUTE 'SELECT j.nodename, j.nodeport, j.database, j.username FROM cron.job j'
			' WHERE j.jobid OPERATOR(pg_catalog.=) $1' INTO job USING job_id;
		RAISE WARNING USING ERRCODE = 'object_not_in_prerequisite_state',
			MESSAGE = pg_catalog.format('pg_cron cannot connect to run the pklimit purge (job %s): every run will fail',
				job_id),
			DETAIL = pg_catalog.format('pg_cron runs the job as role %s in database %s over a connection to %s, port %s, which fails: %s%s',
				job.username, job.database, job.nodename, job.nodeport, problem,
				CASE WHEN socket_problem IS NOT NULL THEN pg_catalog.format('; over the server''s socket %s: %s',
					socket, socket_problem) ELSE '' END),
			HINT = pg_catalog.format('Set cron.use_background_workers = on in postgresql.conf and restart the server (each run then takes a background worker slot: count one more in max_worker_processes); or let role %s connect to database %s from the server itself without a password (a pg_hba.conf line, or a password file of the server''s operating-system user). SELECT pklimit_purge_job_error(%s) is NULL once pg_cron can.',
				job.username, job.database, job_id);
	END IF;
	RETURN job_id;
END
$fn$;

COMMENT ON FUNCTION @extschema@.pklimit_schedule_purge(pg_catalog.text) IS
'Schedules SELECT pklimit_purge() as the pg_cron job pklimit-purge (default: hourly, 0 * * * *) and returns its job id; a job pg_cron could not connect to run is moved to the server''s socket if that works, or a WARNING says how to mend it. Where pg_cron cannot be reached from this database, raises 55000 with a hint giving the call to run instead.';

REVOKE ALL ON FUNCTION @extschema@.pklimit_schedule_purge(pg_catalog.text) FROM PUBLIC;

-- Default privileges (ALTER DEFAULT PRIVILEGES) may have granted something
-- on the objects just made: nobody but their owner keeps any of it, as at
-- install, but for this script's grants to pg_monitor.  Then the replaced
-- ones get exactly the privileges of those they replace, as the grants of
-- a user, which pg_dump dumps: their initial privileges stay those this
-- script gave.  The update does not try pg_cron's connection for the job
-- 0.1.0 scheduled: it holds the table's lock; pklimit_schedule_purge() does.
DO $do$
DECLARE
	o record;
	obj record;
	change record;
	fresh pg_catalog.aclitem[];
	saved pg_catalog.aclitem[];
BEGIN
	FOR o IN
		SELECT v.kind, v.object, v.name, v.classid
		FROM (VALUES ('FUNCTION', '@extschema@.pklimit_purge_status(pg_catalog.interval)',
					  'purge_status', 'pg_catalog.pg_proc'::pg_catalog.regclass),
					 ('TABLE', '@extschema@.pklimit_purge_status',
					  'purge_status_view', 'pg_catalog.pg_class'::pg_catalog.regclass),
					 ('FUNCTION', '@extschema@.pklimit_schedule_purge(pg_catalog.text)',
					  'schedule_purge', 'pg_catalog.pg_proc'::pg_catalog.regclass),
					 ('FUNCTION', '@extschema@.pklimit_purge_job_error(pg_catalog.int8)',
					  NULL, 'pg_catalog.pg_proc'::pg_catalog.regclass)) v(kind, object, name, classid)
	LOOP
		IF o.kind OPERATOR(pg_catalog.=) 'FUNCTION' THEN
			SELECT p.oid, p.proacl AS acl, p.proowner AS owner INTO obj FROM pg_catalog.pg_proc p
			 WHERE p.oid OPERATOR(pg_catalog.=) o.object::pg_catalog.regprocedure;
		ELSE
			SELECT c.oid, c.relacl AS acl, c.relowner AS owner INTO obj FROM pg_catalog.pg_class c
			 WHERE c.oid OPERATOR(pg_catalog.=) o.object::pg_catalog.regclass;
		END IF;
		FOR change IN
			SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
				   ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END AS grantee
			  FROM pg_catalog.aclexplode(obj.acl) a
			 WHERE a.grantee OPERATOR(pg_catalog.<>) obj.owner
			   AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_monitor'::pg_catalog.regrole
						AND COALESCE(o.name, '') OPERATOR(pg_catalog.~~) 'purge_status%')
		LOOP
			EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s', o.kind, o.object, change.grantee);
		END LOOP;
		IF o.name IS NULL THEN
			CONTINUE;
		END IF;
		fresh := CASE o.kind WHEN 'FUNCTION'
			THEN (SELECT p.proacl FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) obj.oid)
			ELSE (SELECT c.relacl FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) obj.oid) END;
		saved := NULLIF(pg_catalog.current_setting('pklimit_update.acl_' OPERATOR(pg_catalog.||) o.name),
						'')::pg_catalog.aclitem[];
		-- 0.1.0 gave each of them privileges of its own: NULL only if set so by hand
		saved := COALESCE(saved, pg_catalog.acldefault(
			(CASE o.kind WHEN 'FUNCTION' THEN 'f' ELSE 'r' END)::pg_catalog."char", obj.owner));
		FOR change IN
			SELECT 'REVOKE' AS verb, f.privilege_type, f.grantee, false AS is_grantable
			  FROM pg_catalog.aclexplode(fresh) f
			 WHERE f.grantee OPERATOR(pg_catalog.<>) obj.owner
			   AND NOT EXISTS (SELECT FROM pg_catalog.aclexplode(saved) s
								WHERE s.grantee OPERATOR(pg_catalog.=) f.grantee
								  AND s.privilege_type OPERATOR(pg_catalog.=) f.privilege_type)
			UNION ALL
			SELECT 'GRANT', s.privilege_type, s.grantee, s.is_grantable
			  FROM pg_catalog.aclexplode(saved) s
			 WHERE s.grantee OPERATOR(pg_catalog.<>) obj.owner
			   AND NOT EXISTS (SELECT FROM pg_catalog.aclexplode(fresh) f
								WHERE f.grantee OPERATOR(pg_catalog.=) s.grantee
								  AND f.privilege_type OPERATOR(pg_catalog.=) s.privilege_type
								  AND f.is_grantable OPERATOR(pg_catalog.=) s.is_grantable)
		LOOP
			EXECUTE pg_catalog.format('%s %s ON %s %s %s %s%s', change.verb, change.privilege_type,
				o.kind, o.object, CASE change.verb WHEN 'GRANT' THEN 'TO' ELSE 'FROM' END,
				CASE WHEN change.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(change.grantee)) END,
				CASE WHEN change.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
		END LOOP;
		UPDATE pg_catalog.pg_init_privs i SET initprivs = fresh
		 WHERE i.objoid OPERATOR(pg_catalog.=) obj.oid
		   AND i.classoid OPERATOR(pg_catalog.=) o.classid
		   AND i.objsubid OPERATOR(pg_catalog.=) 0;
	END LOOP;
END
$do$;
