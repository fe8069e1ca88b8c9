-- pklimit_leases: concurrency limits (0.4.0).  Every function and every
-- error; held never above max_concurrent; release and renew of live,
-- wrong, released and expired tokens; leases apart from counts; recorded
-- whatever becomes of the caller's transaction, also a read-only one;
-- shadow mode and an unavailable store give a token that is no lease;
-- policies; tenants and a role that is neither superuser nor BYPASSRLS.

TRUNCATE platformkit_limits, platformkit_leases;
\i sql/include/sqlstate_of.sql
\pset null '(null)'

CREATE TEMP TABLE tok (name text PRIMARY KEY, token uuid);

-- two leases of 2 are granted, the third call is refused until one ends
INSERT INTO tok SELECT 'a', pklimit_acquire('export', 2, '1 hour');
SELECT token IS NOT NULL AS granted, held, max_concurrent,
	   retry_after = '0' AS no_wait, status
  FROM pklimit_acquire_check('export', 2, '1 hour');
SELECT token IS NOT NULL AS granted, held, max_concurrent,
	   retry_after BETWEEN '59 minutes' AND '1 hour' AS until_the_oldest_ends, status
  FROM pklimit_acquire_check('export', 2, '1 hour');
SELECT pklimit_acquire('export', 2, '1 hour') IS NULL AS refused;
-- a lower max_concurrent refuses while more are live; a higher one grants
SELECT token IS NULL AS refused, held FROM pklimit_acquire_check('export', 1, '1 hour');
SELECT token IS NOT NULL AS granted, held FROM pklimit_acquire_check('export', 3, '1 hour');
SELECT count(*) AS live, bool_and(expires_at > acquired_at) AS ordered,
	   count(*) FILTER (WHERE token = (SELECT token FROM tok WHERE name = 'a')) AS first_is_there
  FROM pklimit_leases('export');
-- oldest first
SELECT (array_agg(token ORDER BY acquired_at))[1] = (SELECT token FROM tok WHERE name = 'a') AS oldest_first,
	   array_agg(token) = array_agg(token ORDER BY acquired_at, token) AS in_order
  FROM pklimit_leases('export');

-- release: true once, for a live lease of the key only
SELECT pklimit_release('export', (SELECT token FROM tok WHERE name = 'a')) AS released,
	   pklimit_release('export', (SELECT token FROM tok WHERE name = 'a')) AS again,
	   pklimit_release('other', (SELECT token FROM pklimit_leases('export') LIMIT 1)) AS other_key,
	   pklimit_release('export', '00000000-0000-0000-0000-000000000000') AS wrong;
SELECT count(*) AS live FROM pklimit_leases('export');

-- renew: a live lease ends no sooner than lease from now; NULL: its own length
INSERT INTO tok SELECT 'r', pklimit_acquire('renewed', 1, '1 hour');
SELECT pklimit_renew('renewed', (SELECT token FROM tok WHERE name = 'r'), '3 hours') AS renewed;
SELECT expires_at - acquired_at BETWEEN '3 hours' AND '3 hours 1 minute' AS three_hours
  FROM pklimit_leases('renewed');
-- a shorter lease does not shorten it
SELECT pklimit_renew('renewed', (SELECT token FROM tok WHERE name = 'r'), '1 minute') AS renewed;
SELECT expires_at - acquired_at >= '3 hours' AS still_three_hours FROM pklimit_leases('renewed');
INSERT INTO tok SELECT 'n', pklimit_acquire('renewed_null', 1, '2 hours');
SELECT pklimit_renew('renewed_null', (SELECT token FROM tok WHERE name = 'n')) AS renewed;
SELECT expires_at - acquired_at BETWEEN '2 hours' AND '2 hours 1 minute' AS its_own_length
  FROM pklimit_leases('renewed_null');
SELECT pklimit_renew('renewed', '00000000-0000-0000-0000-000000000000') AS wrong,
	   pklimit_renew('other', (SELECT token FROM tok WHERE name = 'r')) AS other_key;

