-- pklimit_leases: concurrency limits (0.4.0, docs/leases.md), called as an
-- application's role: neither superuser nor BYPASSRLS, with EXECUTE through
-- PUBLIC as the README gives it.  Every lease function and every error with
-- its SQLSTATE; held never above max_concurrent, and retry_after; release
-- and renew of live, wrong, released, expired and not-a-lease tokens;
-- expiry; leases apart from counts; recorded whatever becomes of the
-- caller's transaction, also a read-only one; shadow mode; statistics; an
-- unavailable store; policies; tenants; the purge; the table as pklimit
-- keeps it.  No token or timestamp is printed: comparisons are.

TRUNCATE platformkit_limits, platformkit_leases;
\i sql/include/sqlstate_of.sql
\pset null '(null)'

CREATE ROLE regress_pklimit_lease_app NOSUPERUSER NOBYPASSRLS;
CREATE ROLE regress_pklimit_lease_admin NOSUPERUSER NOBYPASSRLS IN ROLE pklimit_admin;
-- the application's role executes every lease function through PUBLIC
SELECT p.oid::regprocedure AS function,
	   has_function_privilege('public', p.oid, 'EXECUTE') AS public_executes,
	   has_function_privilege('regress_pklimit_lease_app', p.oid, 'EXECUTE') AS app_executes
  FROM pg_proc p
 WHERE p.proname IN ('pklimit_acquire', 'pklimit_acquire_check', 'pklimit_release',
					 'pklimit_renew', 'pklimit_leases')
   AND p.pronamespace = (SELECT extnamespace FROM pg_extension WHERE extname = 'pklimit')
 ORDER BY p.oid::regprocedure::text;

SET ROLE regress_pklimit_lease_app;
SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user;
CREATE TEMP TABLE tok (name text PRIMARY KEY, token uuid);

-- acquire: a lease while fewer than max_concurrent are live
INSERT INTO tok SELECT 'a', pklimit_acquire('export', 2, '1 hour');
SELECT token IS NOT NULL AS granted FROM tok WHERE name = 'a';
WITH c AS (SELECT * FROM pklimit_acquire_check('export', 2, '1 hour')),
	 i AS (INSERT INTO tok SELECT 'b', token FROM c)
SELECT token IS NOT NULL AS granted, held, max_concurrent,
	   retry_after = '0' AS retry_after_zero, status
  FROM c;
