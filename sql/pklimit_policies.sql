-- pklimit_policies: limits kept as rows (0.4.0).  Every function of a
-- policy and every error; a key counted per policy; per-tenant overrides;
-- per-policy shadow mode; a change seen by the next call; no table read per
-- call; who may change a policy; which call spellings resolve.

TRUNCATE platformkit_limits;
\i sql/include/sqlstate_of.sql
\pset null '(null)'

-- pklimit_admin exists (made by the install where it was missing)
SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = 'pklimit_admin';

SELECT pklimit_policy_set('login', 3, '36500 days');
SELECT pklimit_policy_set('login', 5, '36500 days', tenant => 'acme');
SELECT pklimit_policy_set('api', 2, '36500 days', algorithm => 'gcra',
	cost => 1, record_refused => false, block => '36500 days',
	durable => false);
SELECT name, tenant, max_count, "window", algorithm, cost, record_refused,
	   block, durable, anchor, mode, time_zone, updated_at IS NOT NULL AS stamped
  FROM pklimit_policies ORDER BY name, tenant NULLS FIRST;

-- a call takes the policy's limit
SELECT pklimit_allow('bob', 'login') FROM generate_series(1, 4);
SELECT pklimit_count('bob', 'login');
SELECT c.allowed, c.count, c.remaining, c.status
  FROM pklimit_check('bob', 'login', 0) c;
-- a key is counted apart under each policy, and apart from a direct call
SELECT pklimit_count('bob');
SELECT pklimit_allow('bob', 1, '36500 days');
SELECT pklimit_count('bob'), pklimit_count('bob', 'login');
SELECT key, count FROM platformkit_limits ORDER BY key COLLATE "C";
SELECT pklimit_stored_key('bob', 'login'), pklimit_stored_key('bob');
SELECT * FROM pklimit_node('bob', 'login');

-- the tenant's override decides its calls; its key is its own
SET platformkit.tenant = 'acme';
-- (cost 1 + 0 * i: each row a call of its own)
SELECT c.allowed, c.count, c.remaining FROM generate_series(1, 6) i,
	   LATERAL pklimit_check('bob', 'login', 1 + 0 * i) c;
SELECT pklimit_stored_key('bob', 'login');
-- a tenant without an override gets the default row
SET platformkit.tenant = 'globex';
SELECT pklimit_allow('bob', 'login') FROM generate_series(1, 4);
RESET platformkit.tenant;

-- cost: the call's, else the policy's
SELECT pklimit_policy_set('upload', 10, '36500 days', cost => 4);
SELECT c.count, c.remaining FROM pklimit_check('u', 'upload') c;
SELECT c.count, c.remaining FROM pklimit_check('u', 'upload', 1) c;
SELECT c.allowed, c.count FROM pklimit_check('u', 'upload', NULL::bigint) c;
SELECT pklimit_decrement('u', 'upload'), pklimit_decrement('u', 'upload', 1);
SELECT pklimit_forget('u', 'upload'), pklimit_forget('u', 'upload');
SELECT pklimit_count('u', 'upload');

-- the policy's other options: GCRA, no record when refused, a block, memory
SELECT c.allowed, c.count, c.status FROM generate_series(1, 3) i,
	   LATERAL pklimit_check('m', 'api', 1 + 0 * i) c;
SELECT pklimit_count('m', 'api');

-- several (key, policy) pairs: all or none, one row each
SELECT key, allowed, count, remaining, status
  FROM pklimit_check_all(ARRAY['x', 'x', 'y'], ARRAY['login', 'upload', 'login']);
SELECT pklimit_allow_all(ARRAY['x', 'y'], ARRAY['login', 'login']);
SELECT pklimit_allow_all(ARRAY['x', 'y'], ARRAY['login', 'login']);
SELECT pklimit_count('x', 'login'), pklimit_count('y', 'login');

-- a changed limit applies to what is already counted
SELECT pklimit_policy_set('login', 20, '36500 days');
SELECT pklimit_allow('bob', 'login');
SELECT pklimit_policy_set('login', 2, '36500 days');
SELECT c.allowed, c.count, c.remaining FROM pklimit_check('bob', 'login') c;
-- a direct UPDATE by the owner is seen by the next call too
UPDATE platformkit_limit_policies SET max_count = 100
 WHERE name = 'login' AND tenant = '';
SELECT c.allowed, c.count, c.remaining FROM pklimit_check('bob', 'login') c;
-- in a transaction that rolls back, the change is seen by its own calls only
BEGIN;
SELECT pklimit_policy_set('login', 1, '36500 days');
SELECT pklimit_allow('bob', 'login');
ROLLBACK;
SELECT pklimit_allow('bob', 'login');

