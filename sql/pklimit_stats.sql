-- pklimit_stats: a known mix of allowed, refused and unavailable calls,
-- each column checked to the unit; shadow mode (allow, check, check_all)
-- with its counts; pklimit.track_stats; the reset; and who may read and
-- reset.  Only this session calls pklimit in this database meanwhile; the
-- resets are of this database only.

\i sql/include/sqlstate_of.sql

SELECT now() AS before_reset, oid AS this_db FROM pg_database WHERE datname = current_database() \gset
SELECT pklimit_stats_reset(:'this_db');
-- no row, or a row of zeros if the worker runs
SELECT coalesce(sum(calls + allowed + refused + unavailable + events + batches), 0) AS counted,
       bool_and(stats_reset >= :'before_reset') IS NOT FALSE AS reset_now
  FROM pklimit_stats WHERE datname = current_database();

-- limit 3: three allowed, two refused (every attempt counts: 5 events)
SELECT pklimit_allow('stats:a', 3, '36500 days') FROM generate_series(1, 5);
-- cost 4: allowed, 4 events
SELECT allowed, count, status FROM pklimit_check('stats:b', 10, '36500 days', cost => 4);
-- a peek: allowed, records nothing
SELECT allowed, count, status FROM pklimit_check('stats:b', 10, '36500 days', cost => 0);
-- quota semantics: refused, records nothing
SELECT pklimit_allow('stats:b', 10, '36500 days', cost => 7, record_refused => false);
-- two limits in one call count once: refused (stats:d allows none), both
-- recorded (2 events); then allowed (2 events)
SELECT key, allowed, count, status
  FROM pklimit_check_all(ARRAY['stats:c', 'stats:d'], ARRAY[5, 0], ARRAY['36500 days', '36500 days']::interval[]);
SELECT pklimit_allow_all(ARRAY['stats:e', 'stats:f'], ARRAY[5, 5], ARRAY['36500 days', '36500 days']::interval[]);

-- 10 calls: 6 allowed, 4 refused; 13 events in 8 batches (one per call
-- that recorded anything: this session waits for each answer)
SELECT calls, allowed, refused, unavailable, shadow_refused, events, batches,
       allowed + refused + unavailable = calls AS adds_up
  FROM pklimit_stats WHERE datname = current_database();

-- shadow mode: what would be refused is allowed, recorded as usual
SET pklimit.shadow_mode = on;
SELECT pklimit_allow('stats:a', 3, '36500 days');
SELECT allowed, count, remaining, retry_after > '0' AS retry_after_set, status
  FROM pklimit_check('stats:a', 3, '36500 days');
SELECT key, allowed, count, remaining, status
  FROM pklimit_check_all(ARRAY['stats:a', 'stats:g'], ARRAY[3, 5], ARRAY['36500 days', '36500 days']::interval[]);
-- a call the limit allows is no shadow
SELECT allowed, count, status FROM pklimit_check('stats:h', 5, '36500 days');
SELECT pklimit_count('stats:a') AS a_recorded_as_usual;
RESET pklimit.shadow_mode;
SELECT pklimit_allow('stats:a', 3, '36500 days') AS refused_again;

-- 15 calls: 10 allowed (3 by shadow mode), 5 refused; 19 events, 13 batches
SELECT calls, allowed, refused, unavailable, shadow_refused, events, batches,
       allowed + refused + unavailable = calls AS adds_up
  FROM pklimit_stats WHERE datname = current_database();

-- unavailable: the row locked in this session's own transaction; shadow
-- mode does not change what pklimit.on_unavailable answers
BEGIN;
SELECT count FROM platformkit_limits WHERE key = 'g:stats:a' FOR UPDATE;
SET LOCAL pklimit.timeout = '1s';
SET LOCAL pklimit.shadow_mode = on;
SELECT pklimit_allow('stats:a', 3, '36500 days');
SET LOCAL pklimit.on_unavailable = deny;
SELECT allowed, status FROM pklimit_check('stats:a', 3, '36500 days');
SELECT pklimit_allow_all(ARRAY['stats:z', 'stats:a'], ARRAY[5, 5], ARRAY['36500 days', '36500 days']::interval[]);
ROLLBACK;

-- a store error: the worker refuses to write a table with triggers
CREATE FUNCTION pg_temp.noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER regress_stats_noop BEFORE UPDATE ON platformkit_limits
  FOR EACH ROW EXECUTE FUNCTION pg_temp.noop();
SELECT allowed, status FROM pklimit_check('stats:a', 3, '36500 days');
DROP TRIGGER regress_stats_noop ON platformkit_limits;

