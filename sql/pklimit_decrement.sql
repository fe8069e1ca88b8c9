-- pklimit_decrement: events taken back from a key's open state, as
-- docs/algorithms.md ("Taking events back") says for each algorithm: never
-- below zero, never a row created, nothing once the state has closed, a
-- block left in place; its errors, tenants, rollback, a read-only
-- transaction, pklimit_stats, and a role that is neither superuser nor
-- BYPASSRLS.  Windows are 36500 days (W; the fixed and sliding window that
-- holds now is [1970-01-01, 2069-12-07)), so nothing here depends on the
-- time of day; with max_count 4, GCRA's step T is W / 4.

TRUNCATE platformkit_limits;
\i sql/include/sqlstate_of.sql

-- bad input is an ERROR, raised before anything is applied
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
  ($$SELECT pklimit_decrement(NULL)$$),
  ($$SELECT pklimit_decrement('')$$),
  ($$SELECT pklimit_decrement('k', NULL::bigint)$$),
  ($$SELECT pklimit_decrement('k', -1)$$),
  ($$SELECT pklimit_decrement(NULL, -1)$$)
) AS t(q);
SELECT pklimit_decrement('k', -1);

-- a key without a row: 0, and no row is created, whatever the cost
SELECT pklimit_decrement('none') AS no_row, pklimit_decrement('none', 0) AS peek,
       pklimit_decrement('none', 9223372036854775807) AS largest;
SELECT count(*) AS no_rows FROM platformkit_limits;

-- fixed: the count goes down, never below zero; the row stays, and the
-- window with it
SELECT i, allowed, count FROM generate_series(1, 5) i,
  LATERAL pklimit_check('fixed' || left(i::text, 0), 3, '36500 days');
SELECT pklimit_decrement('fixed') AS after_one;
SELECT pklimit_decrement('fixed', 3) AS after_three;
SELECT pklimit_count('fixed') AS count;
SELECT allowed, count, remaining FROM pklimit_check('fixed', 3, '36500 days');
SELECT pklimit_decrement('fixed', 10) AS never_below_zero;
SELECT count, window_start = to_timestamp(0) AS same_window FROM platformkit_limits WHERE key = 'g:fixed';
-- cost 0 changes nothing, updated_at included, and answers the count
SELECT l::text AS before FROM platformkit_limits l WHERE key = 'g:fixed' \gset
SELECT pklimit_decrement('fixed', 0) AS zero_cost;
SELECT l::text = :'before' AS unchanged FROM platformkit_limits l WHERE key = 'g:fixed';
-- a decrement of an empty count writes nothing either
SELECT pklimit_decrement('fixed') AS empty;
SELECT l::text = :'before' AS unchanged FROM platformkit_limits l WHERE key = 'g:fixed';
-- and the limit counts again from there
SELECT i, allowed, count FROM generate_series(1, 4) i,
  LATERAL pklimit_check('fixed' || left(i::text, 0), 3, '36500 days');

-- a closed window: nothing is taken from it, and nothing from the next
INSERT INTO platformkit_limits (key, window_start, window_end, count, updated_at)
VALUES ('g:closed', to_timestamp(-36500::bigint * 86400), to_timestamp(0), 5, to_timestamp(-1));
SELECT l::text AS before FROM platformkit_limits l WHERE key = 'g:closed' \gset
SELECT pklimit_decrement('closed') AS closed;
SELECT l::text = :'before' AS unchanged FROM platformkit_limits l WHERE key = 'g:closed';

-- a blocked key stays blocked: only its count goes down
SELECT i, allowed, count FROM generate_series(1, 3) i,
  LATERAL pklimit_check('blocked' || left(i::text, 0), 2, '36500 days', block => '1 day');