-- then refused: no token, held the live leases, retry_after the time until
-- the oldest live lease ends (bounded by the statement's start and end)
SELECT token IS NULL AS refused, held, max_concurrent,
	   retry_after BETWEEN (SELECT expires_at FROM pklimit_leases('export') LIMIT 1) - clock_timestamp()
					   AND (SELECT expires_at FROM pklimit_leases('export') LIMIT 1) - statement_timestamp()
		 AS until_the_oldest_ends,
	   status
  FROM pklimit_acquire_check('export', 2, '1 hour');
SELECT pklimit_acquire('export', 2, '1 hour') IS NULL AS refused;
-- max_concurrent is the call's: a lower one refuses while more are live, a
-- higher one grants
SELECT token IS NULL AS refused, held, max_concurrent
  FROM pklimit_acquire_check('export', 1, '1 hour');
WITH c AS (SELECT * FROM pklimit_acquire_check('export', 3, '1 hour')),
	 i AS (INSERT INTO tok SELECT 'c', token FROM c)
SELECT token IS NOT NULL AS granted, held, max_concurrent FROM c;

-- pklimit_leases: the live leases, by acquired_at then token; each ends its
-- lease after it was acquired
SELECT count(*) AS live,
	   bool_and(expires_at - acquired_at = '1 hour') AS each_an_hour,
	   array_agg(token) = (SELECT array_agg(token ORDER BY name) FROM tok
						   WHERE name IN ('a', 'b', 'c')) AS in_the_order_acquired,
	   array_agg(token) = array_agg(token ORDER BY acquired_at, token) AS ordered
  FROM pklimit_leases('export');

-- retry_after with leases of 1, 2 and 3 hours, taken in that order: until
-- enough of them end for the call to be granted: the 1-hour lease with
-- max_concurrent 3, the 2-hour one with 2, the 3-hour one with 1, and NULL
-- with 0 (none will)
SELECT pklimit_acquire('mixed', 3, '1 hour') IS NOT NULL AS one_hour,
	   pklimit_acquire('mixed', 3, '2 hours') IS NOT NULL AS two_hours,
	   pklimit_acquire('mixed', 3, '3 hours') IS NOT NULL AS three_hours;
WITH mixed_ends AS MATERIALIZED (
  SELECT row_number() OVER (ORDER BY expires_at) AS n, expires_at FROM pklimit_leases('mixed'))
SELECT m AS max_concurrent, token IS NULL AS refused, held,
	   retry_after BETWEEN e.expires_at - clock_timestamp()
					   AND e.expires_at - statement_timestamp()
		 AS until_enough_end,
	   retry_after IS NULL AS never
  FROM unnest(ARRAY[3, 2, 1, 0]) WITH ORDINALITY AS t(m, o)
	   LEFT JOIN mixed_ends e ON e.n = 4 - t.m,
	   LATERAL pklimit_acquire_check('mixed', m, '1 hour')
 ORDER BY o;
-- max_concurrent 0 refuses every acquire; with no live lease there is
-- nothing to wait for
SELECT token IS NULL AS refused, held, max_concurrent, retry_after, status
  FROM pklimit_acquire_check('closed', 0, '1 hour');
SELECT count(*) AS live FROM pklimit_leases('closed');

-- release: true once, for a live lease of the key; false, and nothing
-- changed, for a released token, another key's, a wrong one
SELECT pklimit_release('export', (SELECT token FROM tok WHERE name = 'a')) AS released,
	   pklimit_release('export', (SELECT token FROM tok WHERE name = 'a')) AS released_again,
	   pklimit_release('mixed', (SELECT token FROM tok WHERE name = 'b')) AS other_key,
	   pklimit_release('export', gen_random_uuid()) AS wrong_token;
SELECT count(*) AS live,
	   array_agg(token) = (SELECT array_agg(token ORDER BY name) FROM tok
						   WHERE name IN ('b', 'c')) AS the_others_left
  FROM pklimit_leases('export');
-- the slot is free again
SELECT token IS NOT NULL AS granted, held FROM pklimit_acquire_check('export', 3, '1 hour');

-- renew: a live lease's expires_at becomes the later of itself and
-- now + lease
INSERT INTO tok SELECT 'r', pklimit_acquire('renewed', 1, '1 hour');
SELECT expires_at AS first_end FROM pklimit_leases('renewed') \gset
SELECT clock_timestamp() AS before_renew \gset
SELECT pklimit_renew('renewed', (SELECT token FROM tok WHERE name = 'r'), '3 hours') AS renewed;
SELECT clock_timestamp() AS after_renew \gset
SELECT expires_at > :'first_end' AS later,
	   expires_at BETWEEN :'before_renew'::timestamptz + '3 hours'
					  AND :'after_renew'::timestamptz + '3 hours' AS three_hours_from_the_renewal
  FROM pklimit_leases('renewed');
SELECT expires_at AS renewed_end FROM pklimit_leases('renewed') \gset
-- a shorter lease does not shorten it, nor does NULL, the lease's own
-- length (an hour): both true, expires_at as it was
SELECT pklimit_renew('renewed', (SELECT token FROM tok WHERE name = 'r'), '1 minute') AS renewed_shorter,
	   pklimit_renew('renewed', (SELECT token FROM tok WHERE name = 'r')) AS renewed_own_length;
SELECT expires_at = :'renewed_end' AS unchanged FROM pklimit_leases('renewed');
-- NULL: the length the lease was acquired with
INSERT INTO tok SELECT 'n', pklimit_acquire('renewed_null', 1, '2 hours');
SELECT expires_at AS first_end FROM pklimit_leases('renewed_null') \gset
SELECT clock_timestamp() AS before_renew \gset
SELECT pklimit_renew('renewed_null', (SELECT token FROM tok WHERE name = 'n'), NULL) AS renewed;
SELECT clock_timestamp() AS after_renew \gset
SELECT expires_at > :'first_end' AS later,
	   expires_at BETWEEN :'before_renew'::timestamptz + '2 hours'
					  AND :'after_renew'::timestamptz + '2 hours' AS its_own_length_from_the_renewal
  FROM pklimit_leases('renewed_null');
-- false for a wrong token, another key's, a released one
SELECT pklimit_renew('renewed', gen_random_uuid()) AS wrong_token,
	   pklimit_renew('export', (SELECT token FROM tok WHERE name = 'r')) AS other_key,
	   pklimit_renew('export', (SELECT token FROM tok WHERE name = 'a'), '1 hour') AS released_token;

-- a lease ends by itself at its expires_at: held until then, afterwards
-- neither renewed nor released, and its slot free (it counts no more)
INSERT INTO tok SELECT 'long', pklimit_acquire('expiring', 2, '1 hour');
INSERT INTO tok SELECT 'e', pklimit_acquire('expiring', 2, '500 milliseconds');
SELECT l.expires_at AS short_end FROM pklimit_leases('expiring') l
  JOIN tok ON tok.token = l.token AND tok.name = 'e' \gset
-- refused while it is live, as the clock says when the call ended (or, on
-- a machine slow enough to reach its end, granted once the call began
-- after it; a lease so granted is released below)
WITH c AS (SELECT * FROM pklimit_acquire_check('expiring', 2, '1 hour')),
	 i AS (INSERT INTO tok SELECT 'late', token FROM c)
SELECT CASE WHEN clock_timestamp() < :'short_end' THEN token IS NULL AND held = 2
			WHEN statement_timestamp() >= :'short_end' THEN token IS NOT NULL AND held = 2
			ELSE held = 2 END AS as_the_short_lease_says
  FROM c;
SELECT bool_and(pklimit_release('expiring', token)) IS NOT FALSE AS late_lease_released
  FROM tok WHERE name = 'late' AND token IS NOT NULL;
DO $$ BEGIN
	FOR i IN 1 .. 3000 LOOP
		EXIT WHEN NOT EXISTS (SELECT FROM pklimit_leases('expiring') l
							  JOIN tok ON tok.token = l.token AND tok.name = 'e');
		PERFORM pg_sleep(0.01);
	END LOOP;
END $$;
SELECT count(*) FILTER (WHERE l.token = (SELECT token FROM tok WHERE name = 'e')) AS short_live,
	   count(*) FILTER (WHERE l.token = (SELECT token FROM tok WHERE name = 'long')) AS long_live
  FROM pklimit_leases('expiring') l;
SELECT pklimit_renew('expiring', (SELECT token FROM tok WHERE name = 'e'), '1 hour') AS renew_expired,
	   pklimit_release('expiring', (SELECT token FROM tok WHERE name = 'e')) AS release_expired;
SELECT token IS NOT NULL AS granted, held FROM pklimit_acquire_check('expiring', 2, '1 hour');

-- the cap: 1,000 leases live on one key, and max_concurrent 1000 accepted
SELECT count(pklimit_acquire('wide', 1000, '1 hour')) AS granted
  FROM generate_series(1, 1001);
SELECT token IS NULL AS refused, held, max_concurrent
  FROM pklimit_acquire_check('wide', 1000, '1 hour');
SELECT count(*) AS live FROM pklimit_leases('wide');

-- a key's leases are apart from its count: a lease changes no count, an
-- event or a forget no lease
SELECT pklimit_count('both') AS count_before;
INSERT INTO tok SELECT 'both', pklimit_acquire('both', 5, '1 hour');
SELECT pklimit_count('both') AS count_after_acquire;
SELECT pklimit_allow('both', 1, '1 hour') AS allowed, pklimit_allow('both', 1, '1 hour') AS allowed_again;
SELECT count(*) AS held_after_events FROM pklimit_leases('both');
SELECT token IS NOT NULL AS granted, held FROM pklimit_acquire_check('both', 2, '1 hour');
SELECT pklimit_count('both') AS count_after_acquires;
SELECT pklimit_forget('both') AS forgot;
SELECT count(*) AS held_after_forget FROM pklimit_leases('both');
SELECT pklimit_release('both', (SELECT token FROM tok WHERE name = 'both')) AS released;
SELECT pklimit_allow('both', 1, '1 hour') AS allowed_after_forget, pklimit_count('both') AS count;

-- recorded whatever becomes of the caller's transaction: a lease acquired
-- in one that rolls back is held; a renewal or a release in one that rolls
-- back is made
BEGIN;
SELECT pklimit_acquire('rollback', 1, '1 hour') IS NOT NULL AS granted;
ROLLBACK;
SELECT count(*) AS held_after_rollback FROM pklimit_leases('rollback');
SELECT token AS rolled_back_token FROM pklimit_leases('rollback') \gset
SELECT token IS NULL AS refused FROM pklimit_acquire_check('rollback', 1, '1 hour');
BEGIN;
SELECT pklimit_renew('rollback', :'rolled_back_token', '5 hours') AS renewed;
ROLLBACK;
SELECT expires_at - acquired_at > '4 hours' AS renewal_kept FROM pklimit_leases('rollback');
BEGIN;
SELECT pklimit_release('rollback', :'rolled_back_token') AS released;
ROLLBACK;
SELECT count(*) AS held_after_release_rolled_back FROM pklimit_leases('rollback');
SELECT pklimit_release('rollback', :'rolled_back_token') AS released_again;
-- a transaction that failed after its acquire: held too
BEGIN;
SELECT pklimit_acquire('rollback', 1, '1 hour') IS NOT NULL AS granted;
SELECT 1 / 0;
ROLLBACK;
SELECT count(*) AS held_after_error FROM pklimit_leases('rollback');

-- a read-only transaction acquires, renews and releases, and pklimit_leases
-- reads the table as last committed, whatever the transaction's snapshot
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
SELECT count(*) AS live_before FROM pklimit_leases('read_only');
SELECT token IS NOT NULL AS granted, held, status
  FROM pklimit_acquire_check('read_only', 1, '1 hour');
SELECT count(*) AS live_in_the_same_snapshot FROM pklimit_leases('read_only');
SELECT token AS read_only_token FROM pklimit_leases('read_only') \gset
SELECT pklimit_renew('read_only', :'read_only_token', '2 hours') AS renewed;
SELECT expires_at - acquired_at >= '2 hours' AS renewed_seen FROM pklimit_leases('read_only');
SELECT pklimit_release('read_only', :'read_only_token') AS released;
SELECT count(*) AS live_after_release FROM pklimit_leases('read_only');
COMMIT;

-- shadow mode: a refusal answers a random token that is no lease, with
-- status shadow; a release or a renewal of it is false
INSERT INTO tok SELECT 'sh', pklimit_acquire('shadowed', 1, '1 hour');
SET pklimit.shadow_mode = on;
SELECT token IS NOT NULL AS token_given, held, max_concurrent,
	   retry_after > '0' AS retry_after_given, status
  FROM pklimit_acquire_check('shadowed', 1, '1 hour');
SELECT token AS shadow_token FROM pklimit_acquire_check('shadowed', 1, '1 hour') \gset
SELECT :'shadow_token'::uuid <> (SELECT token FROM tok WHERE name = 'sh') AS not_the_lease,
	   pklimit_acquire('shadowed', 1, '1 hour') IS NOT NULL AS plain_form_gives_one;
SELECT pklimit_release('shadowed', :'shadow_token') AS release_of_shadow_token,
	   pklimit_renew('shadowed', :'shadow_token') AS renew_of_shadow_token;
-- where a slot is free it grants as usual
SELECT token IS NOT NULL AS granted, held, status
  FROM pklimit_acquire_check('shadowed_free', 1, '1 hour');
RESET pklimit.shadow_mode;
SELECT count(*) AS live,
	   bool_and(token = (SELECT token FROM tok WHERE name = 'sh')) AS only_the_lease
  FROM pklimit_leases('shadowed');

-- statistics: an acquire is a call (granted allowed, refused refused, a
-- shadow refusal allowed and shadow_refused); release, renew and
-- pklimit_leases are not counted
RESET ROLE;
SELECT calls, allowed, refused, shadow_refused
  FROM pklimit_stats WHERE datname = current_database() \gset stats_
SET ROLE regress_pklimit_lease_app;
SELECT pklimit_acquire('counted', 1, '1 hour') IS NOT NULL AS granted,
	   pklimit_acquire('counted', 1, '1 hour') IS NULL AS refused;
SET pklimit.shadow_mode = on;
SELECT token IS NOT NULL AS token_given, status FROM pklimit_acquire_check('counted', 1, '1 hour');
RESET pklimit.shadow_mode;
SELECT pklimit_renew('counted', (SELECT token FROM pklimit_leases('counted'))) AS renewed;
SELECT pklimit_release('counted', (SELECT token FROM pklimit_leases('counted'))) AS released;
SELECT count(*) AS live FROM pklimit_leases('counted');
RESET ROLE;
SELECT calls - :stats_calls AS calls, allowed - :stats_allowed AS allowed,
	   refused - :stats_refused AS refused, shadow_refused - :stats_shadow_refused AS shadow_refused
  FROM pklimit_stats WHERE datname = current_database();

-- an unavailable store: the key's row locked by the caller's own
-- transaction for the whole of pklimit.timeout
SET ROLE regress_pklimit_lease_app;
SELECT pklimit_acquire('unreachable', 5, '1 hour') IS NOT NULL AS granted;
RESET ROLE;
BEGIN;
SELECT count(*) AS locked FROM (SELECT FROM platformkit_leases
								 WHERE key = 'g:unreachable' FOR UPDATE) l;
SET LOCAL ROLE regress_pklimit_lease_app;
SET LOCAL pklimit.timeout = '300ms';
-- allow (the default): a token that is no lease, held and retry_after
-- NULL, with a warning
SELECT token IS NOT NULL AS token_given, held, max_concurrent, retry_after, status
  FROM pklimit_acquire_check('unreachable', 5, '1 hour');
SELECT token AS unavailable_token FROM pklimit_acquire_check('unreachable', 5, '1 hour') \gset
SET LOCAL pklimit.on_unavailable = deny;
SELECT pklimit_acquire('unreachable', 5, '1 hour') AS denied;
SELECT token, held, max_concurrent, retry_after, status
  FROM pklimit_acquire_check('unreachable', 5, '1 hour');
-- release and renew: NULL, with a warning
SELECT pklimit_release('unreachable', gen_random_uuid()) AS release_unavailable;
SELECT pklimit_renew('unreachable', gen_random_uuid()) AS renew_unavailable;
-- bad input stays an error whatever on_unavailable says
SELECT pg_temp.sqlstate_of($$SELECT pklimit_acquire('unreachable', -1, '1 hour')$$);
SET LOCAL pklimit.on_unavailable = error;
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
	($$SELECT pklimit_acquire('unreachable', 5, '1 hour')$$),
	($$SELECT pklimit_acquire_check('unreachable', 5, '1 hour')$$),
	($$SELECT pklimit_release('unreachable', gen_random_uuid())$$),
	($$SELECT pklimit_renew('unreachable', gen_random_uuid())$$)
) AS t(q);
ROLLBACK;
SET ROLE regress_pklimit_lease_app;
SELECT count(*) AS live FROM pklimit_leases('unreachable');
SELECT pklimit_release('unreachable', :'unavailable_token') AS release_of_allowed_token;