-- shadow mode per policy: counted and allowed, status shadow
SELECT pklimit_policy_set('tight', 1, '36500 days', mode => 'shadow');
SELECT c.allowed, c.count, c.status FROM generate_series(1, 3) i,
	   LATERAL pklimit_check('s', 'tight', 1 + 0 * i) c;
SELECT key, allowed, status
  FROM pklimit_check_all(ARRAY['s', 's'], ARRAY['tight', 'login']);
SELECT pklimit_policy_set('tight', 1, '36500 days', mode => 'enforce');
SELECT c.allowed, c.status FROM pklimit_check('s', 'tight') c;

-- a shadow policy beside an enforcing one that records nothing refused:
-- the shadow policy's refusals never keep the other from counting
SELECT pklimit_policy_set('quota', 3, '36500 days', record_refused => false);
SELECT pklimit_policy_set('trial', 1, '36500 days', mode => 'shadow');
SELECT i, pklimit_allow_all(ARRAY['g', 'g'], ARRAY['quota', 'trial'], 1 + 0 * i) AS allowed
  FROM generate_series(1, 5) i;
SELECT pklimit_count('g', 'quota') AS quota_count, pklimit_count('g', 'trial') AS trial_count;
SELECT pklimit_policy_drop('quota'), pklimit_policy_drop('trial');

-- the trigger fires for changes made as a replica too (logical replication)
SELECT tgenabled FROM pg_trigger WHERE tgname = 'platformkit_limit_policies_changed';
SELECT pklimit_policy_set('repl', 5, '36500 days');
SELECT c.remaining FROM pklimit_check('rp', 'repl', 0) c;
SET session_replication_role = replica;
UPDATE platformkit_limit_policies SET max_count = 2 WHERE name = 'repl';
RESET session_replication_role;
SELECT c.remaining FROM pklimit_check('rp', 'repl', 0) c;
-- a column the owner changed is an error at the call, never a wrong limit
ALTER TABLE platformkit_limit_policies RENAME COLUMN max_count TO max_count_x;
SELECT pg_temp.sqlstate_of($$SELECT pklimit_allow('rp', 'repl')$$);
ALTER TABLE platformkit_limit_policies RENAME COLUMN max_count_x TO max_count;
ALTER TABLE platformkit_limit_policies ALTER COLUMN max_count TYPE numeric;
SELECT pg_temp.sqlstate_of($$SELECT pklimit_allow('rp', 'repl')$$);
ALTER TABLE platformkit_limit_policies ALTER COLUMN max_count TYPE bigint;
ALTER TABLE platformkit_limit_policies ALTER COLUMN algorithm DROP NOT NULL;
UPDATE platformkit_limit_policies SET algorithm = NULL WHERE name = 'repl';
SELECT pg_temp.sqlstate_of($$SELECT pklimit_allow('rp', 'repl')$$);
UPDATE platformkit_limit_policies SET algorithm = 'fixed' WHERE name = 'repl';
ALTER TABLE platformkit_limit_policies ALTER COLUMN algorithm SET NOT NULL;
SELECT c.remaining FROM pklimit_check('rp', 'repl', 0) c;
SELECT pklimit_policy_drop('repl');
-- the trigger's function is not for calling
SELECT pg_temp.sqlstate_of($$SELECT pklimit_policies_changed()$$);

-- the counters: one table read per policy row and session until a change
SELECT name, tenant, mode, calls, allowed, refused, would_refuse,
	   unavailable, table_reads > 0 AS read
  FROM pklimit_policy_stats()
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND name IN ('api', 'login', 'tight', 'upload')
 ORDER BY name, tenant NULLS FIRST;
SELECT pklimit_allow('r', 'login');
CREATE TEMP TABLE reads_before AS
	SELECT table_reads FROM pklimit_policy_stats()
	 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
	   AND name = 'login' AND tenant IS NULL;
SELECT count(*) FILTER (WHERE pklimit_allow('r' || i, 'login')) AS allowed
  FROM generate_series(1, 200) i;
SELECT s.table_reads - b.table_reads AS reads_in_200_calls
  FROM pklimit_policy_stats() s, reads_before b
 WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND s.name = 'login' AND s.tenant IS NULL;
SELECT pklimit_policy_set('login', 100, '36500 days', cost => 1);
SELECT pklimit_allow('r', 'login'), pklimit_allow('r', 'login');
SELECT s.table_reads - b.table_reads AS reads_after_a_change
  FROM pklimit_policy_stats() s, reads_before b
 WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND s.name = 'login' AND s.tenant IS NULL;

