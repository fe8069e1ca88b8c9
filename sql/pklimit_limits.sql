-- pklimit_limits: cost, quotas (record_refused => false), peeks (cost 0),
-- blocks that outlast the window, and several limits in one call, with
-- every error of their arguments.

TRUNCATE platformkit_limits;
\i sql/include/sqlstate_of.sql

-- cost: a call adds cost events, allowed iff count + cost <= max_count; a
-- refused call still counts (every attempt counts, the default)
SELECT i, allowed, count, remaining FROM generate_series(1, 4) i,
  LATERAL pklimit_check('cost' || left(i::text, 0), 10, '36500 days', cost => 3);
SELECT pklimit_allow('cost', 100, '36500 days', 0) AS peek_allows_again_at_a_higher_max;
-- max_count 0 refuses every call with a cost, and a peek
SELECT pklimit_allow('zero', 0, '36500 days', 5), pklimit_allow('zero', 0, '36500 days', 0);

-- quota semantics: a refused call of cost 60 records nothing and leaves the
-- 40 remaining for smaller calls
SELECT i, c, allowed, count, remaining
  FROM (VALUES (1, 60), (2, 60), (3, 40), (4, 1), (5, 0)) v(i, c),
  LATERAL pklimit_check('quota' || left(i::text, 0), 100, '36500 days', cost => c, record_refused => false)
 ORDER BY i;
-- a refused quota call on a key without a row creates none
SELECT allowed, count FROM pklimit_check('quota-empty', 10, '36500 days', cost => 11, record_refused => false);
SELECT count(*) AS rows FROM platformkit_limits WHERE key = 'g:quota-empty';

-- a peek records nothing and creates no row; it answers whether one more
-- event would be allowed now
SELECT allowed, count, remaining, status FROM pklimit_check('peek', 2, '36500 days', cost => 0);
SELECT count(*) AS rows FROM platformkit_limits WHERE key = 'g:peek';
SELECT pklimit_allow('peek', 2, '36500 days'), pklimit_allow('peek', 2, '36500 days');
SELECT allowed, count, remaining FROM pklimit_check('peek', 2, '36500 days', cost => 0);
SELECT pklimit_count('peek');

-- the count still saturates, cost included
SELECT pklimit_allow('sat', 5, '36500 days');
UPDATE platformkit_limits SET count = 9223372036854775800 WHERE key = 'g:sat';
SELECT allowed, count FROM pklimit_check('sat', 9223372036854775807, '36500 days', cost => 100);

-- a block outlasts the window: the first refusal blocks the key for the
-- block, or until the window ends if that is later; meanwhile every call
-- is refused and records nothing, and reset_at / retry_after say when it
-- ends
-- (a key at its limit in a window that closes in 10 minutes; the call's
-- window length matters only for a new window)
INSERT INTO platformkit_limits
SELECT 'g:ban', t - interval '1 minute', t + interval '10 minutes', 2, t
  FROM (SELECT clock_timestamp() AS t) c;
SELECT allowed, count, status FROM pklimit_check('ban', 2, '2 seconds', block => '1 hour');
SELECT count, blocked_until - updated_at BETWEEN interval '59 minutes' AND interval '1 hour' AS blocked_an_hour,
       blocked_until > window_end AS longer_than_the_window
  FROM platformkit_limits WHERE key = 'g:ban';
CREATE TEMP TABLE ban AS SELECT * FROM pklimit_check('ban', 2, '2 seconds', block => '1 hour');
SELECT b.allowed, b.count, b.reset_at = l.blocked_until AS reset_at_block_end,
       b.retry_after > interval '59 minutes' AS retry_after_an_hour, l.count AS stored
  FROM ban b, platformkit_limits l WHERE l.key = 'g:ban';
-- a call during the block, with another block or none, does not move it
SELECT blocked_until AS before FROM platformkit_limits WHERE key = 'g:ban' \gset
SELECT pklimit_allow('ban', 1000, '2 seconds', block => '5 hours'), pklimit_allow('ban', 1000, '2 seconds');
SELECT blocked_until = :'before' AS block_unchanged FROM platformkit_limits WHERE key = 'g:ban';
-- once the window has closed (moved into the past here) the key still stays
-- blocked, its count 0
UPDATE platformkit_limits SET window_start = window_start - interval '1 hour',
       window_end = window_end - interval '1 hour' WHERE key = 'g:ban';