-- every error, with its SQLSTATE
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
	($$SELECT pklimit_acquire(NULL, 1, '1 hour')$$),
	($$SELECT pklimit_acquire('', 1, '1 hour')$$),
	($$SELECT pklimit_acquire('bad', NULL, '1 hour')$$),
	($$SELECT pklimit_acquire('bad', -1, '1 hour')$$),
	($$SELECT pklimit_acquire('bad', 1001, '1 hour')$$),
	($$SELECT pklimit_acquire('bad', 9223372036854775807, '1 hour')$$),
	($$SELECT pklimit_acquire('bad', 1, NULL)$$),
	($$SELECT pklimit_acquire('bad', 1, '0 seconds')$$),
	($$SELECT pklimit_acquire('bad', 1, '-1 hour')$$),
	($$SELECT pklimit_acquire('bad', 1, '1 month')$$),
	($$SELECT pklimit_acquire('bad', 1, '1 year')$$),
	($$SELECT pklimit_acquire('bad', 1, '3650001 days')$$),
	($$SELECT pklimit_acquire_check(NULL, 1, '1 hour')$$),
	($$SELECT pklimit_acquire_check('', 1, '1 hour')$$),
	($$SELECT pklimit_acquire_check('bad', NULL, '1 hour')$$),
	($$SELECT pklimit_acquire_check('bad', 2000, '1 hour')$$),
	($$SELECT pklimit_acquire_check('bad', 1, NULL)$$),
	($$SELECT pklimit_acquire_check('bad', 1, '-1 second')$$),
	($$SELECT pklimit_release(NULL, gen_random_uuid())$$),
	($$SELECT pklimit_release('', gen_random_uuid())$$),
	($$SELECT pklimit_release('bad', NULL)$$),
	($$SELECT pklimit_renew(NULL, gen_random_uuid())$$),
	($$SELECT pklimit_renew('', gen_random_uuid())$$),
	($$SELECT pklimit_renew('bad', NULL)$$),
	($$SELECT pklimit_renew('bad', gen_random_uuid(), '0 seconds')$$),
	($$SELECT pklimit_renew('bad', gen_random_uuid(), '-5 minutes')$$),
	($$SELECT pklimit_renew('bad', gen_random_uuid(), '1 year')$$),
	($$SELECT pklimit_renew('bad', gen_random_uuid(), '3650001 days')$$),
	($$SELECT pklimit_renew('bad', gen_random_uuid(), NULL)$$),
	($$SELECT pklimit_leases(NULL)$$),
	($$SELECT pklimit_leases('')$$),
	($$SELECT pklimit_acquire(NULL, 'exports')$$),
	($$SELECT pklimit_acquire('bad', NULL::text)$$),
	($$SELECT pklimit_acquire('bad', '')$$),
	($$SELECT pklimit_acquire('bad', 'no_such_policy')$$),
	($$SELECT pklimit_acquire_check('', 'exports')$$),
	($$SELECT pklimit_acquire_check('bad', NULL::text)$$),
	($$SELECT pklimit_acquire_check('bad', 'no_such_policy')$$)
) AS t(q);

