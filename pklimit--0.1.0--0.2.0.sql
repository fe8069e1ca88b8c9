/* pklimit--0.1.0--0.2.0.sql: update script from pklimit 0.1.0 to 0.2.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pklimit UPDATE TO '0.2.0'" to load this file. \quit

-- The same rules as the install script: every object by its schema-qualified
-- name, never CREATE OR REPLACE over an object a user could have planted, and
-- what changes here changes in pklimit--0.2.0.sql too (test/t/090_upgrade.pl
-- compares an updated database with a fresh install).

-- An object of one of pklimit's names in its schema that is not pklimit's
-- own (planted while 0.1.0 was installed) could take the place of pklimit's
-- functions in a call, the new overloads included: the update refuses, as
-- the install script does.
DO $check$
DECLARE
	planted text;
BEGIN
	WITH pklimit_names(names) AS (
		SELECT ARRAY['platformkit_is_system', 'platformkit_limits', 'pklimit_allow',
				'pklimit_check', 'pklimit_count', 'pklimit_forget', 'pklimit_purge',
				'pklimit_purge_status', 'pklimit_schedule_purge', 'pklimit_check_all',
				'pklimit_allow_all', 'pklimit_stats', 'pklimit_stats_reset']::pg_catalog.name[]),
	members AS (
		SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
		 WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
		   AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
				WHERE e.extname OPERATOR(pg_catalog.=) 'pklimit')
		   AND d.deptype OPERATOR(pg_catalog.=) 'e')
	SELECT pg_catalog.string_agg(o.kind OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) o.name,
			', ' ORDER BY o.name, o.kind)
	  INTO planted
	  FROM (SELECT 'function' AS kind, p.oid::pg_catalog.regprocedure::pg_catalog.text AS name,
				   'pg_catalog.pg_proc'::pg_catalog.regclass AS classid, p.oid AS objid
			  FROM pg_catalog.pg_proc p, pklimit_names n
			 WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
			   AND p.proname OPERATOR(pg_catalog.=) ANY (n.names)
			UNION ALL
			SELECT 'relation', c.relname::pg_catalog.text, 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid
			  FROM pg_catalog.pg_class c, pklimit_names n
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
			MESSAGE = pg_catalog.format('schema %s has objects with pklimit''s names that are not pklimit''s: %s',
				'@extschema@', planted),
			DETAIL = 'An object of one of pklimit''s names in its schema could take the place of pklimit''s own in a call.',
			HINT = 'Rename or drop them, then update again.';
	END IF;
END
$check$;

-- The table's CHECK constraints go: only pklimit's worker writes the
-- table, and its C code keeps every window positive and every count at 0
-- or more; a CHECK would have its expression read again by every one of
-- its statements.
-- A refused call can block its key: blocked_until.
-- Both run as commands of their own (EXECUTE): on Citus, which passes an
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
END
$table$;
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
-- row level security (the GRANT guard leaves them out); 0.1.0 allowed
-- INSERT, UPDATE and DELETE to be granted.  SELECT grants stay.
DO $do$
DECLARE
	grantee_ text;
	privileges text := 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER';
BEGIN
	IF pg_catalog.current_setting('server_version_num')::pg_catalog.int4 OPERATOR(pg_catalog.>=) 170000 THEN
		privileges := privileges OPERATOR(pg_catalog.||) ', MAINTAIN';
	END IF;
	FOR grantee_ IN
		SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			   ELSE pg_catalog.quote_ident(r.rolname) END
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
		AND a.privilege_type OPERATOR(pg_catalog.<>) 'SELECT'
	LOOP
		EXECUTE pg_catalog.format('REVOKE %s ON @extschema@.platformkit_limits FROM %s CASCADE',
			privileges, grantee_);
	END LOOP;
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
