/*
 * src/sql/pklimit.sql: the one source of pklimit's SQL.  The build
 * (Makefile) writes four scripts from it: pklimit--0.1.0.sql and
 * pklimit--0.2.0.sql, the install scripts of releases 0.1.0 and 0.2.0, and
 * the updates pklimit--0.1.0--0.2.0.sql and pklimit--0.2.0--0.3.0.sql.  A
 * section starts with a line "--- " naming the scripts it belongs to, by
 * their versions ("0.1.0", "0.2.0", "0.1.0--0.2.0", "0.2.0--0.3.0"); a
 * script is its sections in this file's order.  So an object two scripts
 * create is written once, and where a later version changes an object the
 * lines that stay are shared too (a section may end inside a statement).
 * Released scripts are frozen: test/t/090_upgrade.pl checks their
 * checksums.  There is no install script after 0.2.0: CREATE EXTENSION runs
 * pklimit--0.2.0.sql and then every update.
 *
 * The rules of every script: every object by its schema-qualified name,
 * never CREATE OR REPLACE over an object a user could have planted (one
 * planted beforehand makes the script fail instead of being adopted; the
 * one CREATE OR REPLACE, of the view pklimit_stats in the update to 0.3.0,
 * replaces pklimit's own member, which the planted-name check has found
 * pklimit's), and
 * test/t/090_upgrade.pl finds an updated database equal to a fresh install.
 */
