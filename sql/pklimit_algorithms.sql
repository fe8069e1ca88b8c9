-- pklimit_algorithms: the algorithm argument (fixed, gcra, sliding) of the
-- four recording calls, as docs/algorithms.md says: its errors, GCRA's burst
-- and refusals, the sliding window's counts and estimate, cost, peeks,
-- max_count 0, quotas, one state per key, blocks, calls on several keys,
-- pklimit_count, pklimit_forget, the purge, and the row's columns.
-- Windows are 36500 days (W below; fixed and sliding windows are aligned to
-- the Unix epoch, so the one that holds now is [1970-01-01, 2069-12-07) and
-- the next ends at epoch + 2W), so nothing here depends on the time of day;
-- with max_count 4, GCRA's step T = W / 4 is 9125 days (219000 hours).
-- Part of it runs as a role that is neither superuser nor BYPASSRLS.

TRUNCATE platformkit_limits;
\i sql/include/sqlstate_of.sql
-- a GCRA row's tat, as docs/algorithms.md keeps it: window_start + count *
-- (window_end - window_start) / max_count, rounded up to the microsecond
CREATE FUNCTION pg_temp.tat(k text) RETURNS timestamptz LANGUAGE sql AS $$
  SELECT window_start + coalesce(ceil(count * extract(epoch FROM window_end - window_start) * 1000000
                                      / nullif(max_count, 0)), 0)::bigint * interval '1 microsecond'
    FROM platformkit_limits WHERE key = k
$$;

-- every bad algorithm is an ERROR, on all four calls, raised before
-- anything is recorded: names are lower case and exact
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
  ($$SELECT pklimit_allow('k', 1, '36500 days', algorithm => 'x')$$),
  ($$SELECT pklimit_allow('k', 1, '36500 days', algorithm => 'GCRA')$$),
  ($$SELECT pklimit_allow('k', 1, '36500 days', algorithm => '')$$),
  ($$SELECT pklimit_allow('k', 1, '36500 days', algorithm => NULL)$$),
  ($$SELECT pklimit_allow('k', 1, '36500 days', 1, true, NULL, 'Sliding')$$),
  ($$SELECT pklimit_check('k', 1, '36500 days', algorithm => 'fixed ')$$),
  ($$SELECT pklimit_check('k', 1, '36500 days', algorithm => 'GCRA')$$),
  ($$SELECT pklimit_check('k', 1, '36500 days', algorithm => '')$$),
  ($$SELECT pklimit_check('k', 1, '36500 days', algorithm => NULL)$$),
  ($$SELECT pklimit_check('k', 1, '36500 days', 0, false, '1 day', 'token-bucket')$$),
  ($$SELECT pklimit_check_all(ARRAY['a', 'b'], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[], algorithm => 'GCRA')$$),
  ($$SELECT pklimit_check_all(ARRAY['a'], ARRAY[1], ARRAY['36500 days']::interval[], algorithm => '')$$),
  ($$SELECT pklimit_check_all(ARRAY['a'], ARRAY[1], ARRAY['36500 days']::interval[], algorithm => NULL)$$),
  ($$SELECT pklimit_allow_all(ARRAY['a', 'b'], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[], algorithm => 'GCRA')$$),
  ($$SELECT pklimit_allow_all(ARRAY['a'], ARRAY[1], ARRAY['36500 days']::interval[], algorithm => '')$$),
  ($$SELECT pklimit_allow_all(ARRAY['a'], ARRAY[1], ARRAY['36500 days']::interval[], 1, true, NULL, NULL)$$),
  ($$SELECT pklimit_allow_all(ARRAY['a'], ARRAY[1], ARRAY['36500 days']::interval[], algorithm => 'x')$$)
) AS t(q);
SELECT count(*) AS nothing_recorded FROM platformkit_limits;

-- as a user sees them
SELECT pklimit_allow('k', 1, '36500 days', algorithm => 'GCRA');
SELECT pklimit_check('k', 1, '36500 days', algorithm => '');
SELECT pklimit_allow_all(ARRAY['a'], ARRAY[1], ARRAY['36500 days']::interval[], algorithm => NULL);