-- policies: set by a member of pklimit_admin, not by the application
SELECT pg_temp.sqlstate_of($$SELECT pklimit_policy_set('exports', 2, '15 minutes')$$);
SET ROLE regress_pklimit_lease_admin;
SELECT pklimit_policy_set('exports', 2, '15 minutes');
SELECT pklimit_policy_set('exports', 1, '10 minutes', tenant => 'acme');
SELECT pklimit_policy_set('exports_shadow', 1, '15 minutes', mode => 'shadow');
SELECT pklimit_policy_set('exports_closed', 0, '15 minutes');
SELECT pklimit_policy_set('exports_cap', 1000, '15 minutes');
SELECT pklimit_policy_set('exports_memory', 1, '15 minutes', durable => false);
SELECT pklimit_policy_set('exports_daily', 1, '1 day', time_zone => 'UTC');
SELECT pklimit_policy_set('exports_wide', 1001, '15 minutes');
SET ROLE regress_pklimit_lease_app;
-- the policy's max_count is max_concurrent, its window the lease
-- (|| left(i::text, 0): one call per row)
SELECT token IS NOT NULL AS granted, held, max_concurrent, status
  FROM generate_series(1, 3) i, LATERAL pklimit_acquire_check('p1' || left(i::text, 0), 'exports');