-- drop: the default row or one override; then the policy is unknown
SELECT pklimit_policy_drop('login', 'acme'), pklimit_policy_drop('login', 'acme');
SET platformkit.tenant = 'acme';
SELECT c.count, c.remaining FROM pklimit_check('bob', 'login', 0) c;
RESET platformkit.tenant;
SELECT pklimit_policy_drop('tight');

-- every error, each with its SQLSTATE; nothing recorded by any of them
SELECT count(*) AS rows_before FROM platformkit_limits \gset
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
  ($$SELECT pklimit_allow('k', 'nope')$$),
  ($$SELECT pklimit_check('k', 'tight')$$),
  ($$SELECT pklimit_count('k', 'nope')$$),
  ($$SELECT pklimit_forget('k', 'nope')$$),
  ($$SELECT pklimit_decrement('k', 'nope')$$),
  ($$SELECT pklimit_allow_all(ARRAY['k'], ARRAY['nope'])$$),
  ($$SELECT pklimit_allow(NULL, 'login')$$),
  ($$SELECT pklimit_allow('k', NULL::text)$$),
  ($$SELECT pklimit_allow('', 'login')$$),
  ($$SELECT pklimit_allow('k', '')$$),
  ($$SELECT pklimit_allow('k', repeat('p', 64))$$),
  ($$SELECT pklimit_allow('k', 'login', -1)$$),
  ($$SELECT pklimit_decrement('k', 'login', -1)$$),
  ($$SELECT pklimit_check_all(ARRAY['k'], ARRAY['login', 'api'])$$),
  ($$SELECT pklimit_check_all(ARRAY[]::text[], ARRAY[]::text[])$$),
  ($$SELECT pklimit_check_all(ARRAY['k', 'k'], ARRAY['login', 'login'])$$),
  ($$SELECT pklimit_check_all(ARRAY['k', NULL], ARRAY['login', 'login'])$$),
  ($$SELECT pklimit_check_all(ARRAY['k', 'j'], ARRAY['login', 'nope'])$$),
  ($$SELECT pklimit_allow_all(array_fill('k'::text, ARRAY[17]), array_fill('login'::text, ARRAY[17]))$$),
  ($$SELECT pklimit_stored_key('k', '')$$),
  ($$SELECT pklimit_node('k', NULL::text)$$),
  ($$SELECT pklimit_policy_set(NULL, 1, '1 hour')$$),
  ($$SELECT pklimit_policy_set('', 1, '1 hour')$$),
  ($$SELECT pklimit_policy_set(repeat('p', 64), 1, '1 hour')$$),
  ($$SELECT pklimit_policy_set('p', -1, '1 hour')$$),
  ($$SELECT pklimit_policy_set('p', NULL, '1 hour')$$),
  ($$SELECT pklimit_policy_set('p', 1, '0')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 month')$$),
  ($$SELECT pklimit_policy_set('p', 1, NULL)$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', algorithm => 'leaky')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', algorithm => NULL)$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', cost => -1)$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', record_refused => NULL)$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', block => '-1 hour')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', durable => NULL)$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', anchor => 'noon')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', algorithm => 'gcra', anchor => 'first')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', mode => 'loud')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', mode => NULL)$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', time_zone => 'Europe/Berlin')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', tenant => '')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 hour', tenant => repeat('t', 256))$$),
  ($$SELECT pklimit_policy_drop(NULL)$$),
  ($$SELECT pklimit_policy_drop('p', '')$$),
  ($$INSERT INTO platformkit_limit_policies (name, max_count, "window") VALUES ('p', -1, '1 hour')$$),
  ($$INSERT INTO platformkit_limit_policies (name, max_count, "window", mode) VALUES ('p', 1, '1 hour', 'loud')$$)
) AS t(q);
SELECT count(*) = :rows_before AS nothing_recorded FROM platformkit_limits;
SELECT count(*) AS policies_named_p FROM pklimit_policies WHERE name = 'p';

-- a row the owner wrote that no call could take is an error at the call
INSERT INTO platformkit_limit_policies (name, max_count, "window")
	VALUES ('monthly', 10, '1 month');
SELECT pg_temp.sqlstate_of($$SELECT pklimit_allow('k', 'monthly')$$);
DELETE FROM platformkit_limit_policies WHERE name = 'monthly';