SELECT allowed, count, status FROM pklimit_check('ban', 2, '2 seconds');
SELECT pklimit_count('ban');
-- and once the block has ended, the key counts again in a new window
UPDATE platformkit_limits SET blocked_until = clock_timestamp() - interval '1 second' WHERE key = 'g:ban';
SELECT allowed, count, status FROM pklimit_check('ban', 2, '2 seconds', block => '1 hour');
-- forget lifts the block
SELECT pklimit_forget('ban');
SELECT allowed, count FROM pklimit_check('ban', 2, '2 seconds', block => '1 hour');

-- a block starts with record_refused => false too, on a key without a row
SELECT allowed, count FROM pklimit_check('ban-quota', 1, '36500 days', cost => 5,
  record_refused => false, block => '1 day');
SELECT count, blocked_until IS NOT NULL AS blocked FROM platformkit_limits WHERE key = 'g:ban-quota';
SELECT pklimit_allow('ban-quota', 100, '36500 days') AS refused_while_blocked;

-- the purge keeps a blocked row until its block has ended and the
-- retention has passed
INSERT INTO platformkit_limits VALUES
  ('g:old-blocked', clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1,
   clock_timestamp() - interval '2 days', clock_timestamp() + interval '1 day'),
  ('g:old-block-ended', clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1,
   clock_timestamp() - interval '2 days', clock_timestamp() - interval '2 days'),
  ('g:old-block-just-ended', clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1,
   clock_timestamp() - interval '2 days', clock_timestamp() - interval '10 minutes');
SELECT pklimit_purge('1 hour');
SELECT key FROM platformkit_limits WHERE key LIKE 'g:old-%' ORDER BY key COLLATE "C";

-- several limits in one call: one row per key in the order of the arrays,
-- recorded together; tenants apply to every key
SET platformkit.tenant = 'acme';
SELECT key, allowed, count, remaining, retry_after, status
  FROM pklimit_check_all(ARRAY['login:bob', 'ip:10.0.0.1'], ARRAY[2, 5],
  ARRAY['36500 days', '36500 days']::interval[]) ORDER BY key;
SELECT key, allowed, count, remaining, status FROM pklimit_check_all(ARRAY['login:bob', 'ip:10.0.0.1'],
  ARRAY[2, 5], ARRAY['36500 days', '36500 days']::interval[]);
-- one limit refuses: every attempt still counts on every key (the default)
SELECT key, allowed, count FROM pklimit_check_all(ARRAY['login:bob', 'ip:10.0.0.1'],
  ARRAY[2, 5], ARRAY['36500 days', '36500 days']::interval[]);
-- with record_refused => false nothing is recorded unless every limit allows
SELECT key, allowed, count FROM pklimit_check_all(ARRAY['ip:10.0.0.1', 'login:carol'],
  ARRAY[3, 5], ARRAY['36500 days', '36500 days']::interval[], record_refused => false);
SELECT pklimit_count('login:carol') AS carol_unchanged, pklimit_count('ip:10.0.0.1') AS ip_unchanged;
SELECT pklimit_allow_all(ARRAY['login:dave', 'ip:10.0.0.2'], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[]),
       pklimit_allow_all(ARRAY['login:dave', 'ip:10.0.0.2'], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[]);
-- with a block, the key whose own limit refuses is blocked, the other not
SELECT key, allowed, count FROM pklimit_check_all(ARRAY['login:frank', 'ip:10.0.0.3'], ARRAY[0, 5],
  ARRAY['36500 days', '36500 days']::interval[], block => '1 day');
SELECT key, blocked_until IS NOT NULL AS blocked FROM platformkit_limits
 WHERE key IN ('t4:acme:login:frank', 't4:acme:ip:10.0.0.3') ORDER BY key COLLATE "C";
-- a peek of several keys records nothing
SELECT key, allowed, count FROM pklimit_check_all(ARRAY['login:erin', 'login:bob'], ARRAY[1, 10],
  ARRAY['36500 days', '36500 days']::interval[], cost => 0);
RESET platformkit.tenant;
SELECT key, count FROM platformkit_limits WHERE key LIKE 't4:acme:%' ORDER BY key COLLATE "C";