SELECT count(*) AS live, bool_and(expires_at - acquired_at = '15 minutes') AS leases_of_the_window
  FROM pklimit_leases('p1');
SELECT pklimit_acquire('p1', 'exports') IS NULL AS refused;
-- a key's leases are the key's, whichever policy or number a call names
SELECT token IS NULL AS refused, held FROM pklimit_acquire_check('p1', 2, '1 hour');
SELECT pklimit_release('p1', (SELECT token FROM pklimit_leases('p1') LIMIT 1)) AS released;
-- a policy in shadow mode: a refusal answers a token that is no lease
SELECT pklimit_acquire('s1', 'exports_shadow') IS NOT NULL AS granted;
SELECT token IS NOT NULL AS token_given, held, status FROM pklimit_acquire_check('s1', 'exports_shadow');
SELECT token AS policy_shadow_token FROM pklimit_acquire_check('s1', 'exports_shadow') \gset
SELECT pklimit_release('s1', :'policy_shadow_token') AS release_of_shadow_token;
SELECT count(*) AS live FROM pklimit_leases('s1');
-- max_count 0 refuses; 1000 is the cap
SELECT token IS NULL AS refused, held, max_concurrent, status
  FROM pklimit_acquire_check('c1', 'exports_closed');
SELECT token IS NOT NULL AS granted, held, max_concurrent
  FROM pklimit_acquire_check('w1', 'exports_cap');
