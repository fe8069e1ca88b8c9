-- pklimit_anchor: the anchor argument of the four recording calls (0.4.0),
-- as docs/algorithms.md says ("Anchors"): 'epoch' (the default) aligns a
-- fixed window to the Unix epoch, 'first' starts it at the event that finds
-- no window open; its errors, both paths, one window at a time, peeks,
-- quotas, blocks, calls on several keys, and the row.  A moment is checked
-- against the server clock read before and after the call, so nothing here
-- depends on the time of day.

TRUNCATE platformkit_limits;
\i sql/include/sqlstate_of.sql

-- every bad anchor is an ERROR, on all four calls, before anything is
-- recorded; 'first' is for the fixed window only
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
  ($$SELECT pklimit_allow('k', 1, '1 hour', anchor => 'x')$$),
  ($$SELECT pklimit_allow('k', 1, '1 hour', anchor => 'First')$$),
  ($$SELECT pklimit_allow('k', 1, '1 hour', anchor => '')$$),
  ($$SELECT pklimit_allow('k', 1, '1 hour', anchor => NULL)$$),
  ($$SELECT pklimit_allow('k', 1, '1 hour', algorithm => 'gcra', anchor => 'first')$$),
  ($$SELECT pklimit_allow('k', 1, '1 hour', algorithm => 'sliding', anchor => 'first')$$),
  ($$SELECT pklimit_check('k', 1, '1 hour', anchor => 'epoch ')$$),
  ($$SELECT pklimit_check('k', 1, '1 hour', algorithm => 'gcra', anchor => 'first', durable => false)$$),
  ($$SELECT pklimit_check('k', 1, '1 hour', anchor => NULL)$$),
  ($$SELECT pklimit_check_all(ARRAY['a', 'b'], ARRAY[1, 1], ARRAY['1 hour', '1 hour']::interval[], anchor => 'now')$$),
  ($$SELECT pklimit_check_all(ARRAY['a'], ARRAY[1], ARRAY['1 hour']::interval[], algorithm => 'sliding', anchor => 'first')$$),
  ($$SELECT pklimit_allow_all(ARRAY['a'], ARRAY[1], ARRAY['1 hour']::interval[], anchor => NULL)$$),
  ($$SELECT pklimit_allow_all(ARRAY['a'], ARRAY[1], ARRAY['1 hour']::interval[], algorithm => 'gcra', anchor => 'first')$$)
) AS t(q);
SELECT count(*) AS nothing_recorded FROM platformkit_limits;

-- as a user sees them
SELECT pklimit_allow('k', 1, '1 hour', anchor => 'x');
SELECT pklimit_check('k', 1, '1 hour', algorithm => 'gcra', anchor => 'first');