-- Overloads: which spellings of a call resolve, and to which function.
SELECT pg_temp.sqlstate_of(q) AS outcome, q FROM (VALUES
  ($$SELECT pklimit_allow('k0', 'login')$$),
  ($$SELECT pklimit_allow('k0', 'login', 2)$$),
  ($$SELECT pklimit_allow('k0', 600, '1 minute')$$),
  ($$SELECT pklimit_allow('k0', 600, '1 minute', 2)$$),
  ($$SELECT pklimit_allow(key => 'k0', policy => 'login')$$),
  ($$SELECT pklimit_allow(key => 'k0', max_count => '10', "window" => '1 minute')$$),
  ($$SELECT pklimit_allow('k0', '10'::bigint, '1 minute')$$),
  ($$SELECT pklimit_allow('k0', '10', '1 minute'::interval)$$),
  ($$SELECT pklimit_check('k0', 'login')$$),
  ($$SELECT pklimit_check('k0', 600, '1 minute')$$),
  ($$SELECT pklimit_decrement('k0')$$),
  ($$SELECT pklimit_decrement('k0', 2)$$),
  ($$SELECT pklimit_decrement('k0', 2, true)$$),
  ($$SELECT pklimit_decrement('k0', 'login', 2)$$),
  ($$SELECT pklimit_count('k0', 'login')$$),
  ($$SELECT pklimit_allow('k0', 'login', NULL::bigint)$$),
  -- ambiguous: a NULL cost untyped
  ($$SELECT pklimit_allow('k0', 'login', NULL)$$),
  -- ambiguous: three untyped literals
  ($$SELECT pklimit_allow('k0', '10', '1 minute')$$),
  ($$SELECT pklimit_check('k0', '10', '1 minute')$$),
  ($$SELECT pklimit_allow('k0', NULL, '1 hour')$$),
  -- a different meaning: a string literal or untyped NULL cost now names a
  -- policy
  ($$SELECT pklimit_decrement('k0', '2')$$),
  ($$SELECT pklimit_decrement('k0', NULL)$$)
) AS t(q);
-- prepared statements: typed parameters resolve, untyped ones of three do not
PREPARE by_policy(text, text) AS SELECT pklimit_allow($1, $2);
EXECUTE by_policy('k1', 'login');
PREPARE two_untyped AS SELECT pklimit_allow($1, $2);
EXECUTE two_untyped('k1', 'login');
PREPARE typed_direct AS SELECT pklimit_allow($1, $2::bigint, $3::interval);
EXECUTE typed_direct('k1', 10, '1 minute');
SELECT pg_temp.sqlstate_of($$PREPARE three_untyped AS SELECT pklimit_allow($1, $2, $3)$$);
DEALLOCATE ALL;

-- Who may change a policy: not an application's role, a pklimit_admin
-- member; a tenant sees and changes only its own overrides.
SELECT pklimit_policy_set('login', 3, '36500 days');
SELECT pklimit_policy_set('login', 5, '36500 days', tenant => 'acme');
SELECT pklimit_policy_set('login', 7, '36500 days', tenant => 'globex');
CREATE ROLE regress_pklimit_policy_app NOSUPERUSER NOBYPASSRLS;
CREATE ROLE regress_pklimit_policy_admin NOSUPERUSER NOBYPASSRLS IN ROLE pklimit_admin;
SET ROLE regress_pklimit_policy_app;
SELECT pg_temp.sqlstate_of(q) AS outcome, q FROM (VALUES
  ($$SELECT pklimit_policy_set('login', 1000, '1 hour')$$),
  ($$SELECT pklimit_policy_drop('login')$$),
  ($$UPDATE platformkit_limit_policies SET max_count = 1000$$),
  ($$SELECT count(*) FROM platformkit_limit_policies$$),
  ($$SELECT pklimit_policy_stats()$$),
  ($$SELECT pklimit_allow('app', 'login')$$)
) AS t(q);
SELECT name, tenant, max_count FROM pklimit_policies ORDER BY name, tenant NULLS FIRST;
SET platformkit.tenant = 'acme';
SELECT name, tenant, max_count FROM pklimit_policies ORDER BY name, tenant NULLS FIRST;
SELECT c.allowed, c.remaining FROM pklimit_check('app', 'login') c;
RESET platformkit.tenant;
SET ROLE regress_pklimit_policy_admin;
SELECT name, tenant, max_count FROM pklimit_policies ORDER BY name, tenant NULLS FIRST;
SELECT pklimit_policy_set('login', 4, '36500 days');
SELECT pklimit_policy_set('login', 6, '36500 days', tenant => 'acme');
SELECT count(*) > 0 AS sees_stats FROM pklimit_policy_stats();
SET platformkit.tenant = 'acme';
SELECT name, tenant, max_count FROM pklimit_policies ORDER BY name, tenant NULLS FIRST;
SELECT pg_temp.sqlstate_of($$SELECT pklimit_policy_set('login', 1, '1 hour', tenant => 'globex')$$);
-- another tenant's row is not there to change
SELECT pklimit_policy_drop('login', 'globex');
WITH u AS (UPDATE platformkit_limit_policies SET max_count = 1
			WHERE tenant = 'globex' RETURNING 1)