-- a policy that cannot give a lease
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
	($$SELECT pklimit_acquire('bad', 'exports_memory')$$),
	($$SELECT pklimit_acquire('bad', 'exports_daily')$$),
	($$SELECT pklimit_acquire('bad', 'exports_wide')$$),
	($$SELECT pklimit_acquire_check('bad', 'exports_memory')$$),
	($$SELECT pklimit_acquire_check('bad', 'exports_daily')$$),
	($$SELECT pklimit_acquire_check('bad', 'exports_wide')$$)
) AS t(q);
-- each policy's calls counted; a call refused with an error is none
SET ROLE regress_pklimit_lease_admin;
SELECT name, tenant, calls, allowed, refused, would_refuse, unavailable
  FROM pklimit_policy_stats()
 WHERE name LIKE 'exports%' AND calls > 0
   AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
 ORDER BY name, tenant NULLS FIRST;
SELECT coalesce(sum(calls), 0) AS calls_of_policies_refused_with_an_error
  FROM pklimit_policy_stats()
 WHERE name IN ('exports_memory', 'exports_daily', 'exports_wide')
   AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database());
SET ROLE regress_pklimit_lease_app;

-- tenants: a lease is its tenant's, unseen, unreleased and unrenewed by
-- another; the tenant's policy override decides its calls
SET platformkit.tenant = 'acme';
SELECT token IS NOT NULL AS granted, held, max_concurrent
  FROM pklimit_acquire_check('p1', 'exports');