-- a lease ends by itself: not renewable, not releasable, its slot free
INSERT INTO tok SELECT 'e', pklimit_acquire('expiring', 1, '3 seconds');
SELECT pklimit_acquire('expiring', 1, '1 hour') IS NULL AS refused_while_live;
DO $$ BEGIN
	FOR i IN 1 .. 1500 LOOP
		EXIT WHEN NOT EXISTS (SELECT FROM pklimit_leases('expiring'));
		PERFORM pg_sleep(0.01);
	END LOOP;
END $$;
SELECT count(*) AS live_after_expiry FROM pklimit_leases('expiring');
SELECT pklimit_renew('expiring', (SELECT token FROM tok WHERE name = 'e')) AS renew_expired,
	   pklimit_release('expiring', (SELECT token FROM tok WHERE name = 'e')) AS release_expired;
SELECT token IS NOT NULL AS granted, held FROM pklimit_acquire_check('expiring', 1, '1 hour');

-- max_concurrent 0 refuses every acquire, and no lease will end to let one in
SELECT token IS NULL AS refused, held, retry_after, status
  FROM pklimit_acquire_check('closed', 0, '1 hour');
-- the cap: 1,000 leases on one key
SELECT count(*) FILTER (WHERE t IS NOT NULL) AS granted
  FROM generate_series(1, 1001) i,
	   LATERAL pklimit_acquire('wide' || repeat('', i), 1000, '1 hour') t;
SELECT count(*) AS live FROM pklimit_leases('wide');

-- a lease is no count, and a count no lease
SELECT pklimit_allow('export', 1, '1 hour') AS counted, pklimit_count('export') AS count;
SELECT count(*) AS live FROM pklimit_leases('export');
SELECT pklimit_forget('export') AS forgot;
SELECT count(*) AS live FROM pklimit_leases('export');
SELECT key, cardinality(tokens) AS leases FROM platformkit_leases ORDER BY key;

-- recorded whatever becomes of the caller's transaction
BEGIN;
INSERT INTO tok SELECT 'rb', pklimit_acquire('rollback', 1, '1 hour');
ROLLBACK;
SELECT count(*) AS held_after_rollback FROM pklimit_leases('rollback');
SELECT token FROM pklimit_leases('rollback') \gset rolled_
BEGIN;
SELECT pklimit_release('rollback', :'rolled_token') AS released;
ROLLBACK;
SELECT count(*) AS held_after_release_rolled_back FROM pklimit_leases('rollback');
-- and in a read-only transaction
BEGIN READ ONLY;
SELECT token IS NOT NULL AS granted, status FROM pklimit_acquire_check('read_only', 1, '1 hour');
SELECT count(*) AS seen_in_the_same_transaction FROM pklimit_leases('read_only');
SELECT pklimit_release('read_only', (SELECT token FROM pklimit_leases('read_only'))) AS released;
COMMIT;
SELECT count(*) AS live FROM pklimit_leases('read_only');

-- shadow mode: a refusal gives a token that is no lease
SELECT pklimit_acquire('shadowed', 1, '1 hour') IS NOT NULL AS granted;
SET pklimit.shadow_mode = on;
SELECT token IS NOT NULL AS token_given, held, status
  FROM pklimit_acquire_check('shadowed', 1, '1 hour') \gset shadow_
\echo :shadow_token_given :shadow_held :shadow_status
SELECT token AS shadow_token FROM pklimit_acquire_check('shadowed', 1, '1 hour') \gset
SELECT pklimit_release('shadowed', :'shadow_token') AS release_of_shadow_token,
	   pklimit_renew('shadowed', :'shadow_token') AS renew_of_shadow_token;
RESET pklimit.shadow_mode;
SELECT count(*) AS live FROM pklimit_leases('shadowed');
SELECT calls, allowed, refused, shadow_refused
  FROM pklimit_stats WHERE datname = current_database() \gset stats_
SELECT pklimit_acquire('shadowed', 1, '1 hour') IS NULL AS refused;
SELECT calls - :stats_calls AS calls, refused - :stats_refused AS refused
  FROM pklimit_stats WHERE datname = current_database();

