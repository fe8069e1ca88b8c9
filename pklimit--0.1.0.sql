/* pklimit--0.1.0.sql: install script for pklimit 0.1.0 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pklimit" to load this file. \quit

-- Every object is created with @extschema@ in its name and never with
-- CREATE OR REPLACE: an object of the same name planted beforehand makes
-- CREATE EXTENSION fail instead of being adopted.

CREATE FUNCTION @extschema@.platformkit_is_system()
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'platformkit_is_system'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.platformkit_is_system() IS
'Row level security predicate of platformkit_limits: true only while pklimit''s own code works on the table.';

CREATE TABLE @extschema@.platformkit_limits (
	key pg_catalog.text COLLATE "C" PRIMARY KEY,
	window_start pg_catalog.timestamptz NOT NULL,
	window_end pg_catalog.timestamptz NOT NULL,
	count pg_catalog.int8 NOT NULL,
	updated_at pg_catalog.timestamptz NOT NULL,
	CONSTRAINT platformkit_limits_window_check
		CHECK (window_end OPERATOR(pg_catalog.>) window_start),
	CONSTRAINT platformkit_limits_count_check
		CHECK (count OPERATOR(pg_catalog.>=) 0)
);

-- The purge deletes by window end.
CREATE INDEX platformkit_limits_window_end_idx
	ON @extschema@.platformkit_limits (window_end);

COMMENT ON TABLE @extschema@.platformkit_limits IS
'pklimit counters: one row per stored key (tenant and key, see the README), written only by pklimit''s functions. platformkit:tenant-scoping-exempt because the key carries its tenant, so one row never belongs to two tenants and pklimit_purge works across all of them.';
COMMENT ON COLUMN @extschema@.platformkit_limits.key IS
'Stored key: g:<key> (no tenant), t<tenant bytes>:<tenant>:<key>, or h:<hex SHA-256> of either when longer than 256 bytes.';
COMMENT ON COLUMN @extschema@.platformkit_limits.window_start IS
'Start of the fixed window the count belongs to, aligned to the Unix epoch.';
COMMENT ON COLUMN @extschema@.platformkit_limits.window_end IS
'End of that window: the count is 0 from this moment, and pklimit_purge measures retention from it.';
COMMENT ON COLUMN @extschema@.platformkit_limits.count IS
'Events recorded in the window, refused ones included; saturates at the largest bigint.';
COMMENT ON COLUMN @extschema@.platformkit_limits.updated_at IS
'Server clock when the last event was recorded.';

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
CREATE FUNCTION @extschema@.pklimit_schedule_purge(
	schedule pg_catalog.text DEFAULT '0 * * * *')
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	cron_db text := pg_catalog.current_setting('cron.database_name', true);
	command text := 'SELECT @extschema@.pklimit_purge()';
	job_id bigint;
BEGIN
	IF schedule IS NULL THEN
		RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
			MESSAGE = 'schedule must not be null';
	END IF;
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
	-- cron.schedule replaces a job of the same name and owner: never a duplicate
	EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO job_id
		USING 'pklimit-purge', schedule, command;
	RETURN job_id;
END
$fn$;

COMMENT ON FUNCTION @extschema@.pklimit_schedule_purge(pg_catalog.text) IS
'Schedules SELECT pklimit_purge() as the pg_cron job pklimit-purge (default: hourly, 0 * * * *) and returns its job id; where pg_cron cannot be reached from this database, raises 55000 with a hint giving the call to run instead.';

REVOKE ALL ON FUNCTION @extschema@.pklimit_schedule_purge(pg_catalog.text) FROM PUBLIC;

-- Default privileges (ALTER DEFAULT PRIVILEGES) may have granted something
-- on the new table, view and functions: nobody but their owner keeps any of
-- it (PUBLIC's EXECUTE on the recording functions is the default, not a
-- grant, and stays).  Runs last, after the script's own GRANTs and REVOKEs.
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
				'@extschema@.pklimit_purge_status'::pg_catalog.regclass])
		AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
		AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_monitor'::pg_catalog.regrole
				 AND c.relkind OPERATOR(pg_catalog.=) 'v')
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
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s', grant_.obj, grant_.grantee);
	END LOOP;
END
$do$;

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