SELECT token IS NULL AS refused, held FROM pklimit_acquire_check('p1', 'exports');
SELECT count(*) AS acme_live, bool_and(expires_at - acquired_at = '10 minutes') AS acme_lease
  FROM pklimit_leases('p1');
SELECT token AS acme_token FROM pklimit_leases('p1') \gset
SET platformkit.tenant = 'globex';
SELECT count(*) AS globex_sees FROM pklimit_leases('p1');
SELECT pklimit_release('p1', :'acme_token') AS globex_releases,
	   pklimit_renew('p1', :'acme_token', '5 hours') AS globex_renews;
SELECT token IS NOT NULL AS globex_granted, held, max_concurrent
  FROM pklimit_acquire_check('p1', 'exports');
RESET platformkit.tenant;
SELECT count(*) AS default_tenant_sees FROM pklimit_leases('p1');
SELECT pklimit_release('p1', :'acme_token') AS default_tenant_releases;
SET platformkit.tenant = 'acme';
SELECT count(*) AS acme_live, bool_and(expires_at - acquired_at = '10 minutes') AS acme_lease_as_it_was
  FROM pklimit_leases('p1');
SELECT pklimit_release('p1', :'acme_token') AS acme_releases;
-- a key too long to store as it is: stored as a rate key is (a digest)
SELECT pklimit_acquire(repeat('x', 300), 1, '1 hour') IS NOT NULL AS granted,
	   pklimit_acquire(repeat('x', 300), 1, '1 hour') IS NULL AS refused;