-- an unavailable store: its row locked in the caller's own transaction
SELECT pklimit_acquire('unreachable', 5, '1 hour') IS NOT NULL AS granted;
BEGIN;
SELECT key FROM platformkit_leases WHERE key = 'g:unreachable' FOR UPDATE;
SET LOCAL pklimit.timeout = '300ms';
-- allow (the default): a token that is no lease, with a warning
SELECT token IS NOT NULL AS token_given, held, retry_after, status
  FROM pklimit_acquire_check('unreachable', 5, '1 hour');
SET LOCAL pklimit.on_unavailable = deny;
SELECT pklimit_acquire('unreachable', 5, '1 hour') AS denied;
SELECT pklimit_release('unreachable', '00000000-0000-0000-0000-000000000000') AS release_unknown,
	   pklimit_renew('unreachable', '00000000-0000-0000-0000-000000000000') AS renew_unknown;
-- bad input stays an error whatever on_unavailable says
SELECT pg_temp.sqlstate_of($$SELECT pklimit_acquire('unreachable', -1, '1 hour')$$);
SET LOCAL pklimit.on_unavailable = error;
\set VERBOSITY sqlstate
SELECT pklimit_acquire('unreachable', 5, '1 hour');
\set VERBOSITY default
ROLLBACK;
SELECT count(*) AS live FROM pklimit_leases('unreachable');

-- every error, with its SQLSTATE, and nothing recorded by any
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
	($$SELECT pklimit_acquire(NULL, 1, '1 hour')$$),
	($$SELECT pklimit_acquire('', 1, '1 hour')$$),
	($$SELECT pklimit_acquire('k', NULL, '1 hour')$$),
	($$SELECT pklimit_acquire('k', -1, '1 hour')$$),
	($$SELECT pklimit_acquire('k', 1001, '1 hour')$$),
	($$SELECT pklimit_acquire('k', 1, NULL)$$),
	($$SELECT pklimit_acquire('k', 1, '0 seconds')$$),
	($$SELECT pklimit_acquire('k', 1, '-1 hour')$$),
	($$SELECT pklimit_acquire('k', 1, '1 month')$$),
	($$SELECT pklimit_acquire_check('', 1, '1 hour')$$),
	($$SELECT pklimit_acquire_check('k', 2000, '1 hour')$$),
	($$SELECT pklimit_release(NULL, gen_random_uuid())$$),
	($$SELECT pklimit_release('', gen_random_uuid())$$),
	($$SELECT pklimit_release('k', NULL)$$),
	($$SELECT pklimit_renew(NULL, gen_random_uuid())$$),
	($$SELECT pklimit_renew('k', NULL)$$),
	($$SELECT pklimit_renew('k', gen_random_uuid(), '0 seconds')$$),
	($$SELECT pklimit_renew('k', gen_random_uuid(), '1 year')$$),
	($$SELECT pklimit_leases(NULL)$$),
	($$SELECT pklimit_leases('')$$),
	($$SELECT pklimit_acquire('k', 'no_such_policy')$$),
	($$SELECT pklimit_acquire('k', NULL::text)$$),
	($$SELECT pklimit_acquire_check('k', '')$$)
) AS t(q);
SELECT count(*) AS rows_for_k FROM platformkit_leases WHERE key = 'g:k';

-- policies: max_count is max_concurrent, the window the lease
SELECT pklimit_policy_set('exports', 2, '15 minutes');
SELECT pklimit_policy_set('exports', 1, '15 minutes', tenant => 'acme');
SELECT pklimit_policy_set('exports_shadow', 1, '15 minutes', mode => 'shadow');
SELECT pklimit_policy_set('exports_memory', 1, '15 minutes', durable => false);
SELECT pklimit_policy_set('exports_daily', 1, '1 day', time_zone => 'UTC');
SELECT pklimit_policy_set('exports_wide', 5000, '15 minutes');
SELECT token IS NOT NULL AS granted, held, max_concurrent, status
  FROM generate_series(1, 3) i, LATERAL pklimit_acquire_check('p' || (0 * i + 1), 'exports');
