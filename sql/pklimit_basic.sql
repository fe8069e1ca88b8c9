-- pklimit_basic: the recording calls, counts, windows and settings.
-- Counting tests use a 36500-day window so no window closes mid-test.

-- allow: true while the count, this event included, is within max_count;
-- refused events are counted too.
SELECT i, pklimit_allow('basic', 2, '36500 days') FROM generate_series(1, 4) i;
SELECT pklimit_count('basic');

-- an integer max_count is accepted as well as a bigint
SELECT pklimit_allow('int-max', 1::integer, '36500 days');

-- max_count = 0 refuses every call, and still counts it
SELECT pklimit_allow('zero', 0, '36500 days'), pklimit_allow('zero', 0, '36500 days');
SELECT pklimit_count('zero');

-- count and forget never create rows
SELECT pklimit_count('never-seen'), pklimit_forget('never-seen');
SELECT count(*) FROM platformkit_limits WHERE key = 'g:never-seen';

-- forget deletes the count; the key starts again
SELECT pklimit_forget('basic'), pklimit_forget('basic'), pklimit_count('basic');
SELECT pklimit_allow('basic', 2, '36500 days');

-- check: the same recording call, with header values
SELECT allowed, count, remaining, retry_after, status FROM pklimit_check('chk', 3, '36500 days');
SELECT allowed, count, remaining, retry_after, status FROM pklimit_check('chk', 3, '36500 days');
SELECT allowed, count, remaining, retry_after, status FROM pklimit_check('chk', 3, '36500 days');
SELECT allowed, count, remaining, retry_after > interval '0' AS must_wait, status
  FROM pklimit_check('chk', 3, '36500 days');
SELECT pklimit_count('chk');
-- retry_after is exact to the microsecond: the event's time plus
-- retry_after is reset_at, which is the row's window end
CREATE TEMP TABLE chk AS SELECT * FROM pklimit_check('chk', 3, '36500 days');
SELECT c.allowed, c.reset_at = l.window_end AS reset_is_window_end,
       l.updated_at + c.retry_after = c.reset_at AS retry_after_exact
  FROM chk c, platformkit_limits l
 WHERE l.key = 'g:chk';

-- the one-argument call uses pklimit.default_max and pklimit.default_window
SHOW pklimit.default_max;
SHOW pklimit.default_window;
SET pklimit.default_max = 2;
SET pklimit.default_window = '3650d';
SHOW pklimit.default_window;
SELECT pklimit_allow('dflt'), pklimit_allow('dflt'), pklimit_allow('dflt');
SELECT window_end - window_start AS window FROM platformkit_limits WHERE key = 'g:dflt';
SET pklimit.default_window = '2 hours';
SELECT pklimit_allow('dflt2h');
SELECT window_end - window_start AS window FROM platformkit_limits WHERE key = 'g:dflt2h';
RESET pklimit.default_max;
RESET pklimit.default_window;
SELECT pklimit_allow('dflt15');
SELECT window_end - window_start AS window FROM platformkit_limits WHERE key = 'g:dflt15';

-- windows are aligned to the Unix epoch in UTC, whatever TimeZone says
SET TimeZone = 'Asia/Kathmandu';
SELECT pklimit_allow('align-15m', 10, '15 minutes'),
       pklimit_allow('align-1d', 10, '1 day'),
       pklimit_allow('align-7s', 10, '7 seconds');
SELECT key,
       extract(epoch FROM window_start)::numeric
         % extract(epoch FROM window_end - window_start)::numeric AS offset_from_epoch,
       window_end - window_start AS window,
       updated_at >= window_start AND updated_at < window_end AS event_inside
  FROM platformkit_limits WHERE key LIKE 'g:align-%' ORDER BY key;
SELECT (window_start AT TIME ZONE 'UTC')::time AS day_starts_at_utc
  FROM platformkit_limits WHERE key = 'g:align-1d';
RESET TimeZone;

-- a window given in days is 24 hours long, with no daylight-saving shift
SELECT pklimit_allow('days', 1, '2 days');
SELECT window_end - window_start = interval '48 hours' AS exactly_48h
  FROM platformkit_limits WHERE key = 'g:days';

-- a key has one window at a time: a call with another window length counts
-- in the key's open window, which keeps its length, so two lengths cannot
-- reset each other's count (six calls, max 1, alternating 1 and 2 hours)
SELECT i, pklimit_allow('rewindow', 1, CASE WHEN i % 2 = 1 THEN '1 hour' ELSE '2 hours' END::interval)
  FROM generate_series(1, 6) i;
SELECT count, window_end - window_start AS window FROM platformkit_limits WHERE key = 'g:rewindow';
SELECT pklimit_allow('rewindow-long', 5, '36500 days'), pklimit_allow('rewindow-long', 5, '36499 days'),
       pklimit_count('rewindow-long');