SELECT count(*) AS live FROM pklimit_leases(repeat('x', 300));
SELECT count(*) AS other_long_key FROM pklimit_leases(repeat('x', 299) || 'y');
-- the table is pklimit's alone
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
	($$SELECT * FROM platformkit_leases$$),
	($$DELETE FROM platformkit_leases$$),
	($$UPDATE platformkit_leases SET expires_at = '{}'$$)
) AS t(q);
RESET platformkit.tenant;
RESET ROLE;
SET platformkit.tenant = 'acme';
SELECT length(pklimit_stored_key(repeat('x', 300))) < 300 AS digested,
	   (SELECT cardinality(tokens) FROM platformkit_leases
		 WHERE key = pklimit_stored_key(repeat('x', 300))) AS leases_under_the_stored_key;
RESET platformkit.tenant;
SELECT key, cardinality(tokens) AS leases FROM platformkit_leases
 WHERE key LIKE '%p1' ORDER BY key;

-- the purge (as a superuser: pklimit_purge is not PUBLIC's) deletes a row
-- once every lease of it ended more than retention ago, and keeps a row
-- with a live lease, even beside an ended one
SET ROLE regress_pklimit_lease_app;
SELECT pklimit_acquire('purged', 1, '50 milliseconds') IS NOT NULL AS granted;
SELECT pklimit_acquire('half', 2, '1 hour') IS NOT NULL AS granted_long,
	   pklimit_acquire('half', 2, '50 milliseconds') IS NOT NULL AS granted_short;
DO $$ BEGIN
	FOR i IN 1 .. 3000 LOOP
		EXIT WHEN NOT EXISTS (SELECT FROM pklimit_leases('purged'))
			  AND (SELECT count(*) FROM pklimit_leases('half')) = 1;
		PERFORM pg_sleep(0.01);
	END LOOP;
END $$;
SELECT (SELECT count(*) FROM pklimit_leases('purged')) AS purged_live,
	   (SELECT count(*) FROM pklimit_leases('half')) AS half_live;
RESET ROLE;
SELECT pklimit_purge('1 hour') AS purged_with_an_hour_retention;
SELECT pklimit_purge('0 seconds') AS purged;
SELECT count(*) FILTER (WHERE key = 'g:purged') AS purged_row,
	   count(*) FILTER (WHERE key = 'g:half') AS half_row,
	   count(*) FILTER (WHERE key = 'g:wide') AS wide_row
  FROM platformkit_leases;
-- no error above recorded anything
SELECT count(*) AS rows_of_bad FROM platformkit_leases WHERE key LIKE '%bad';

-- the table as pklimit keeps it: row level security forced, its one
-- policy, no privilege for anyone else
SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = 'platformkit_leases'::regclass;
SELECT polname, polcmd, pg_get_expr(polqual, polrelid) AS using_expr,
	   pg_get_expr(polwithcheck, polrelid) AS with_check_expr
  FROM pg_policy WHERE polrelid = 'platformkit_leases'::regclass;
SELECT grantee, privilege_type FROM information_schema.role_table_grants
 WHERE table_name = 'platformkit_leases' AND grantee::name <> current_user;

DROP TABLE tok;
SELECT pklimit_policy_drop(name, tenant) AS dropped FROM pklimit_policies WHERE name LIKE 'exports%';
DROP ROLE regress_pklimit_lease_app;
DROP ROLE regress_pklimit_lease_admin;
TRUNCATE platformkit_limits, platformkit_leases;