-- the calls of 0.1.0 work unchanged, positional and named
SELECT pklimit_allow('old', 1, '36500 days'), pklimit_allow(key => 'old', max_count => 1, "window" => '36500 days');
SELECT allowed, count FROM pklimit_check('old', 5::integer, '36500 days');

-- every bad input is an ERROR with its SQLSTATE, and records nothing
TRUNCATE platformkit_limits;
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
  ($$SELECT pklimit_allow('k', 1, '1 hour', NULL)$$),
  ($$SELECT pklimit_allow('k', 1, '1 hour', -1)$$),
  ($$SELECT pklimit_allow('k', 1, '1 hour', 1, NULL)$$),
  ($$SELECT pklimit_check('k', 1, '1 hour', 1, true, '0')$$),
  ($$SELECT pklimit_check('k', 1, '1 hour', 1, true, '-1 hour')$$),
  ($$SELECT pklimit_check('k', 1, '1 hour', 1, true, '1 month')$$),
  ($$SELECT pklimit_check('k', 1, '1 hour', 1, true, '3650001 days')$$),
  ($$SELECT pklimit_check_all(NULL, ARRAY[1], ARRAY['1 hour']::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY['a'], NULL, ARRAY['1 hour']::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY['a'], ARRAY[1], NULL)$$),
  ($$SELECT pklimit_check_all(ARRAY['a', 'b'], ARRAY[1], ARRAY['36500 days', '36500 days']::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY[]::text[], ARRAY[]::bigint[], ARRAY[]::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY['a', NULL], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY['a', 'b'], ARRAY[1, NULL], ARRAY['36500 days', '36500 days']::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY['a', 'b'], ARRAY[1, 1], ARRAY['1 hour', NULL]::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY['a', ''], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY['a', 'b'], ARRAY[1, -1], ARRAY['36500 days', '36500 days']::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY['a', 'b'], ARRAY[1, 1], ARRAY['1 hour', '1 month']::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY['a', 'a'], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[])$$),
  ($$SELECT pklimit_check_all(ARRAY[['a', 'b']], ARRAY[[1, 1]], ARRAY[['1 hour', '1 hour']]::interval[])$$),
  ($$SELECT pklimit_check_all((SELECT array_agg('k' || i) FROM generate_series(1, 17) i),
      (SELECT array_agg(1::bigint) FROM generate_series(1, 17)),
      (SELECT array_agg('1 hour'::interval) FROM generate_series(1, 17)))$$),
  ($$SELECT pklimit_check_all(ARRAY['a'], ARRAY[1], ARRAY['1 hour']::interval[], NULL)$$),
  ($$SELECT pklimit_check_all(ARRAY['a'], ARRAY[1], ARRAY['1 hour']::interval[], 1, NULL)$$),
  ($$SELECT pklimit_allow_all(ARRAY['a'], ARRAY[1], ARRAY['1 hour']::interval[], -2)$$),
  ($$SELECT pklimit_allow_all(ARRAY['a'], ARRAY[1], ARRAY['1 hour']::interval[], 1, NULL)$$),
  ($$SELECT pklimit_allow_all(ARRAY['a'], ARRAY[1], ARRAY['1 hour']::interval[], 1, true, '-1 s')$$)
) AS t(q);
SELECT count(*) AS nothing_recorded FROM platformkit_limits;

-- as a user sees them
SELECT pklimit_allow('k', 1, '1 hour', cost => -1);
SELECT pklimit_check('k', 1, '1 hour', block => '1 month');
SELECT pklimit_check_all(ARRAY['a', 'b'], ARRAY[1], ARRAY['36500 days', '36500 days']::interval[]);
SELECT pklimit_check_all(ARRAY['a', 'a'], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[]);
SELECT pklimit_check_all(ARRAY['a', 'b'], ARRAY[1, 1], ARRAY['1 hour', '1 month']::interval[]);
SELECT pklimit_allow_all(ARRAY['a', 'b'], ARRAY[1, 1], ARRAY['1 hour', '1 hour']::interval[], block => '0');
SELECT pklimit_check_all((SELECT array_agg('k' || i) FROM generate_series(1, 17) i),
  (SELECT array_agg(1::bigint) FROM generate_series(1, 17)),
  (SELECT array_agg('1 hour'::interval) FROM generate_series(1, 17)));
