-- pklimit_hostile: search_path tricks, planted objects and a role matrix.
-- pklimit must behave exactly the same whatever a user plants, and never
-- touch a shadow object.

TRUNCATE platformkit_limits;
CREATE ROLE regress_pklimit_shadow NOSUPERUSER NOBYPASSRLS;
CREATE SCHEMA shadow AUTHORIZATION regress_pklimit_shadow;
SET ROLE regress_pklimit_shadow;

-- shadows of everything pklimit's statements use, each leaving a trace if
-- it is ever called
CREATE TABLE shadow.traces (what text);
CREATE TABLE shadow.platformkit_limits (key text PRIMARY KEY, window_start timestamptz,
  window_end timestamptz, count bigint, updated_at timestamptz);
CREATE FUNCTION shadow.platformkit_is_system() RETURNS boolean LANGUAGE sql
  AS $$ INSERT INTO shadow.traces VALUES ('platformkit_is_system') RETURNING true $$;
CREATE FUNCTION shadow.clock_timestamp() RETURNS timestamptz LANGUAGE sql
  AS $$ INSERT INTO shadow.traces VALUES ('clock_timestamp') RETURNING '2000-01-01'::timestamptz $$;
CREATE FUNCTION shadow.date_bin(interval, timestamptz, timestamptz) RETURNS timestamptz LANGUAGE sql
  AS $$ INSERT INTO shadow.traces VALUES ('date_bin') RETURNING '2000-01-01'::timestamptz $$;
CREATE FUNCTION shadow.lower(text) RETURNS text LANGUAGE sql
  AS $$ INSERT INTO shadow.traces VALUES ('lower') RETURNING $1 $$;
CREATE FUNCTION shadow.text_eq(text, text) RETURNS boolean LANGUAGE sql
  AS $$ INSERT INTO shadow.traces VALUES ('=') RETURNING true $$;
CREATE OPERATOR shadow.= (LEFTARG = text, RIGHTARG = text, FUNCTION = shadow.text_eq);
CREATE FUNCTION shadow.int8_gt(bigint, bigint) RETURNS boolean LANGUAGE sql
  AS $$ INSERT INTO shadow.traces VALUES ('>') RETURNING true $$;
CREATE OPERATOR shadow.> (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = shadow.int8_gt);
-- and in pg_temp, searched first for tables
CREATE TEMP TABLE platformkit_limits (key text, count bigint);
INSERT INTO platformkit_limits VALUES ('g:k', 1000);

-- shadows first, before pg_catalog
SET search_path = pg_temp, shadow, pg_catalog, public;
SELECT public.pklimit_allow('k', 2, '36500 days'), public.pklimit_allow('k', 2, '36500 days'),
       public.pklimit_allow('k', 2, '36500 days');
SELECT allowed, count, remaining, status FROM public.pklimit_check('k', 2, '36500 days');
SELECT public.pklimit_count('k'), public.pklimit_count('other');
SELECT public.pklimit_forget('other');
SET search_path = shadow, pg_temp, public;
SELECT public.pklimit_allow('k', 2, '36500 days');
SELECT public.pklimit_count('k');
RESET search_path;

-- no shadow was touched
SELECT count(*) AS traces FROM shadow.traces;
SELECT count(*) AS shadow_rows FROM shadow.platformkit_limits;
SELECT key, count FROM pg_temp.platformkit_limits;
RESET ROLE;
SELECT key, count FROM public.platformkit_limits;

-- no SET, SET ROLE or SET SESSION AUTHORIZATION open to an ordinary role
-- makes the predicate true
CREATE ROLE regress_pklimit_other NOSUPERUSER NOBYPASSRLS;
GRANT regress_pklimit_other TO regress_pklimit_shadow;
SET SESSION AUTHORIZATION regress_pklimit_shadow;
SELECT public.platformkit_is_system();
SET ROLE regress_pklimit_other;
SELECT public.platformkit_is_system();
SET platformkit.is_system = 'on';
SET platformkit.system = 'true';
SELECT public.platformkit_is_system();
SELECT count(*) FROM public.platformkit_limits;
SET SESSION AUTHORIZATION regress_pklimit_other;
RESET SESSION AUTHORIZATION;

-- a BYPASSRLS role with table privileges sees the rows: like a superuser,
-- it is trusted with the table
CREATE ROLE regress_pklimit_bypass NOSUPERUSER BYPASSRLS;
GRANT SELECT ON public.platformkit_limits TO regress_pklimit_bypass;
SET ROLE regress_pklimit_bypass;
SELECT key, count FROM public.platformkit_limits;
RESET ROLE;
REVOKE ALL ON public.platformkit_limits FROM regress_pklimit_bypass;