SELECT blocked_until AS blocked_until FROM platformkit_limits WHERE key = 'g:blocked' \gset
SELECT pklimit_decrement('blocked', 3) AS count_after;
SELECT count, blocked_until = :'blocked_until' AS block_kept FROM platformkit_limits WHERE key = 'g:blocked';
SELECT allowed, count, reset_at = :'blocked_until' AS reset_at_block_end
  FROM pklimit_check('blocked', 2, '36500 days');

-- GCRA: tat moves back by cost steps of T, never before now
SELECT i, allowed, count FROM generate_series(1, 3) i,
  LATERAL pklimit_check('gcra' || left(i::text, 0), 4, '36500 days', algorithm => 'gcra');
SELECT window_start AS since FROM platformkit_limits WHERE key = 'g:gcra' \gset
SELECT pklimit_decrement('gcra') AS after_one;
SELECT count AS steps, window_start = :'since' AS same_since, max_count FROM platformkit_limits WHERE key = 'g:gcra';
SELECT allowed, count FROM pklimit_check('gcra', 4, '36500 days', algorithm => 'gcra');
-- a full bucket: its steps moved into since (a whole window); one step back
-- takes a window out of since again
SELECT allowed, count FROM pklimit_check('gcra', 4, '36500 days', algorithm => 'gcra');
SELECT count AS steps, window_start = :'since'::timestamptz + interval '36500 days' AS since_one_window_on
  FROM platformkit_limits WHERE key = 'g:gcra';
SELECT pklimit_decrement('gcra') AS after_one;
SELECT count AS steps, window_start = :'since' AS since_back FROM platformkit_limits WHERE key = 'g:gcra';
-- more than the bucket holds empties it: its state closes at now
SELECT pklimit_decrement('gcra', 5) AS emptied;
SELECT count AS steps, window_start > :'since' AS since_now FROM platformkit_limits WHERE key = 'g:gcra';
SELECT pklimit_count('gcra') AS count, pklimit_decrement('gcra') AS closed;
SELECT i, allowed, count FROM generate_series(1, 5) i,
  LATERAL pklimit_check('gcra' || left(i::text, 0), 4, '36500 days', algorithm => 'gcra');
-- max_count 0: a refusal fills the bucket for a window; any decrement
-- empties it (T is unbounded), and a call of max_count 1 is then allowed
SELECT allowed FROM pklimit_check('gcra0', 0, '36500 days', algorithm => 'gcra');
SELECT window_start > now() + interval '36499 days' AS full_for_a_window FROM platformkit_limits WHERE key = 'g:gcra0';
SELECT pklimit_decrement('gcra0') AS emptied;
SELECT allowed FROM pklimit_check('gcra0', 1, '36500 days', algorithm => 'gcra');

-- sliding: the current count first, then the previous one, never below 0
INSERT INTO platformkit_limits (key, window_start, window_end, count, updated_at, algorithm,
                                max_count, previous_count, expires_at)
VALUES ('g:sliding', to_timestamp(0), to_timestamp(36500::bigint * 86400), 2, to_timestamp(1), 'sliding',
        10, 3, to_timestamp(73000::bigint * 86400));
SELECT pklimit_decrement('sliding') = pklimit_count('sliding') AS answers_the_count;
SELECT count, previous_count FROM platformkit_limits WHERE key = 'g:sliding';
SELECT pklimit_decrement('sliding', 3) = pklimit_count('sliding') AS answers_the_count;
SELECT count, previous_count FROM platformkit_limits WHERE key = 'g:sliding';
SELECT pklimit_decrement('sliding', 5) AS emptied;
SELECT count, previous_count, expires_at = to_timestamp(73000::bigint * 86400) AS still_expires FROM platformkit_limits WHERE key = 'g:sliding';
-- a row whose current window is now's previous: its count becomes the
-- previous one, and is taken from there
INSERT INTO platformkit_limits (key, window_start, window_end, count, updated_at, algorithm,
                                max_count, previous_count, expires_at)
VALUES ('g:sliding-move', to_timestamp(-36500::bigint * 86400), to_timestamp(0), 5, to_timestamp(-1), 'sliding',
        10, 7, to_timestamp(36500::bigint * 86400));