--- 0.1.0 ---
/* pklimit--0.1.0.sql: install script for pklimit 0.1.0 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pklimit" to load this file. \quit

-- Every object is created with @extschema@ in its name and never with
-- CREATE OR REPLACE: an object of the same name planted beforehand makes
-- CREATE EXTENSION fail instead of being adopted.

--- 0.2.0 ---
/* pklimit--0.2.0.sql: install script for pklimit 0.2.0 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pklimit" to load this file. \quit

--- 0.1.0--0.2.0 ---
/* pklimit--0.1.0--0.2.0.sql: update script from pklimit 0.1.0 to 0.2.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pklimit UPDATE TO '0.2.0'" to load this file. \quit

--- 0.2.0--0.3.0 ---
/* pklimit--0.2.0--0.3.0.sql: update script from pklimit 0.2.0 to 0.3.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pklimit UPDATE TO '0.3.0'" to load this file. \quit

--- 0.2.0 0.1.0--0.2.0 0.2.0--0.3.0 ---
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
--- 0.2.0--0.3.0 ---
				'pklimit_decrement', 'pklimit_memory_stats',
--- 0.2.0 0.1.0--0.2.0 0.2.0--0.3.0 ---
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

--- 0.1.0 0.2.0 ---
CREATE FUNCTION @extschema@.platformkit_is_system()
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'platformkit_is_system'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.platformkit_is_system() IS
'Row level security predicate of platformkit_limits: true only while pklimit''s own code works on the table.';

--- 0.2.0 ---
-- No CHECK constraints: only pklimit's worker writes the table, and its C
-- code keeps every window positive and every count at 0 or more; a CHECK
-- would have its expression read again by every one of its statements.
--- 0.1.0 0.2.0 ---
CREATE TABLE @extschema@.platformkit_limits (
	key pg_catalog.text COLLATE "C" PRIMARY KEY,
	window_start pg_catalog.timestamptz NOT NULL,
	window_end pg_catalog.timestamptz NOT NULL,
	count pg_catalog.int8 NOT NULL,
	updated_at pg_catalog.timestamptz NOT NULL,
--- 0.1.0 ---
	CONSTRAINT platformkit_limits_window_check
		CHECK (window_end OPERATOR(pg_catalog.>) window_start),
	CONSTRAINT platformkit_limits_count_check
		CHECK (count OPERATOR(pg_catalog.>=) 0)
);

-- The purge deletes by window end.
CREATE INDEX platformkit_limits_window_end_idx
	ON @extschema@.platformkit_limits (window_end);

--- 0.2.0 ---
	blocked_until pg_catalog.timestamptz
);

-- The purge deletes by the moment a row stops counting: the end of its
-- window, or of its block if later (src/store.c writes the expression the
-- same way, for the planner to match it).
CREATE INDEX platformkit_limits_purge_idx
	ON @extschema@.platformkit_limits ((GREATEST(window_end, blocked_until)));

--- 0.1.0 0.2.0 ---
COMMENT ON TABLE @extschema@.platformkit_limits IS
'pklimit counters: one row per stored key (tenant and key, see the README), written only by pklimit''s functions. platformkit:tenant-scoping-exempt because the key carries its tenant, so one row never belongs to two tenants and pklimit_purge works across all of them.';
COMMENT ON COLUMN @extschema@.platformkit_limits.key IS
'Stored key: g:<key> (no tenant), t<tenant bytes>:<tenant>:<key>, or h:<hex SHA-256> of either when longer than 256 bytes.';
COMMENT ON COLUMN @extschema@.platformkit_limits.window_start IS
'Start of the fixed window the count belongs to, aligned to the Unix epoch.';
--- 0.1.0 ---
COMMENT ON COLUMN @extschema@.platformkit_limits.window_end IS
'End of that window: the count is 0 from this moment, and pklimit_purge measures retention from it.';
COMMENT ON COLUMN @extschema@.platformkit_limits.count IS
'Events recorded in the window, refused ones included; saturates at the largest bigint.';
--- 0.1.0 0.2.0 ---
COMMENT ON COLUMN @extschema@.platformkit_limits.updated_at IS
'Server clock when the last event was recorded.';
--- 0.1.0--0.2.0 ---

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
--- 0.2.0 0.1.0--0.2.0 ---
COMMENT ON COLUMN @extschema@.platformkit_limits.window_end IS
'End of that window: the count is 0 from this moment, and pklimit_purge measures retention from it (or from blocked_until if later).';
COMMENT ON COLUMN @extschema@.platformkit_limits.count IS
'Events recorded in the window (each call adds its cost), refused ones included unless record_refused is false; saturates at the largest bigint.';
COMMENT ON COLUMN @extschema@.platformkit_limits.blocked_until IS
'While later than the server clock, the key is blocked: every call is refused and records nothing. Set by a refused call with block.';

--- 0.1.0 0.2.0 ---

ALTER TABLE @extschema@.platformkit_limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE @extschema@.platformkit_limits FORCE ROW LEVEL SECURITY;

CREATE POLICY platformkit_system ON @extschema@.platformkit_limits
	USING (@extschema@.platformkit_is_system())
	WITH CHECK (@extschema@.platformkit_is_system());

REVOKE ALL ON @extschema@.platformkit_limits FROM PUBLIC;


-- Rows are dumped by pg_dump, so counts survive dump and restore.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.platformkit_limits', '');

CREATE FUNCTION @extschema@.pklimit_allow(key pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_default'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow(pg_catalog.text) IS
'Records one event for key under pklimit.default_max and pklimit.default_window; true if the key is still within the limit.';

--- 0.1.0 ---
CREATE FUNCTION @extschema@.pklimit_allow(key pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval) IS
'Records one event for key; true if the count in the current fixed window, this event included, is at most max_count.';

CREATE FUNCTION @extschema@.pklimit_check(key pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval,
	OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_check'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval) IS
'Records one event for key like pklimit_allow and returns allowed, count, remaining, reset_at, retry_after and status for RateLimit and Retry-After headers.';

--- 0.1.0--0.2.0 ---
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

--- 0.2.0 0.1.0--0.2.0 ---
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

--- 0.1.0 0.2.0 ---
CREATE FUNCTION @extschema@.pklimit_count(key pg_catalog.text)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'pklimit_count'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_count(pg_catalog.text) IS
'Events recorded for key in its current window (0 if none or if the window has closed); records nothing.';

CREATE FUNCTION @extschema@.pklimit_forget(key pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_forget'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_forget(pg_catalog.text) IS
'Deletes the count of key (for example after a correct password); true if there was one.';

CREATE FUNCTION @extschema@.pklimit_purge(retention pg_catalog.interval DEFAULT '1 day')
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'pklimit_purge'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_purge(pg_catalog.interval) IS
'Deletes every row, for all tenants, whose window closed more than retention (default 1 day) ago, in batches committed one by one; returns the number of rows deleted, or 0 if a purge of this database is already running.';

REVOKE ALL ON FUNCTION @extschema@.pklimit_purge(pg_catalog.interval) FROM PUBLIC;

--- 0.1.0--0.2.0 ---
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

--- 0.2.0 0.1.0--0.2.0 ---
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

--- 0.1.0--0.2.0 ---
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

--- 0.1.0 ---
CREATE FUNCTION @extschema@.pklimit_purge_status(
	OUT running pg_catalog.bool, OUT started_at pg_catalog.timestamptz,
	OUT finished_at pg_catalog.timestamptz, OUT cutoff pg_catalog.timestamptz,
	OUT deleted pg_catalog.int8, OUT failed pg_catalog.bool)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_purge_status'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_purge_status() IS
'The last purge of the current database since the server started: whether it runs, when it started and finished, its cutoff, rows deleted and whether it failed. No row if none ran.';

CREATE VIEW @extschema@.pklimit_purge_status AS
	SELECT * FROM @extschema@.pklimit_purge_status();

COMMENT ON VIEW @extschema@.pklimit_purge_status IS
'The last purge of the current database since the server started (see pklimit_purge_status()).';

REVOKE ALL ON FUNCTION @extschema@.pklimit_purge_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.pklimit_purge_status() TO pg_monitor;
GRANT SELECT ON @extschema@.pklimit_purge_status TO pg_monitor;

-- Scheduling the purge with pg_cron.  pg_cron runs in one database
-- (cron.database_name); pklimit schedules its purge there itself, and from
-- any other database says how to schedule it from there.  Only the pg_cron
-- extension's own functions are called, never a planted "cron" schema.
--- 0.2.0 0.1.0--0.2.0 ---
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
--- 0.1.0 0.2.0 0.1.0--0.2.0 ---
CREATE FUNCTION @extschema@.pklimit_schedule_purge(
	schedule pg_catalog.text DEFAULT '0 * * * *')
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
--- 0.1.0 ---
	cron_db text := pg_catalog.current_setting('cron.database_name', true);
	command text := 'SELECT @extschema@.pklimit_purge()';
	job_id bigint;
--- 0.2.0 0.1.0--0.2.0 ---
	cron_db text;
	command text := 'SELECT @extschema@.pklimit_purge()';
	socket text;
	job_id bigint;
	job record;
	problem text;
	socket_problem text;
--- 0.1.0 0.2.0 0.1.0--0.2.0 ---
BEGIN
	IF schedule IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
			MESSAGE = 'schedule must not be null';
	END IF;
--- 0.2.0 0.1.0--0.2.0 ---
	-- pg_cron's settings are a superuser's to read
	BEGIN
		cron_db := pg_catalog.current_setting('cron.database_name', true);
	EXCEPTION WHEN insufficient_privilege THEN
		RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
			MESSAGE = 'pklimit_schedule_purge must read pg_cron''s settings, which this role may not',
			HINT = 'Run it as a superuser, or as a member of pg_read_all_settings.';
	END;
--- 0.1.0 0.2.0 0.1.0--0.2.0 ---
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
--- 0.1.0 ---
	-- cron.schedule replaces a job of the same name and owner: never a duplicate
	EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO job_id
		USING 'pklimit-purge', schedule, command;
--- 0.2.0 0.1.0--0.2.0 ---
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
--- 0.1.0 0.2.0 0.1.0--0.2.0 ---
	RETURN job_id;
END
$fn$;

COMMENT ON FUNCTION @extschema@.pklimit_schedule_purge(pg_catalog.text) IS
--- 0.1.0 ---
'Schedules SELECT pklimit_purge() as the pg_cron job pklimit-purge (default: hourly, 0 * * * *) and returns its job id; where pg_cron cannot be reached from this database, raises 55000 with a hint giving the call to run instead.';

REVOKE ALL ON FUNCTION @extschema@.pklimit_schedule_purge(pg_catalog.text) FROM PUBLIC;

--- 0.2.0 0.1.0--0.2.0 ---
'Schedules SELECT pklimit_purge() as the pg_cron job pklimit-purge (default: hourly, 0 * * * *) and returns its job id; a job pg_cron could not connect to run is moved to the server''s socket if that works, or a WARNING says how to mend it. Where pg_cron cannot be reached from this database, raises 55000 with a hint giving the call to run instead.';

REVOKE ALL ON FUNCTION @extschema@.pklimit_schedule_purge(pg_catalog.text) FROM PUBLIC;

--- 0.1.0 ---
-- Default privileges (ALTER DEFAULT PRIVILEGES) may have granted something
-- on the new table, view and functions: nobody but their owner keeps any of
-- it (PUBLIC's EXECUTE on the recording functions is the default, not a
-- grant, and stays).  Runs last, after the script's own GRANTs and REVOKEs.
--- 0.2.0 ---
-- Default privileges (ALTER DEFAULT PRIVILEGES) may have granted something
-- on the new table, view and functions: nobody but their owner keeps any of
-- it (PUBLIC's EXECUTE on the recording functions is the default, not a
-- grant, and stays, unless default privileges took it away: then a role
-- must be granted EXECUTE, as for any function created under them).  Runs last, after the script's own GRANTs and REVOKEs.
--- 0.1.0 0.2.0 ---
DO $do$
DECLARE
	grant_ record;
BEGIN
	FOR grant_ IN
		SELECT DISTINCT pg_catalog.format('TABLE %s', c.oid::pg_catalog.regclass) AS obj,
			   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			   ELSE pg_catalog.quote_ident(r.rolname) END AS grantee
		FROM pg_catalog.pg_class c,
			 pg_catalog.aclexplode(c.relacl) a
			 LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
				'@extschema@.platformkit_limits'::pg_catalog.regclass,
--- 0.1.0 ---
				'@extschema@.pklimit_purge_status'::pg_catalog.regclass])
		AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
		AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_monitor'::pg_catalog.regrole
				 AND c.relkind OPERATOR(pg_catalog.=) 'v')
--- 0.2.0 ---
				'@extschema@.pklimit_purge_status'::pg_catalog.regclass,
				'@extschema@.pklimit_stats'::pg_catalog.regclass])
		AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
		AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_monitor'::pg_catalog.regrole
				 AND c.relname OPERATOR(pg_catalog.=) 'pklimit_purge_status')
		AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_read_all_stats'::pg_catalog.regrole
				 AND c.relname OPERATOR(pg_catalog.=) 'pklimit_stats')
--- 0.1.0 0.2.0 ---
		UNION
		SELECT DISTINCT pg_catalog.format('FUNCTION %s', p.oid::pg_catalog.regprocedure),
			   pg_catalog.quote_ident(r.rolname)
		FROM pg_catalog.pg_proc p
			 JOIN pg_catalog.pg_depend d
			   ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
			  AND d.objid OPERATOR(pg_catalog.=) p.oid
			  AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
			  AND d.deptype OPERATOR(pg_catalog.=) 'e'
			 JOIN pg_catalog.pg_extension e
			   ON e.oid OPERATOR(pg_catalog.=) d.refobjid
			  AND e.extname OPERATOR(pg_catalog.=) 'pklimit',
			 pg_catalog.aclexplode(p.proacl) a
			 JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		WHERE a.grantee OPERATOR(pg_catalog.<>) p.proowner
		AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_monitor'::pg_catalog.regrole
				 AND p.proname OPERATOR(pg_catalog.=) 'pklimit_purge_status')
--- 0.2.0 ---
		AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_read_all_stats'::pg_catalog.regrole
				 AND p.proname OPERATOR(pg_catalog.=) 'pklimit_stats')
--- 0.1.0 0.2.0 ---
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s', grant_.obj, grant_.grantee);
	END LOOP;
END
$do$;
--- 0.1.0 ---

--- 0.1.0--0.2.0 ---
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
--- 0.1.0 0.2.0 ---
-- Schedule the purge now if this is pg_cron's database; otherwise say why
-- not (as a WARNING: CREATE EXTENSION hides notices).
DO $do$
DECLARE
	msg text;
	hint text;
BEGIN
	PERFORM @extschema@.pklimit_schedule_purge();
EXCEPTION WHEN object_not_in_prerequisite_state THEN
	GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
	RAISE WARNING '%', msg USING HINT = hint;
END
$do$;
--- 0.2.0--0.3.0 ---

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