DROP SCHEMA shadow CASCADE;
DROP TABLE pg_temp.platformkit_limits;

-- objects planted under pklimit's names make CREATE EXTENSION fail instead
-- of being adopted (PostgreSQL 18 adds the script's line as CONTEXT: not shown)
\set SHOW_CONTEXT never
DROP EXTENSION pklimit;
GRANT CREATE ON SCHEMA public TO regress_pklimit_shadow;
SET ROLE regress_pklimit_shadow;
CREATE FUNCTION public.platformkit_is_system() RETURNS boolean LANGUAGE sql AS 'SELECT true';
RESET ROLE;
CREATE EXTENSION pklimit;
DROP FUNCTION public.platformkit_is_system();
SET ROLE regress_pklimit_shadow;
CREATE TABLE public.platformkit_limits (key text);
RESET ROLE;
CREATE EXTENSION pklimit;
DROP TABLE public.platformkit_limits;
SET ROLE regress_pklimit_shadow;
CREATE FUNCTION public.pklimit_allow(text, bigint, interval) RETURNS boolean LANGUAGE sql AS 'SELECT true';
RESET ROLE;
CREATE EXTENSION pklimit;
DROP FUNCTION public.pklimit_allow(text, bigint, interval);
SET ROLE regress_pklimit_shadow;
CREATE FUNCTION public.pklimit_purge(interval) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
RESET ROLE;
CREATE EXTENSION pklimit;
DROP FUNCTION public.pklimit_purge(interval);
SET ROLE regress_pklimit_shadow;
CREATE VIEW public.pklimit_purge_status AS SELECT 1 AS x;
RESET ROLE;
CREATE EXTENSION pklimit;
DROP VIEW public.pklimit_purge_status;
-- overloads with other arguments too: pklimit_allow('login:bob', 0,
-- '15 minutes') would call the planted one (an exact integer match)
SET ROLE regress_pklimit_shadow;
CREATE FUNCTION public.pklimit_allow(text, integer, interval) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION public.pklimit_check(text, integer, interval) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE TYPE public.pklimit_count AS (x int);
RESET ROLE;
CREATE EXTENSION pklimit;
DROP FUNCTION public.pklimit_allow(text, integer, interval);
DROP FUNCTION public.pklimit_check(text, integer, interval);
DROP TYPE public.pklimit_count;
-- and the names of its indexes, which would be taken or renamed
SET ROLE regress_pklimit_shadow;
CREATE TABLE public.decoy (k text);
CREATE INDEX platformkit_limits_pkey ON public.decoy (k);
RESET ROLE;
CREATE EXTENSION pklimit;
DROP TABLE public.decoy;
\set SHOW_CONTEXT errors
-- nothing planted: it installs, and owns what it created (its warning
-- about pg_cron depends on the server's set-up)
SET client_min_messages = error;
CREATE EXTENSION pklimit;
RESET client_min_messages;
SELECT count(*) AS objects_owned_by_others
  FROM pg_depend d JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pklimit')
   AND p.proowner <> (SELECT extowner FROM pg_extension WHERE extname = 'pklimit');

-- once installed, nobody plants an object of pklimit's names in its schema,
-- whatever its arguments: not by creating it, renaming or moving it there
CREATE SCHEMA regress_elsewhere AUTHORIZATION regress_pklimit_shadow;
SET ROLE regress_pklimit_shadow;
CREATE FUNCTION public.pklimit_allow(text, integer, interval) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION public.pklimit_check(key text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE VIEW public.pklimit_forget AS SELECT 1 AS x;
CREATE FUNCTION public.innocent(text, integer, interval) RETURNS boolean LANGUAGE sql AS 'SELECT true';
ALTER FUNCTION public.innocent(text, integer, interval) RENAME TO pklimit_allow;
CREATE FUNCTION regress_elsewhere.pklimit_count(text, integer) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
ALTER FUNCTION regress_elsewhere.pklimit_count(text, integer) SET SCHEMA public;
DROP SCHEMA regress_elsewhere CASCADE;
DROP FUNCTION public.innocent(text, integer, interval);
RESET ROLE;
-- so docs/security.md's call reaches pklimit's own function
SELECT pklimit_allow('login:bob', 0, '15 minutes') AS refused;
SELECT pklimit_forget('login:bob');

-- default privileges do not survive into pklimit's table, view or functions
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON TABLES TO regress_pklimit_shadow;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO regress_pklimit_shadow;
DROP EXTENSION pklimit;
SET client_min_messages = error;
CREATE EXTENSION pklimit;
RESET client_min_messages;
SELECT count(*) AS grants_to_others FROM information_schema.role_table_grants
 WHERE table_name IN ('platformkit_limits', 'pklimit_purge_status', 'pklimit_stats')
   AND grantee IN ('regress_pklimit_shadow', 'PUBLIC');
SELECT has_function_privilege('regress_pklimit_shadow', 'pklimit_purge(interval)', 'EXECUTE') AS may_purge,
       has_function_privilege('regress_pklimit_shadow', 'pklimit_allow(text,bigint,interval,bigint,boolean,interval,text,boolean,text,text)', 'EXECUTE') AS may_allow,
       has_table_privilege('pg_monitor', 'pklimit_purge_status', 'SELECT') AS monitor_reads_status;
-- nor into the functions the updates create in CREATE EXTENSION
SELECT p.oid::regprocedure AS granted_to_shadow
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass,
       aclexplode(p.proacl) a
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pklimit')
   AND a.grantee = 'regress_pklimit_shadow'::regrole;
SELECT has_function_privilege('regress_pklimit_shadow', 'pklimit_stats()', 'EXECUTE') AS may_read_stats,
       has_function_privilege('regress_pklimit_shadow', 'pklimit_stats_reset(oid)', 'EXECUTE') AS may_reset_stats,
       has_table_privilege('regress_pklimit_shadow', 'pklimit_stats', 'SELECT') AS may_select_stats,
       has_table_privilege('pg_read_all_stats', 'pklimit_stats', 'SELECT') AS stats_readers_read;
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM regress_pklimit_shadow;
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON FUNCTIONS FROM regress_pklimit_shadow;

-- pklimit refuses to write its table while it has a trigger (which would
-- run as the owner inside pklimit's statement), and goes on once it is gone
CREATE FUNCTION pg_temp.hijack() RETURNS trigger LANGUAGE plpgsql
  AS $$ BEGIN RAISE NOTICE 'trigger ran'; RETURN NEW; END $$;
CREATE TRIGGER hijack BEFORE INSERT OR UPDATE ON platformkit_limits
  FOR EACH ROW EXECUTE FUNCTION pg_temp.hijack();
SELECT allowed, count, status FROM pklimit_check('guarded', 5, '36500 days');
SET pklimit.on_unavailable = error;
SELECT pklimit_allow('guarded', 5, '36500 days');
RESET pklimit.on_unavailable;
DROP TRIGGER hijack ON platformkit_limits;
SELECT allowed, count, status FROM pklimit_check('guarded', 5, '36500 days');
-- a statement trigger on DELETE would run in a forget or a purge: refused;
-- one on TRUNCATE alone (Citus adds one) never runs in pklimit's statements
CREATE FUNCTION pg_temp.stmt_hijack() RETURNS trigger LANGUAGE plpgsql
  AS $$ BEGIN RAISE NOTICE 'trigger ran'; RETURN NULL; END $$;
CREATE TRIGGER hijack_delete AFTER DELETE ON platformkit_limits
  FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.stmt_hijack();
SELECT allowed, count, status FROM pklimit_check('guarded', 5, '36500 days');
DROP TRIGGER hijack_delete ON platformkit_limits;
CREATE TRIGGER on_truncate BEFORE TRUNCATE ON platformkit_limits
  FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.stmt_hijack();
SELECT allowed, count, status FROM pklimit_check('guarded', 5, '36500 days');
SELECT pklimit_forget('guarded');
DROP TRIGGER on_truncate ON platformkit_limits;

REVOKE CREATE ON SCHEMA public FROM regress_pklimit_shadow;
DROP ROLE regress_pklimit_shadow;
DROP ROLE regress_pklimit_other;
DROP ROLE regress_pklimit_bypass;

-- a transaction that installs pklimit and fails rolls back, server up (the
-- guards never read the catalogs for the ROLLBACK itself)
SELECT current_database() AS home \gset
CREATE DATABASE regress_pklimit_rollback;
\c regress_pklimit_rollback
BEGIN;
SET client_min_messages = error;
CREATE EXTENSION pklimit;
SELECT 1 / 0;
ROLLBACK;
BEGIN;
SET client_min_messages = error;
CREATE EXTENSION pklimit;
SAVEPOINT s;
SELECT 1 / 0;
ROLLBACK TO s;
ROLLBACK;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'pklimit';
\c :home
DROP DATABASE regress_pklimit_rollback;
SELECT pklimit_allow('after-rollback', 1, '1 hour');
SELECT pklimit_forget('after-rollback');