-- bad input stays an error whatever pklimit.on_unavailable says, even while
-- the store cannot be reached (the key's row locked by this transaction):
-- a good call is answered as unavailable, a bad algorithm is an ERROR
SELECT pklimit_allow('unreachable', 5, '36500 days', algorithm => 'gcra');
BEGIN;
SELECT count FROM platformkit_limits WHERE key = 'g:unreachable' FOR UPDATE;
SET LOCAL pklimit.timeout = '500ms';
SET LOCAL pklimit.on_unavailable = allow;
SELECT pklimit_allow('unreachable', 5, '36500 days', algorithm => 'gcra');
SELECT pklimit_allow('unreachable', 5, '36500 days', algorithm => 'GCRA');
ROLLBACK;
BEGIN;
SET LOCAL pklimit.on_unavailable = allow;
SELECT pklimit_check('unreachable', 5, '36500 days', algorithm => NULL);
ROLLBACK;
SELECT pklimit_count('unreachable') AS one_event;
SELECT pklimit_forget('unreachable');

-- 'fixed' is the default, by name or left out
SELECT pklimit_allow('fx', 2, '36500 days', algorithm => 'fixed'), pklimit_allow('fx', 2, '36500 days');
SELECT allowed, count, remaining FROM pklimit_check('fx', 2, '36500 days', 1, true, NULL, 'fixed');

-- GCRA: a quiet key bursts max_count at once, then is refused; count is the
-- events the bucket holds, remaining max_count - count, retry_after T
SELECT i, allowed, count, remaining, retry_after, status FROM generate_series(1, 5) i,
  LATERAL pklimit_check('gcra' || left(i::text, 0), 4, '36500 days', algorithm => 'gcra');
-- the refusal was recorded, capped: tat = now + W, the bucket exactly full
-- (the whole window of steps moved into window_start: count 0)
SELECT algorithm, count, max_count, previous_count IS NULL AS no_previous, expires_at IS NULL AS no_expiry,
       window_end - window_start AS window, pg_temp.tat(key) = updated_at + interval '876000 hours' AS tat_now_plus_w
  FROM platformkit_limits WHERE key = 'g:gcra';
-- again: retry_after is T, reset_at is tat
CREATE TEMP TABLE gcra_refused AS SELECT * FROM pklimit_check('gcra', 4, '36500 days', algorithm => 'gcra');
SELECT c.allowed, c.count, c.remaining, c.retry_after, c.reset_at = pg_temp.tat(l.key) AS reset_at_is_tat,
       c.reset_at = l.updated_at + interval '876000 hours' AS reset_at_now_plus_w
  FROM gcra_refused c, platformkit_limits l WHERE l.key = 'g:gcra';
-- a refused call with record_refused => false changes nothing, and a peek
-- of a full bucket is refused and changes nothing
SELECT l::text AS before FROM platformkit_limits l WHERE key = 'g:gcra' \gset
SELECT allowed, count, remaining, retry_after > interval '0' AND retry_after <= interval '219000 hours' AS waits_at_most_t
  FROM pklimit_check('gcra', 4, '36500 days', record_refused => false, algorithm => 'gcra');
SELECT allowed, count, remaining FROM pklimit_check('gcra', 4, '36500 days', cost => 0, algorithm => 'gcra');
SELECT l::text = :'before' AS unchanged FROM platformkit_limits l WHERE key = 'g:gcra';
-- another max_count is no way around the full bucket
SELECT pklimit_allow('gcra', 1000, '36500 days', record_refused => false, algorithm => 'gcra') AS more_allowed;
SELECT pklimit_count('gcra');

-- GCRA cost: each call takes cost steps; a refused call with
-- record_refused => false leaves room for a smaller one (quota semantics)
SELECT i, c, allowed, count, remaining
  FROM (VALUES (1, 3), (2, 3), (3, 3), (4, 3), (5, 1), (6, 1)) v(i, c),
  LATERAL pklimit_check('gcra-cost' || left(i::text, 0), 10, '36500 days', cost => c,
                        record_refused => false, algorithm => 'gcra')
 ORDER BY i;
-- a refused cost of 3 fits once 3 steps (T = 3650 days) have drained: 3T
-- less the time since the bucket started (a few milliseconds here)
SELECT allowed, retry_after > interval '262799 hours' AND retry_after <= interval '262800 hours' AS about_3t
  FROM pklimit_check('gcra-cost', 10, '36500 days', cost => 3, record_refused => false, algorithm => 'gcra');
SELECT count, max_count FROM platformkit_limits WHERE key = 'g:gcra-cost';

-- GCRA cost > max_count: no wait can allow it; retry_after is the time
-- until reset_at, when the bucket is empty again (W, as the refusal is
-- recorded, capped at a full bucket)
SELECT allowed, count, remaining, retry_after FROM pklimit_check('gcra-big', 4, '36500 days', cost => 5, algorithm => 'gcra');
SELECT count, max_count FROM platformkit_limits WHERE key = 'g:gcra-big';
-- with record_refused => false on a key without a row: no row, and the
-- bucket is empty already (reset_at is now), so retry_after is one window:
-- a refusal never says 0, and no wait would allow the call
SELECT allowed, count, remaining, retry_after FROM pklimit_check('gcra-big-quota', 4, '36500 days', cost => 5,
  record_refused => false, algorithm => 'gcra');
SELECT count(*) AS rows FROM platformkit_limits WHERE key = 'g:gcra-big-quota';

-- GCRA max_count 0 refuses every call, peeks included; a recorded refusal
-- sets tat = now + W, kept as window_start with count 0
SELECT allowed, count, remaining, retry_after FROM pklimit_check('gcra-zero', 0, '36500 days', algorithm => 'gcra');
SELECT count, max_count, window_start = updated_at + interval '876000 hours' AS tat_is_now_plus_w,
       window_end - window_start AS window
  FROM platformkit_limits WHERE key = 'g:gcra-zero';
SELECT allowed, count FROM pklimit_check('gcra-zero', 0, '36500 days', cost => 0, algorithm => 'gcra');
SELECT allowed, count FROM pklimit_check('gcra-zero-peek', 0, '36500 days', cost => 0, algorithm => 'gcra');
SELECT count(*) AS rows FROM platformkit_limits WHERE key = 'g:gcra-zero-peek';
-- the bucket holds no event at max_count 0; a call with a higher max_count
-- finds it full (tat = now + W)
SELECT pklimit_count('gcra-zero');
SELECT allowed, count FROM pklimit_check('gcra-zero', 4, '36500 days', record_refused => false, algorithm => 'gcra');

-- GCRA peek (cost 0) on a quiet key: allowed, records nothing, no row
SELECT count(*) AS rows_before FROM platformkit_limits \gset
SELECT allowed, count, remaining, retry_after, status
  FROM pklimit_check('gcra-peek', 2, '36500 days', cost => 0, algorithm => 'gcra');
SELECT pklimit_allow('gcra-peek', 2, '36500 days', 0, algorithm => 'gcra');
SELECT pklimit_count('gcra-peek'), (SELECT count(*) FROM platformkit_limits) - :rows_before AS new_rows;

-- GCRA with another max_count: tat is rounded up to the call's own steps
-- from window_start (one step of W/4 is one of W/2 here), and the row keeps
-- the max_count of the last call that changed it
SELECT pklimit_allow('gcra-m', 4, '36500 days', algorithm => 'gcra');
SELECT count, max_count FROM platformkit_limits WHERE key = 'g:gcra-m';
SELECT window_start AS first_start FROM platformkit_limits WHERE key = 'g:gcra-m' \gset
SELECT allowed, count, remaining FROM pklimit_check('gcra-m', 2, '36500 days', algorithm => 'gcra');
SELECT count, max_count, pg_temp.tat(key) = :'first_start'::timestamptz + interval '876000 hours' AS tat_first_plus_w
  FROM platformkit_limits WHERE key = 'g:gcra-m';
SELECT allowed, count, remaining FROM pklimit_check('gcra-m', 2, '36500 days', record_refused => false, algorithm => 'gcra');
SELECT allowed, count, remaining FROM pklimit_check('gcra-m', 4, '36500 days', record_refused => false, algorithm => 'gcra');

-- sliding window: a key with no previous window counts its events exactly;
-- a refused call is recorded (count goes past max_count)
SELECT i, allowed, count, remaining, retry_after = interval '0' AS no_wait, status FROM generate_series(1, 4) i,
  LATERAL pklimit_check('sliding' || left(i::text, 0), 3, '36500 days', algorithm => 'sliding');
SELECT algorithm, count, max_count, previous_count, window_start = to_timestamp(0) AS starts_at_epoch,
       window_end - window_start AS window, expires_at - window_end AS weighs_after_its_end
  FROM platformkit_limits WHERE key = 'g:sliding';
-- a fifth event, refused and recorded: reset_at is the end of the window
-- after the one holding it; retry_after: 5 events weigh 5 * (W - e) / W in
-- the next window, so one more fits from 3/5 into it, epoch + 1.6 W
CREATE TEMP TABLE sliding_refused AS SELECT * FROM pklimit_check('sliding', 3, '36500 days', algorithm => 'sliding');
SELECT c.allowed, c.count, c.remaining,
       c.reset_at = to_timestamp(73000::bigint * 86400) AS reset_at_epoch_plus_2w,
       l.updated_at + c.retry_after = to_timestamp(58400::bigint * 86400) AS retry_after_exact
  FROM sliding_refused c, platformkit_limits l WHERE l.key = 'g:sliding';
SELECT l::text AS before FROM platformkit_limits l WHERE key = 'g:sliding' \gset
SELECT allowed, count FROM pklimit_check('sliding', 3, '36500 days', record_refused => false, algorithm => 'sliding');
SELECT allowed, count FROM pklimit_check('sliding', 3, '36500 days', cost => 0, algorithm => 'sliding');
SELECT l::text = :'before' AS unchanged FROM platformkit_limits l WHERE key = 'g:sliding';
SELECT pklimit_count('sliding');

-- the estimate weighs the previous window's count by the part of it still
-- inside the last W: one event of the window before now's weighs more than
-- 0 and less than 1, so it is rounded up to 1 (a row planted one window back)
INSERT INTO platformkit_limits (key, window_start, window_end, count, updated_at, algorithm,
                                max_count, previous_count, expires_at)
VALUES ('g:sliding-prev', to_timestamp(-36500::bigint * 86400), to_timestamp(0), 1, to_timestamp(-1), 'sliding',
        3, 0, to_timestamp(36500::bigint * 86400));
SELECT pklimit_count('sliding-prev') AS weighs_one;
SELECT i, allowed, count, remaining FROM generate_series(1, 3) i,
  LATERAL pklimit_check('sliding-prev' || left(i::text, 0), 3, '36500 days', algorithm => 'sliding');
-- the counts moved one window on
SELECT count, previous_count, window_start = to_timestamp(0) AS starts_at_epoch,
       expires_at = to_timestamp(73000::bigint * 86400) AS expires_at_epoch_plus_2w
  FROM platformkit_limits WHERE key = 'g:sliding-prev';
-- a fourth event, refused and recorded: 4 events then weigh 4 * (W - e) / W
-- in the next window, so one more fits from its middle, epoch + 1.5 W
CREATE TEMP TABLE sliding_prev AS SELECT * FROM pklimit_check('sliding-prev', 3, '36500 days', algorithm => 'sliding');
SELECT s.allowed, s.count, s.remaining, l.updated_at + s.retry_after = to_timestamp(54750::bigint * 86400) AS retry_after_exact
  FROM sliding_prev s, platformkit_limits l WHERE l.key = 'g:sliding-prev';
SELECT pklimit_count('sliding-prev');
-- a row whose current window is now's previous: its previous count is
-- dropped, its count becomes the previous one
INSERT INTO platformkit_limits (key, window_start, window_end, count, updated_at, algorithm,
                                max_count, previous_count, expires_at)
VALUES ('g:sliding-move', to_timestamp(-36500::bigint * 86400), to_timestamp(0), 5, to_timestamp(-1), 'sliding',
        10, 7, to_timestamp(36500::bigint * 86400));
SELECT allowed, count BETWEEN 2 AND 6 AS estimate_within_bounds FROM pklimit_check('sliding-move', 10, '36500 days', algorithm => 'sliding');
SELECT count, previous_count FROM platformkit_limits WHERE key = 'g:sliding-move';
-- a row two windows back no longer weighs: a new state starts
INSERT INTO platformkit_limits (key, window_start, window_end, count, updated_at, algorithm,
                                max_count, previous_count, expires_at)
VALUES ('g:sliding-old', to_timestamp(-73000::bigint * 86400), to_timestamp(-36500::bigint * 86400), 5, to_timestamp(-36500::bigint * 86400 - 1),
        'sliding', 5, 5, to_timestamp(0));
SELECT pklimit_count('sliding-old') AS closed;
SELECT allowed, count, remaining FROM pklimit_check('sliding-old', 5, '36500 days', algorithm => 'sliding');
SELECT count, previous_count, window_start = to_timestamp(0) AS starts_at_epoch FROM platformkit_limits WHERE key = 'g:sliding-old';

-- sliding cost, peeks, max_count 0 and cost > max_count
SELECT i, c, allowed, count, remaining
  FROM (VALUES (1, 4), (2, 4), (3, 3), (4, 2), (5, 0)) v(i, c),
  LATERAL pklimit_check('sliding-cost' || left(i::text, 0), 10, '36500 days', cost => c,
                        record_refused => false, algorithm => 'sliding')
 ORDER BY i;
SELECT allowed, count, remaining, retry_after FROM pklimit_check('sliding-peek', 2, '36500 days', cost => 0, algorithm => 'sliding');
SELECT count(*) AS rows FROM platformkit_limits WHERE key = 'g:sliding-peek';
CREATE TEMP TABLE sliding_zero AS SELECT * FROM pklimit_check('sliding-zero', 0, '36500 days', algorithm => 'sliding');
SELECT c.allowed, c.count, c.remaining, c.reset_at = to_timestamp(73000::bigint * 86400) AS reset_at_epoch_plus_2w,
       l.updated_at + c.retry_after = c.reset_at AS retry_after_until_reset_at
  FROM sliding_zero c, platformkit_limits l WHERE l.key = 'g:sliding-zero';
SELECT allowed, count FROM pklimit_check('sliding-zero', 0, '36500 days', cost => 0, algorithm => 'sliding');
SELECT allowed, count FROM pklimit_check('sliding-zero-peek', 0, '36500 days', cost => 0, algorithm => 'sliding');
SELECT count(*) AS rows FROM platformkit_limits WHERE key = 'g:sliding-zero-peek';
CREATE TEMP TABLE sliding_big AS SELECT * FROM pklimit_check('sliding-big', 2, '36500 days', cost => 3, algorithm => 'sliding');
SELECT c.allowed, c.count, c.remaining, l.updated_at + c.retry_after = c.reset_at AS retry_after_until_reset_at,
       c.reset_at = to_timestamp(73000::bigint * 86400) AS reset_at_epoch_plus_2w
  FROM sliding_big c, platformkit_limits l WHERE l.key = 'g:sliding-big';

-- one state per key: a call of another algorithm (or window) counts in the
-- key's open state, decided by the state's algorithm
SELECT pklimit_allow('mix-fixed', 2, '36500 days') AS fixed_call;
SELECT i, a, allowed, count, remaining
  FROM (VALUES (1, 'gcra'), (2, 'sliding'), (3, 'gcra')) v(i, a),
  LATERAL pklimit_check('mix-fixed' || left(i::text, 0), 2,
                        CASE WHEN i = 3 THEN '1 day' ELSE '36500 days' END::interval, algorithm => a)
 ORDER BY i;
SELECT pklimit_allow('mix-gcra', 2, '36500 days', algorithm => 'gcra') AS gcra_call;
SELECT i, a, allowed, count, remaining
  FROM (VALUES (1, 'fixed'), (2, 'fixed'), (3, 'sliding')) v(i, a),
  LATERAL pklimit_check('mix-gcra' || left(i::text, 0), 2, '36500 days', algorithm => a)
 ORDER BY i;
SELECT pklimit_allow('mix-sliding', 2, '36500 days', algorithm => 'sliding') AS sliding_call;
SELECT i, a, allowed, count, remaining
  FROM (VALUES (1, 'gcra'), (2, 'fixed'), (3, 'gcra')) v(i, a),
  LATERAL pklimit_check('mix-sliding' || left(i::text, 0), 2, '36500 days', algorithm => a)
 ORDER BY i;
SELECT key, algorithm, count, window_end - window_start AS window
  FROM platformkit_limits WHERE key LIKE 'g:mix-%' ORDER BY key COLLATE "C";

-- pklimit_count reads each algorithm's open state; forget deletes it and
-- the key starts again
SELECT pklimit_count('fx') AS fixed, pklimit_count('gcra') AS gcra, pklimit_count('sliding') AS sliding,
       pklimit_count('never-seen') AS none;
SELECT pklimit_forget('gcra'), pklimit_forget('sliding'), pklimit_forget('gcra');
SELECT pklimit_count('gcra') AS gcra, pklimit_count('sliding') AS sliding;
SELECT allowed, count, remaining FROM pklimit_check('gcra', 4, '36500 days', algorithm => 'gcra');
SELECT allowed, count, remaining FROM pklimit_check('sliding', 3, '36500 days', algorithm => 'sliding');

-- blocks: GCRA at 2 per day, blocked for 36500 days at its first refusal
-- (later than when the refusal would end without the block, T = 12 hours)
SELECT i, allowed, count, remaining FROM generate_series(1, 2) i,
  LATERAL pklimit_check('gcra-ban' || left(i::text, 0), 2, '1 day', block => '36500 days', algorithm => 'gcra');
CREATE TEMP TABLE gcra_ban AS SELECT * FROM pklimit_check('gcra-ban', 2, '1 day', block => '36500 days', algorithm => 'gcra');
SELECT b.allowed, b.count, b.remaining, b.reset_at = l.blocked_until AS reset_at_block_end,
       l.blocked_until - l.updated_at AS blocked_for, b.retry_after, l.count AS steps, l.algorithm
  FROM gcra_ban b, platformkit_limits l WHERE l.key = 'g:gcra-ban';
-- while blocked every call is refused and changes nothing, whatever its
-- arguments
SELECT l::text AS before FROM platformkit_limits l WHERE key = 'g:gcra-ban' \gset
SELECT pklimit_allow('gcra-ban', 1000, '1 day', algorithm => 'gcra'),
       pklimit_allow('gcra-ban', 1000, '1 day', block => '1 hour', algorithm => 'sliding'),
       pklimit_allow('gcra-ban', 1000, '1 day', 0);
SELECT l::text = :'before' AS unchanged FROM platformkit_limits l WHERE key = 'g:gcra-ban';
SELECT pklimit_forget('gcra-ban');
SELECT allowed, count FROM pklimit_check('gcra-ban', 2, '1 day', block => '36500 days', algorithm => 'gcra');
-- a block of a key without a row, with record_refused => false: an empty
-- state of the call's algorithm and window, blocked
SELECT allowed, count FROM pklimit_check('gcra-ban-new', 1, '1 hour', cost => 2, record_refused => false,
  block => '1 day', algorithm => 'gcra');
SELECT algorithm, count, window_end - window_start AS window, blocked_until - updated_at AS blocked_for
  FROM platformkit_limits WHERE key = 'g:gcra-ban-new';
-- sliding, max_count 1: the refused second event still weighs the whole
-- next window, so without the block the refusal would end at epoch + 2W,
-- later than the block of 1 day
SELECT pklimit_allow('sliding-ban', 1, '36500 days', block => '1 day', algorithm => 'sliding');
CREATE TEMP TABLE sliding_ban AS SELECT * FROM pklimit_check('sliding-ban', 1, '36500 days', block => '1 day', algorithm => 'sliding');
SELECT b.allowed, b.count, b.remaining, l.blocked_until = to_timestamp(73000::bigint * 86400) AS blocked_until_epoch_plus_2w,
       b.reset_at = l.blocked_until AS reset_at_block_end, l.updated_at + b.retry_after = l.blocked_until AS retry_after_block_end
  FROM sliding_ban b, platformkit_limits l WHERE l.key = 'g:sliding-ban';
SELECT pklimit_allow('sliding-ban', 1000, '36500 days', algorithm => 'sliding') AS refused_while_blocked;
SELECT count, previous_count FROM platformkit_limits WHERE key = 'g:sliding-ban';

-- several keys, one algorithm for all; recorded together if every key
-- allows, or if record_refused (the default)
SELECT key, allowed, count, remaining FROM pklimit_check_all(ARRAY['ca:a', 'ca:b'], ARRAY[1, 2],
  ARRAY['36500 days', '36500 days']::interval[], algorithm => 'gcra');
SELECT key, allowed, count, remaining FROM pklimit_check_all(ARRAY['ca:a', 'ca:b'], ARRAY[1, 2],
  ARRAY['36500 days', '36500 days']::interval[], algorithm => 'gcra');
-- with record_refused => false nothing is recorded unless every key allows
SELECT key, allowed, count, remaining FROM pklimit_check_all(ARRAY['ca:c', 'ca:a'], ARRAY[5, 1],
  ARRAY['36500 days', '36500 days']::interval[], record_refused => false, algorithm => 'gcra');
SELECT pklimit_count('ca:c') AS c_unchanged, (SELECT count(*) FROM platformkit_limits WHERE key = 'g:ca:c') AS c_rows;
SELECT pklimit_allow_all(ARRAY['as:a', 'as:b'], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[], algorithm => 'sliding'),
       pklimit_allow_all(ARRAY['as:a', 'as:b'], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[], algorithm => 'sliding');
SELECT pklimit_allow_all(ARRAY['as:c', 'as:a'], ARRAY[1, 1], ARRAY['36500 days', '36500 days']::interval[],
                         record_refused => false, algorithm => 'sliding') AS refused,
       pklimit_count('as:c') AS c_unchanged;
-- with a block, only the key whose own limit refuses is blocked
SELECT key, allowed, count FROM pklimit_check_all(ARRAY['bs:a', 'bs:b'], ARRAY[0, 5],
  ARRAY['36500 days', '36500 days']::interval[], block => '1 day', algorithm => 'sliding');
SELECT key, algorithm, count, blocked_until = to_timestamp(73000::bigint * 86400) AS blocked_until_epoch_plus_2w
  FROM platformkit_limits WHERE key IN ('g:bs:a', 'g:bs:b') ORDER BY key COLLATE "C";
-- a peek of several keys records nothing
SELECT key, allowed, count FROM pklimit_check_all(ARRAY['ca:d', 'ca:b'], ARRAY[1, 2],
  ARRAY['36500 days', '36500 days']::interval[], cost => 0, algorithm => 'gcra');
SELECT key, algorithm, count, max_count, previous_count FROM platformkit_limits
 WHERE key LIKE 'g:ca:%' OR key LIKE 'g:as:%' ORDER BY key COLLATE "C";

-- tenants apply as to any call
SET platformkit.tenant = 'acme';
SELECT pklimit_allow('tenant-gcra', 1, '36500 days', algorithm => 'gcra'),
       pklimit_allow('tenant-gcra', 1, '36500 days', algorithm => 'gcra');
RESET platformkit.tenant;
SELECT pklimit_count('tenant-gcra') AS global_unchanged;
SELECT key, algorithm, count FROM platformkit_limits WHERE key LIKE 't4:acme:%';

-- the row of each algorithm (docs/algorithms.md, "The row")
SELECT key, algorithm, count, max_count, previous_count, window_end - window_start AS window,
       expires_at - window_end AS expires_after_end, blocked_until IS NOT NULL AS blocked
  FROM platformkit_limits
 WHERE key IN ('g:fx', 'g:gcra', 'g:gcra-cost', 'g:sliding', 'g:sliding-prev', 'g:sliding-ban')
 ORDER BY key COLLATE "C";

-- the purge deletes a row by GREATEST(window_end, blocked_until, expires_at):
-- a sliding row whose window ended 2 hours ago still weighs (expires_at
-- ahead) and stays; one whose weight ended 2 hours ago goes, with a fixed
-- row whose window ended then
INSERT INTO platformkit_limits (key, window_start, window_end, count, updated_at, algorithm,
                                max_count, previous_count, expires_at)
SELECT v.key, c.t - v.ago - v.w, c.t - v.ago, 1, c.t - v.ago, v.algorithm, 5, v.previous,
       CASE WHEN v.algorithm = 'sliding' THEN c.t - v.ago + v.w END
  FROM (SELECT clock_timestamp() AS t) c,
       (VALUES ('g:purge-weighing', interval '2 hours', interval '1 day', 'sliding', 0),
               ('g:purge-weighed', interval '3 hours', interval '1 hour', 'sliding', 0),
               ('g:purge-fixed', interval '2 hours', interval '1 day', 'fixed', NULL)) v(key, ago, w, algorithm, previous);
SELECT pklimit_purge('1 hour');
SELECT key FROM platformkit_limits WHERE key LIKE 'g:purge-%' ORDER BY key COLLATE "C";

-- as a role that is neither superuser nor BYPASSRLS: every algorithm works
-- through the functions, the errors are the same, and the table stays shut
CREATE ROLE regress_pklimit_algo NOSUPERUSER NOBYPASSRLS;
SET ROLE regress_pklimit_algo;
SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user;
SELECT i, allowed, count, remaining FROM generate_series(1, 3) i,
  LATERAL pklimit_check('app-gcra' || left(i::text, 0), 2, '36500 days', algorithm => 'gcra');
SELECT i, allowed, count, remaining FROM generate_series(1, 3) i,
  LATERAL pklimit_check('app-sliding' || left(i::text, 0), 2, '36500 days', algorithm => 'sliding');
SELECT allowed, count FROM pklimit_check('app-gcra', 2, '36500 days', algorithm => 'fixed');
SELECT allowed, count, remaining FROM pklimit_check('app-peek', 2, '36500 days', cost => 0, algorithm => 'gcra');
SELECT pklimit_allow('app-zero', 0, '36500 days', algorithm => 'sliding') AS zero_refuses;
SELECT key, allowed, count FROM pklimit_check_all(ARRAY['app-a', 'app-b'], ARRAY[1, 1],
  ARRAY['36500 days', '36500 days']::interval[], record_refused => false, algorithm => 'gcra');
SELECT pklimit_allow_all(ARRAY['app-a', 'app-b'], ARRAY[1, 1],
  ARRAY['36500 days', '36500 days']::interval[], record_refused => false, algorithm => 'gcra') AS refused;
SELECT pklimit_count('app-gcra') AS gcra, pklimit_count('app-sliding') AS sliding,
       pklimit_count('app-peek') AS peek, pklimit_count('app-a') AS a;
SELECT pklimit_forget('app-gcra'), pklimit_count('app-gcra');
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
  ($$SELECT pklimit_allow('app-gcra', 1, '36500 days', algorithm => 'GCRA')$$),
  ($$SELECT pklimit_check('app-gcra', 1, '36500 days', algorithm => NULL)$$),
  ($$SELECT pklimit_check_all(ARRAY['app-a'], ARRAY[1], ARRAY['36500 days']::interval[], algorithm => '')$$),
  ($$SELECT pklimit_allow_all(ARRAY['app-a'], ARRAY[1], ARRAY['36500 days']::interval[], algorithm => 'leaky')$$)
) AS t(q);
SELECT count(*) FROM platformkit_limits;
RESET ROLE;
SELECT key, algorithm, count, max_count, previous_count FROM platformkit_limits
 WHERE key LIKE 'g:app-%' ORDER BY key COLLATE "C";
DROP ROLE regress_pklimit_algo;

TRUNCATE platformkit_limits;