SELECT expires_at - acquired_at AS lease FROM pklimit_leases('p1') LIMIT 1;
-- a key's leases are the key's, whichever policy or number a call names
SELECT token IS NULL AS refused, held FROM pklimit_acquire_check('p1', 2, '1 hour');
SELECT pklimit_acquire('s1', 'exports_shadow') IS NOT NULL AS granted,
	   pklimit_acquire('s1', 'exports_shadow') IS NOT NULL AS shadow_token;
SELECT status FROM pklimit_acquire_check('s1', 'exports_shadow');
SELECT count(*) AS live FROM pklimit_leases('s1');
SELECT name, calls, allowed, refused, would_refuse FROM pklimit_policy_stats()
 WHERE name LIKE 'exports%' AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
 ORDER BY name, tenant NULLS FIRST;
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
	($$SELECT pklimit_acquire('k', 'exports_memory')$$),
	($$SELECT pklimit_acquire('k', 'exports_daily')$$),
	($$SELECT pklimit_acquire_check('k', 'exports_wide')$$)
) AS t(q);

-- tenants: a lease is its tenant's; as a role that is neither superuser nor
-- BYPASSRLS, with only pklimit's functions
CREATE ROLE regress_pklimit_lease_app NOSUPERUSER NOBYPASSRLS;
SET ROLE regress_pklimit_lease_app;
SET platformkit.tenant = 'acme';
SELECT token IS NOT NULL AS granted, held, max_concurrent
  FROM pklimit_acquire_check('p1', 'exports');
SELECT token IS NULL AS refused, held FROM pklimit_acquire_check('p1', 'exports');
SELECT token AS acme_token FROM pklimit_leases('p1') \gset
SELECT count(*) AS acme_live FROM pklimit_leases('p1');
SET platformkit.tenant = 'globex';
SELECT count(*) AS globex_sees FROM pklimit_leases('p1');
SELECT pklimit_release('p1', :'acme_token') AS globex_releases,
	   pklimit_renew('p1', :'acme_token') AS globex_renews;
SELECT token IS NOT NULL AS globex_granted, held FROM pklimit_acquire_check('p1', 'exports');
RESET platformkit.tenant;
SELECT count(*) AS default_tenant_sees FROM pklimit_leases('p1');
SELECT pg_temp.sqlstate_of($$SELECT * FROM platformkit_leases$$);
SELECT pg_temp.sqlstate_of($$DELETE FROM platformkit_leases$$);
SET platformkit.tenant = 'acme';
SELECT pklimit_release('p1', :'acme_token') AS acme_releases;
RESET platformkit.tenant;
RESET ROLE;
DROP ROLE regress_pklimit_lease_app;
SELECT key, cardinality(tokens) AS leases FROM platformkit_leases
 WHERE key LIKE '%p1' ORDER BY key;

-- the purge: a row goes once its last lease ended more than retention ago
SELECT pklimit_acquire('purged', 1, '100 milliseconds') IS NOT NULL AS granted;
DO $$ BEGIN
	FOR i IN 1 .. 600 LOOP
		EXIT WHEN NOT EXISTS (SELECT FROM pklimit_leases('purged'));
		PERFORM pg_sleep(0.01);
	END LOOP;
END $$;
SELECT pklimit_purge('1 hour') AS purged_with_retention;
SELECT pklimit_purge('0 seconds') AS purged;
SELECT count(*) FILTER (WHERE key = 'g:purged') AS purged_row,
	   count(*) FILTER (WHERE key = 'g:wide') AS live_row
  FROM platformkit_leases;

-- the table as pklimit keeps it
SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = 'platformkit_leases'::regclass;
SELECT polname, polcmd, pg_get_expr(polqual, polrelid) AS using_
  FROM pg_policy WHERE polrelid = 'platformkit_leases'::regclass;
SELECT grantee, privilege_type FROM information_schema.role_table_grants
 WHERE table_name = 'platformkit_leases' AND grantee::name <> current_user;

SELECT pklimit_policy_drop(name, tenant) FROM pklimit_policies WHERE name LIKE 'exports%';
TRUNCATE platformkit_limits, platformkit_leases;