-- the argument comes last but for time_zone in each recording call that
-- gives its limit, 'epoch' by default (a call that names a policy takes
-- the policy's)
SELECT p.oid::regprocedure AS function, pg_get_function_arguments(p.oid) ~ 'anchor text DEFAULT ''epoch''::text, time_zone text DEFAULT NULL::text(, OUT .*)?$' AS anchor_last
  FROM pg_proc p
 WHERE p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_check_all', 'pklimit_allow_all')
   AND p.pronargs > 1
 ORDER BY p.proargtypes[1] IN ('text'::regtype, 'text[]'::regtype), p.oid::regprocedure::text;

-- 'first': the window starts at the event, on either path, whatever the
-- session's time zone; reset_at is the event plus the window
CREATE TEMP TABLE clock (k text PRIMARY KEY, before timestamptz, after timestamptz,
                         reset_at timestamptz, retry_after interval, count bigint);
SET TimeZone = 'Pacific/Chatham';
CREATE FUNCTION pg_temp.timed(key text, max bigint, w interval, on_disk boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  b timestamptz := clock_timestamp();
  c record;
BEGIN
  SELECT * INTO c FROM pklimit_check(key, max, w, durable => on_disk, anchor => 'first');
  INSERT INTO clock VALUES (key, b, clock_timestamp(), c.reset_at, c.retry_after, c.count)
  ON CONFLICT (k) DO UPDATE SET before = excluded.before, after = excluded.after,
    reset_at = excluded.reset_at, retry_after = excluded.retry_after, count = excluded.count;
END $$;
SELECT pg_temp.timed('first-durable', 2, '7 minutes 3 seconds', true);
SELECT pg_temp.timed('first-memory', 2, '7 minutes 3 seconds', false);
SELECT k, count, reset_at - '7 minutes 3 seconds'::interval BETWEEN before AND after AS starts_at_the_event
  FROM clock ORDER BY k;
-- the row: its window is [the event, the event + window), not a multiple of
-- the window since the epoch (7 min 3 s = 423 s)
SELECT l.key, l.window_end - l.window_start AS "window", l.window_end = c.reset_at AS ends_at_reset,
       l.window_start BETWEEN c.before AND c.after AS starts_at_the_event
  FROM platformkit_limits l JOIN clock c ON l.key = 'g:' || c.k
 WHERE c.k = 'first-durable';

-- later calls count in that window: the same reset_at, then refused
-- until it ends, retry_after to it
SELECT k, c.count, c.allowed, c.reset_at = clock.reset_at AS same_window
  FROM clock, LATERAL pklimit_check(k, 2, '7 minutes 3 seconds', durable => k = 'first-durable', anchor => 'first') c
 ORDER BY k;
SELECT k, c.count, c.allowed, c.reset_at = clock.reset_at AS same_window,
       c.retry_after BETWEEN clock.reset_at - clock_timestamp() AND clock.reset_at - clock.after AS retry_after_to_its_end
  FROM clock, LATERAL pklimit_check(k, 2, '7 minutes 3 seconds', durable => k = 'first-durable', anchor => 'first') c
 ORDER BY k;

-- one window at a time: a call with the other anchor, or another length,
-- counts in the open window, which keeps its start and end
SELECT c.count, c.reset_at = clock.reset_at AS same_window
  FROM clock, LATERAL pklimit_check(k, 10, '1 day') c WHERE k = 'first-durable';
SELECT pklimit_allow('epoch-first', 10, '36500 days');
SELECT c.count, c.reset_at = to_timestamp(36500 * 86400) AS epoch_window_kept
  FROM pklimit_check('epoch-first', 10, '1 minute', anchor => 'first') c;

-- 'epoch' (the default) is the window of 0.3.0: a multiple of the window
-- since the epoch
SELECT c.reset_at = to_timestamp(36500 * 86400) AS epoch_aligned
  FROM pklimit_check('epoch-default', 3, '36500 days', anchor => 'epoch') c;

-- a peek (cost 0) starts nothing: no row, and reset_at a window from now
SELECT pg_temp.sqlstate_of($$SELECT pklimit_check('peek', 3, '1 hour', cost => 0, anchor => 'first')$$);
SELECT c.allowed, c.count, c.reset_at - clock_timestamp() BETWEEN '59 minutes 59 seconds' AND '1 hour' AS a_window_from_now
  FROM pklimit_check('peek', 3, '1 hour', cost => 0, anchor => 'first') c;
SELECT count(*) AS peek_rows FROM platformkit_limits WHERE key = 'g:peek';

-- a quota: a refused call that records nothing starts no window
SELECT c.allowed, c.count FROM pklimit_check('quota', 0, '1 hour', record_refused => false, anchor => 'first') c;
SELECT count(*) AS quota_rows FROM platformkit_limits WHERE key = 'g:quota';

-- a block outlasts the window it was started in, as with 'epoch'
SELECT g, c.allowed, c.count,
       c.reset_at - clock_timestamp() BETWEEN '59 minutes' AND '1 hour' AS blocked_an_hour
  FROM generate_series(1, 3) g,
       LATERAL pklimit_check('blocked', 1, '1 minute', cost => 1 + 0 * g, block => '1 hour', anchor => 'first') c;

-- several keys: every key's window starts at the call
SELECT c.key, c.allowed, c.count,
       c.reset_at - clock_timestamp() BETWEEN '9 minutes 59 seconds' AND '10 minutes' AS ten_minutes_from_now
  FROM pklimit_check_all(ARRAY['all-a', 'all-b'], ARRAY[1, 5], ARRAY['10 minutes', '10 minutes']::interval[],
                         anchor => 'first') c;
SELECT pklimit_allow_all(ARRAY['all-a', 'all-b'], ARRAY[1, 5], ARRAY['10 minutes', '10 minutes']::interval[],
                         anchor => 'first') AS allowed;

-- the count of the window, and forget: a new window at the next event
SELECT pklimit_count('first-durable') AS count, pklimit_forget('first-durable') AS forgotten;
SELECT pg_temp.timed('first-durable', 2, '7 minutes 3 seconds', true);
SELECT count, reset_at - '7 minutes 3 seconds'::interval BETWEEN before AND after AS starts_at_the_event
  FROM clock WHERE k = 'first-durable';
RESET TimeZone;