SELECT pklimit_decrement('sliding-move', 2) = pklimit_count('sliding-move') AS answers_the_count;
SELECT count, previous_count, window_start = to_timestamp(0) AS moved_on,
       expires_at = to_timestamp(73000::bigint * 86400) AS expires_later
  FROM platformkit_limits WHERE key = 'g:sliding-move';
-- two windows back it no longer weighs: closed, unchanged
INSERT INTO platformkit_limits (key, window_start, window_end, count, updated_at, algorithm,
                                max_count, previous_count, expires_at)
VALUES ('g:sliding-old', to_timestamp(-73000::bigint * 86400), to_timestamp(-36500::bigint * 86400), 5,
        to_timestamp(-36500::bigint * 86400 - 1), 'sliding', 5, 5, to_timestamp(0));
SELECT l::text AS before FROM platformkit_limits l WHERE key = 'g:sliding-old' \gset
SELECT pklimit_decrement('sliding-old') AS closed;
SELECT l::text = :'before' AS unchanged FROM platformkit_limits l WHERE key = 'g:sliding-old';

-- tenants: a decrement takes back from the caller's tenant's key only
SELECT pklimit_allow('t', 10, '36500 days');
SET platformkit.tenant = 'acme';
SELECT pklimit_allow('t', 10, '36500 days'), pklimit_allow('t', 10, '36500 days');
SELECT pklimit_decrement('t') AS acme_after;
RESET platformkit.tenant;
SELECT pklimit_count('t') AS global_untouched;
SELECT key, count FROM platformkit_limits WHERE key LIKE '%:t' ORDER BY key;

-- a decrement outlives the caller's transaction, and works in a read-only one
SELECT i, pklimit_allow('rb', 10, '36500 days') FROM generate_series(1, 3) i;
BEGIN;
SELECT pklimit_decrement('rb') AS in_transaction;
ROLLBACK;
BEGIN READ ONLY;
SELECT pklimit_decrement('rb') AS read_only;
COMMIT;
SELECT pklimit_count('rb') AS after_rollback_and_read_only;

-- pklimit_stats: a decrement is not a recording call; events only rise
SELECT calls, events, batches FROM pklimit_stats WHERE datname = current_database() \gset before_
SELECT pklimit_decrement('rb') AS one_more;
SELECT calls = :before_calls AS calls_same, events = :before_events AS events_same,
       batches = :before_batches AS batches_same
  FROM pklimit_stats WHERE datname = current_database();

-- unavailable: NULL with the warning (allow or deny), or the error; bad
-- input stays an ERROR (the key's row locked by this transaction)
BEGIN;
SELECT count FROM platformkit_limits WHERE key = 'g:rb' FOR UPDATE;
SET LOCAL pklimit.timeout = '300ms';
SET LOCAL pklimit.on_unavailable = deny;
SELECT pklimit_decrement('rb') IS NULL AS unavailable_is_null;
SELECT pklimit_decrement('rb', -1);
ROLLBACK;
BEGIN;
SELECT count FROM platformkit_limits WHERE key = 'g:rb' FOR UPDATE;
SET LOCAL pklimit.timeout = '300ms';
SET LOCAL pklimit.on_unavailable = error;
SELECT pklimit_decrement('rb');
ROLLBACK;
SELECT pklimit_count('rb') AS unchanged;

-- a role that is neither superuser nor BYPASSRLS takes back its own events
CREATE ROLE regress_pklimit_dec NOSUPERUSER NOBYPASSRLS;
SET ROLE regress_pklimit_dec;
SELECT i, pklimit_allow('role', 10, '36500 days') FROM generate_series(1, 2) i;
SELECT pklimit_decrement('role') AS after_one, pklimit_count('role') AS count;
RESET ROLE;
DROP ROLE regress_pklimit_dec;
TRUNCATE platformkit_limits;