-- no table: it was renamed
ALTER TABLE platformkit_limits RENAME TO regress_stats_renamed;
SELECT allowed, status FROM pklimit_check('stats:a', 3, '36500 days');
ALTER TABLE regress_stats_renamed RENAME TO platformkit_limits;

-- counted with their reasons: 20 calls, 5 unavailable (3 lock_timeouts: two
-- calls on one key, one on two keys; 1 error; 1 no_table), 3 of them failed
-- open (allowed by on_unavailable: the first lock timeout, the error and the
-- missing table), nothing more recorded
SELECT calls, allowed, refused, unavailable, failed_open, timeouts, queue_full, no_worker,
       lock_timeouts, read_only, no_table, errors, shadow_refused, events, batches,
       allowed + refused + unavailable = calls AS adds_up
  FROM pklimit_stats WHERE datname = current_database();

-- the worker, the queue and the waits
SELECT s.worker_pid = a.pid AS worker_pid_is_the_worker, s.queue_depth, s.mean_wait_ms > 0 AS waited,
       s.max_wait_ms >= s.mean_wait_ms AS max_is_max
  FROM pklimit_stats s
  JOIN pg_stat_activity a ON a.datid = s.dbid AND a.application_name = 'pklimit worker'
 WHERE s.datname = current_database();

-- a superuser can stop the counting for a session (its calls and their
-- events); calls go on
SET pklimit.track_stats = off;
SELECT pklimit_allow('stats:i', 5, '36500 days');
RESET pklimit.track_stats;
SELECT calls, events FROM pklimit_stats WHERE datname = current_database();

-- the reset: every counter back to 0, stats_reset now; the database keeps
-- its row while its worker runs
SELECT stats_reset AS old_reset FROM pklimit_stats WHERE datname = current_database() \gset
SELECT pklimit_stats_reset(:'this_db');
SELECT calls, allowed, refused, unavailable, failed_open, lock_timeouts, errors, shadow_refused,
       events, batches, worker_starts, queue_depth, mean_wait_ms, max_wait_ms,
       worker_pid IS NOT NULL AS worker, stats_reset > :'old_reset' AS reset_later
  FROM pklimit_stats WHERE datname = current_database();

-- who may read and reset: pg_read_all_stats and pg_monitor members and
-- superusers read; only superusers reset; no one else does either
CREATE ROLE regress_pklimit_plain NOSUPERUSER NOBYPASSRLS;
CREATE ROLE regress_pklimit_monitor NOSUPERUSER NOBYPASSRLS IN ROLE pg_monitor;
CREATE ROLE regress_pklimit_stats_reader NOSUPERUSER NOBYPASSRLS IN ROLE pg_read_all_stats;
SET ROLE regress_pklimit_plain;
SELECT s, pg_temp.sqlstate_of(s) FROM (VALUES
  ($$SELECT * FROM pklimit_stats$$),
  ($$SELECT * FROM pklimit_stats()$$),
  ($$SELECT pklimit_stats_reset()$$),
  ($$SELECT pklimit_stats_reset(0::oid)$$),
  ($$SET pklimit.track_stats = off$$),
  ($$SET pklimit.shadow_mode = on$$)
) AS t(s);
SHOW pklimit.shadow_mode;
RESET ROLE;
SET ROLE regress_pklimit_monitor;
SELECT calls >= 0 AS monitor_reads FROM pklimit_stats WHERE datname = current_database();
SELECT pg_temp.sqlstate_of($$SELECT pklimit_stats_reset()$$);
RESET ROLE;
SET ROLE regress_pklimit_stats_reader;
SELECT calls >= 0 AS stats_reader_reads FROM pklimit_stats WHERE datname = current_database();
RESET ROLE;
-- the grants beside the owner's
SELECT c.relname AS view, a.grantee::regrole, a.privilege_type
  FROM pg_class c, aclexplode(c.relacl) a
 WHERE c.relname = 'pklimit_stats' AND a.grantee <> c.relowner;
SELECT p.oid::regprocedure AS function, a.grantee::regrole, a.privilege_type
  FROM pg_proc p LEFT JOIN LATERAL aclexplode(p.proacl) a ON a.grantee <> p.proowner
 WHERE p.proname IN ('pklimit_stats', 'pklimit_stats_reset') ORDER BY p.oid::regprocedure::text, a.grantee::regrole::text;
DROP ROLE regress_pklimit_plain, regress_pklimit_monitor, regress_pklimit_stats_reader;
