/* pklimit--0.2.0.sql: install script for pklimit 0.2.0 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pklimit" to load this file. \quit

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

CREATE FUNCTION @extschema@.platformkit_is_system()
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'platformkit_is_system'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.platformkit_is_system() IS
'Row level security predicate of platformkit_limits: true only while pklimit''s own code works on the table.';

-- No CHECK constraints: only pklimit's worker writes the table, and its C
-- code keeps every window positive and every count at 0 or more; a CHECK
-- would have its expression read again by every one of its statements.
CREATE TABLE @extschema@.platformkit_limits (
	key pg_catalog.text COLLATE "C" PRIMARY KEY,
	window_start pg_catalog.timestamptz NOT NULL,
	window_end pg_catalog.timestamptz NOT NULL,
	count pg_catalog.int8 NOT NULL,
	updated_at pg_catalog.timestamptz NOT NULL,
	blocked_until pg_catalog.timestamptz
);

-- The purge deletes by the moment a row stops counting: the end of its
-- window, or of its block if later (src/store.c writes the expression the
-- same way, for the planner to match it).
CREATE INDEX platformkit_limits_purge_idx
	ON @extschema@.platformkit_limits ((GREATEST(window_end, blocked_until)));

COMMENT ON TABLE @extschema@.platformkit_limits IS
'pklimit counters: one row per stored key (tenant and key, see the README), written only by pklimit''s functions. platformkit:tenant-scoping-exempt because the key carries its tenant, so one row never belongs to two tenants and pklimit_purge works across all of them.';
COMMENT ON COLUMN @extschema@.platformkit_limits.key IS
'Stored key: g:<key> (no tenant), t<tenant bytes>:<tenant>:<key>, or h:<hex SHA-256> of either when longer than 256 bytes.';
COMMENT ON COLUMN @extschema@.platformkit_limits.window_start IS
'Start of the fixed window the count belongs to, aligned to the Unix epoch.';
COMMENT ON COLUMN @extschema@.platformkit_limits.updated_at IS
'Server clock when the last event was recorded.';
COMMENT ON COLUMN @extschema@.platformkit_limits.window_end IS
'End of that window: the count is 0 from this moment, and pklimit_purge measures retention from it (or from blocked_until if later).';
COMMENT ON COLUMN @extschema@.platformkit_limits.count IS
'Events recorded in the window (each call adds its cost), refused ones included unless record_refused is false; saturates at the largest bigint.';
COMMENT ON COLUMN @extschema@.platformkit_limits.blocked_until IS
'While later than the server clock, the key is blocked: every call is refused and records nothing. Set by a refused call with block.';


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
-- on the new table, view and functions: nobody but their owner keeps any of
-- it (PUBLIC's EXECUTE on the recording functions is the default, not a
-- grant, and stays, unless default privileges took it away: then a role
-- must be granted EXECUTE, as for any function created under them).  Runs last, after the script's own GRANTs and REVOKEs.
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
				'@extschema@.pklimit_purge_status'::pg_catalog.regclass,
				'@extschema@.pklimit_stats'::pg_catalog.regclass])
		AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
		AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_monitor'::pg_catalog.regrole
				 AND c.relname OPERATOR(pg_catalog.=) 'pklimit_purge_status')
		AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_read_all_stats'::pg_catalog.regrole
				 AND c.relname OPERATOR(pg_catalog.=) 'pklimit_stats')
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
		AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_read_all_stats'::pg_catalog.regrole
				 AND p.proname OPERATOR(pg_catalog.=) 'pklimit_stats')
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