-- the new length takes effect once the open window has closed (a row whose
-- window of 4 seconds closes in 2)
INSERT INTO platformkit_limits
SELECT 'g:rewindow-short', t - interval '2 seconds', t + interval '2 seconds', 1, t
  FROM (SELECT clock_timestamp() AS t) c;
SELECT allowed, count FROM pklimit_check('rewindow-short', 5, '1 hour');
SELECT count, window_end - window_start AS window FROM platformkit_limits WHERE key = 'g:rewindow-short';
SELECT pg_sleep(extract(epoch FROM window_end - clock_timestamp()) + 0.01) AS wait_for_window_end
  FROM platformkit_limits WHERE key = 'g:rewindow-short';
SELECT allowed, count FROM pklimit_check('rewindow-short', 5, '1 hour');
SELECT window_end - window_start AS window FROM platformkit_limits WHERE key = 'g:rewindow-short';

-- the clock is the server's at the moment of the event, not now(): within
-- one transaction, a 1-second window closes and the next call starts anew
-- (the wait lasts until the stored window's end, however slow the machine)
BEGIN;
SELECT pklimit_allow('clock', 1, '1 second');
SELECT updated_at > now() AS after_transaction_start FROM platformkit_limits WHERE key = 'g:clock';
SELECT pg_sleep(extract(epoch FROM window_end - clock_timestamp()) + 0.01) AS wait_for_window_end
  FROM platformkit_limits WHERE key = 'g:clock';
SELECT pklimit_count('clock') AS closed_window_counts_zero;
SELECT allowed AS new_window_allows, count FROM pklimit_check('clock', 1, '1 second');
COMMIT;

-- the count saturates at the largest bigint instead of overflowing, and
-- the key stays refused
SELECT pklimit_allow('sat', 5, '36500 days');
UPDATE platformkit_limits SET count = 9223372036854775806 WHERE key = 'g:sat';
SELECT allowed, count, remaining FROM pklimit_check('sat', 5, '36500 days');
SELECT allowed, count, remaining FROM pklimit_check('sat', 5, '36500 days');
SELECT allowed, count FROM pklimit_check('sat', 9223372036854775807, '36500 days');

-- bounds: the largest max_count allows every call; windows of one
-- microsecond and of a hundred years work
SELECT pklimit_allow('big', 9223372036854775807, '36500 days'),
       pklimit_allow('big', 9223372036854775807, '36500 days');
SELECT pklimit_allow('tiny', 1, '1 microsecond');
SELECT window_end - window_start AS window FROM platformkit_limits WHERE key = 'g:tiny';
SELECT pklimit_allow('century', 1, '36500 days');
SELECT window_end - window_start AS window,
       window_start = '1970-01-01 00:00:00+00' AS starts_at_epoch
  FROM platformkit_limits WHERE key = 'g:century';

-- long keys are stored as a SHA-256 digest; different long keys never share
-- a count; a key at the limit stays readable
SELECT pklimit_allow(repeat('x', 300) || 'a', 1, '36500 days'),
       pklimit_allow(repeat('x', 300) || 'b', 1, '36500 days'),
       pklimit_allow(repeat('x', 300) || 'a', 1, '36500 days');
SELECT pklimit_count(repeat('x', 300) || 'a'), pklimit_count(repeat('x', 300) || 'b');
SELECT key FROM platformkit_limits
 WHERE key = 'h:' || encode(sha256(convert_to('g:' || repeat('x', 300) || 'a', 'UTF8')), 'hex');
SELECT pklimit_allow(repeat('y', 254), 1, '36500 days');
SELECT length(key) FROM platformkit_limits WHERE key = 'g:' || repeat('y', 254);
SELECT pklimit_allow(repeat('y', 255), 1, '36500 days');
SELECT count(*) FROM platformkit_limits WHERE key LIKE 'g:yyy%';
-- a 1 MB key
SELECT pklimit_allow(repeat('m', 1024 * 1024), 1, '36500 days'),
       pklimit_allow(repeat('m', 1024 * 1024), 1, '36500 days');
SELECT pklimit_forget(repeat('m', 1024 * 1024));

-- purge deletes rows whose window closed more than retention ago, and
-- nothing else; it returns how many it deleted
TRUNCATE platformkit_limits;
INSERT INTO platformkit_limits (key, window_start, window_end, count, updated_at) VALUES
  ('g:closed-2d', clock_timestamp() - interval '2 days 1 hour', clock_timestamp() - interval '2 days', 1, clock_timestamp() - interval '2 days'),
  ('g:closed-2h', clock_timestamp() - interval '3 hours', clock_timestamp() - interval '2 hours', 1, clock_timestamp() - interval '2 hours'),
  ('g:long-open', clock_timestamp() - interval '30 days', clock_timestamp() + interval '1 day', 1, clock_timestamp());
SELECT pklimit_purge();
SELECT key FROM platformkit_limits ORDER BY key;
SELECT pklimit_purge('1 hour');
SELECT key FROM platformkit_limits ORDER BY key;
SELECT pklimit_purge('0');
SELECT key FROM platformkit_limits ORDER BY key;