SELECT count(*) AS updated FROM u;
RESET platformkit.tenant;
RESET ROLE;
SELECT name, tenant, max_count FROM pklimit_policies ORDER BY name, tenant NULLS FIRST;
-- a grant of every table gives no other role a policy to write, nor
-- TRUNCATE or TRIGGER on the table (taken back with a WARNING, shown in
-- pklimit_grants)
SET client_min_messages = error;
GRANT ALL ON ALL TABLES IN SCHEMA public TO regress_pklimit_policy_app;
RESET client_min_messages;
SELECT string_agg(privilege_type, ', ' ORDER BY privilege_type) AS app_holds
  FROM information_schema.role_table_grants
 WHERE table_name = 'platformkit_limit_policies' AND grantee = 'regress_pklimit_policy_app';
SET ROLE regress_pklimit_policy_app;
SELECT pg_temp.sqlstate_of(q) AS outcome, q FROM (VALUES
  ($$INSERT INTO platformkit_limit_policies (name, max_count, "window") VALUES ('mine', 1000000, '1 hour')$$),
  ($$INSERT INTO platformkit_limit_policies (name, tenant, max_count, "window") VALUES ('login', 'victim', 1000000, '1 hour')$$),
  ($$TRUNCATE platformkit_limit_policies$$)
) AS t(q);
WITH u AS (UPDATE platformkit_limit_policies SET max_count = 1000000 RETURNING 1)
SELECT count(*) AS updated FROM u;
WITH d AS (DELETE FROM platformkit_limit_policies RETURNING 1)
SELECT count(*) AS deleted FROM d;
RESET ROLE;
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM regress_pklimit_policy_app;
SELECT name, tenant, max_count FROM pklimit_policies ORDER BY name, tenant NULLS FIRST;

-- nothing a caller planted in its search_path runs as the table's owner
-- when a call or the view reads the policies
CREATE SCHEMA regress_planted AUTHORIZATION regress_pklimit_policy_app;
SET ROLE regress_pklimit_policy_app;
CREATE FUNCTION regress_planted.eq(text, text) RETURNS boolean LANGUAGE plpgsql
  AS $$ BEGIN RAISE NOTICE 'planted operator ran as %', current_user;
		   RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
CREATE OPERATOR regress_planted.= (leftarg = text, rightarg = text,
								   function = regress_planted.eq);
SET search_path = regress_planted, pg_catalog, public;
SELECT count(*) AS visible FROM pklimit_policies;
RESET ROLE;
SELECT pklimit_policy_set('login', 3, '36500 days');
SET ROLE regress_pklimit_policy_app;
SELECT pklimit_allow('planted', 'login');
RESET ROLE;
RESET search_path;
DROP SCHEMA regress_planted CASCADE;

DROP ROLE regress_pklimit_policy_app;
DROP ROLE regress_pklimit_policy_admin;

-- the table, its row level security and its privileges
SELECT relrowsecurity, relforcerowsecurity FROM pg_class
 WHERE oid = 'platformkit_limit_policies'::regclass;
SELECT grantee, string_agg(privilege_type, ', ' ORDER BY privilege_type)
  FROM information_schema.role_table_grants
 WHERE table_name = 'platformkit_limit_policies' AND grantee::name <> current_user
 GROUP BY grantee ORDER BY grantee;
SELECT p.oid::regprocedure AS function,
	   has_function_privilege('public', p.oid, 'EXECUTE') AS public_executes,
	   has_function_privilege('pklimit_admin', p.oid, 'EXECUTE') AS admin_executes
  FROM pg_proc p
 WHERE p.proname IN ('pklimit_policy_set', 'pklimit_policy_drop',
					 'pklimit_policy_stats')
 ORDER BY p.oid::regprocedure::text;
SELECT extconfig::regclass[] FROM pg_extension WHERE extname = 'pklimit';

-- (the memory path's key goes with its forget, not with a TRUNCATE)
SELECT pklimit_forget('m', 'api');
SELECT pklimit_policy_drop('login'), pklimit_policy_drop('login', 'acme'),
	   pklimit_policy_drop('login', 'globex'), pklimit_policy_drop('api'),
	   pklimit_policy_drop('upload');
TRUNCATE platformkit_limits;
