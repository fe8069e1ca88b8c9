-- The memory path (durable => false; docs/memory.md): its errors, the same
-- answers as the durable path for every algorithm and option, the row it
-- writes behind, one count shared with durable calls, pklimit_count and
-- pklimit_forget across both, a decrement, several keys, tenants, rollback,
-- a read-only transaction, shadow mode, pklimit_stats, and a role that is
-- neither superuser nor BYPASSRLS.  Windows are 36500 days, so nothing here
-- depends on the time of day.  How many calls were decided in memory is not
-- shown: a loaded machine may send some durably (back-pressure), with the
-- same answers.

TRUNCATE platformkit_limits;
SELECT pklimit_stats_reset();
\i sql/include/sqlstate_of.sql
ALTER SYSTEM SET pklimit.flush_interval = '50ms';
SELECT pg_reload_conf();

-- wait_row(key, count): true once the row of stored key has that count
-- (the flush wrote it), false after 60 s
CREATE FUNCTION pg_temp.wait_row(k text, expected bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. 1200 LOOP
    IF EXISTS (SELECT FROM platformkit_limits WHERE key = k AND count = expected) THEN
      RETURN true;
    END IF;
    PERFORM pg_sleep(0.05);
  END LOOP;
  RETURN false;
END $$;

-- bad input is an ERROR on the memory path too, durable NULL included
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
  ($$SELECT pklimit_allow('k', 3, '1 hour', durable => NULL)$$),
  ($$SELECT pklimit_check('k', 3, '1 hour', durable => NULL)$$),
  ($$SELECT pklimit_allow_all(ARRAY['k'], ARRAY[3], ARRAY['1 hour'::interval], durable => NULL)$$),
  ($$SELECT * FROM pklimit_check_all(ARRAY['k'], ARRAY[3], ARRAY['1 hour'::interval], durable => NULL)$$),
  ($$SELECT pklimit_decrement('k', 1, NULL)$$),
  ($$SELECT pklimit_allow('k', 3, '1 hour', cost => -1, durable => false)$$),
  ($$SELECT pklimit_allow('', 3, '1 hour', durable => false)$$),
  ($$SELECT pklimit_allow('k', 3, '1 month', durable => false)$$),
  ($$SELECT pklimit_allow('k', 3, '1 hour', algorithm => 'GCRA', durable => false)$$),
  ($$SELECT pklimit_decrement('k', -1, false)$$)
) AS t(q);
SELECT count(*) AS nothing_recorded FROM platformkit_limits;

-- the same answers as a durable call, call by call, for every algorithm:
-- m-* on the memory path, d-* durable
SELECT a.name, i, m.allowed, m.count, m.remaining, m.status,
       (m.allowed, m.count, m.remaining, m.status) =
       (d.allowed, d.count, d.remaining, d.status) AS same
  FROM (VALUES ('fixed'), ('gcra'), ('sliding')) a(name),
       generate_series(1, 5) i,
       LATERAL pklimit_check('m-' || a.name || left(i::text, 0), 3, '36500 days',
                             algorithm => a.name, durable => false) m,
       LATERAL pklimit_check('d-' || a.name || left(i::text, 0), 3, '36500 days',
                             algorithm => a.name) d
 ORDER BY 1, 2;
-- cost, record_refused and block, on the fixed window
SELECT i, m.allowed, m.count, (m.allowed, m.count) = (d.allowed, d.count) AS same
  FROM generate_series(1, 4) i,
       LATERAL pklimit_check('m-opts' || left(i::text, 0), 5, '36500 days', cost => 2,
                             record_refused => false, block => '1 day', durable => false) m,
       LATERAL pklimit_check('d-opts' || left(i::text, 0), 5, '36500 days', cost => 2,
                             record_refused => false, block => '1 day') d
 ORDER BY 1;
-- a blocked key stays refused, on both paths
SELECT pklimit_allow('m-opts', 100, '36500 days', durable => false) AS m_blocked,
       pklimit_allow('d-opts', 100, '36500 days') AS d_blocked;

-- the flush writes each state whole: the rows of m-* and d-* agree but for
-- when they were last changed (and a GCRA row's start, which is counted
-- from the moment of the call)
SELECT pg_temp.wait_row('g:m-fixed', 5) AND pg_temp.wait_row('g:m-opts', 4) AS flushed;
SELECT m.key, m.algorithm, m.count,
       (m.count, m.algorithm, m.max_count, m.previous_count, m.blocked_until IS NULL)
       IS NOT DISTINCT FROM
       (d.count, d.algorithm, d.max_count, d.previous_count, d.blocked_until IS NULL)
       AND (m.algorithm = 'gcra' OR (m.window_start, m.window_end, m.expires_at)
            IS NOT DISTINCT FROM (d.window_start, d.window_end, d.expires_at)) AS same_row
  FROM platformkit_limits m
  JOIN platformkit_limits d ON d.key = 'g:d-' || substr(m.key, 5)
 WHERE m.key LIKE 'g:m-%'
 ORDER BY 1;

-- one count whichever path calls: pklimit_count reads memory, a durable call
-- takes the key out of memory and is answered after its row is written, and
-- the memory path carries on from there
SELECT pklimit_check('mixed', 10, '36500 days', durable => false) IS NOT NULL AS first;
SELECT count(*) FROM generate_series(1, 3) i,
       LATERAL pklimit_allow('mixed' || left(i::text, 0), 10, '36500 days', durable => false);
SELECT pklimit_count('mixed') AS memory_count;
SELECT count FROM pklimit_check('mixed', 10, '36500 days') AS durable_count;
SELECT count AS row_at_once FROM platformkit_limits WHERE key = 'g:mixed';
SELECT count AS memory_again FROM pklimit_check('mixed', 10, '36500 days', durable => false);
SELECT pklimit_decrement('mixed', 2, durable => false) AS decremented,
       pklimit_decrement('mixed', 1) AS durable_decrement;
SELECT pg_temp.wait_row('g:mixed', 3) AS flushed;
-- pklimit_forget: the row and the state in memory go together
SELECT pklimit_forget('mixed') AS forgotten, pklimit_count('mixed') AS count;
SELECT count(*) AS no_row FROM platformkit_limits WHERE key = 'g:mixed';
SELECT count AS starts_again FROM pklimit_check('mixed', 10, '36500 days', durable => false);

-- several keys, all or none, as durably
SELECT i, k.key, k.allowed, k.count
  FROM generate_series(1, 3) i,
       LATERAL pklimit_check_all(ARRAY['ga' || left(i::text, 0), 'gb'], ARRAY[5, 2],
                                 ARRAY['36500 days', '36500 days']::interval[],
                                 record_refused => false, durable => false) k
 ORDER BY 1, 2;
SELECT pklimit_allow_all(ARRAY['ga', 'gb'], ARRAY[5, 5],
                         ARRAY['36500 days', '36500 days']::interval[], durable => false) AS both;
SELECT pklimit_count('ga') AS ga, pklimit_count('gb') AS gb;

-- tenants: the stored key carries the tenant, in memory too
SET platformkit.tenant = 't1';
SELECT count AS t1 FROM pklimit_check('shared', 10, '36500 days', durable => false);
SELECT count AS t1 FROM pklimit_check('shared', 10, '36500 days', durable => false);
SET platformkit.tenant = 't2';
SELECT count AS t2 FROM pklimit_check('shared', 10, '36500 days', durable => false);
RESET platformkit.tenant;
SELECT pklimit_count('shared') AS global;

-- rollback-proof, and in a read-only transaction
BEGIN;
SELECT pklimit_allow('rb', 10, '36500 days', durable => false);
SELECT pklimit_allow('rb', 10, '36500 days', durable => false);
ROLLBACK;
BEGIN TRANSACTION READ ONLY;
SELECT pklimit_allow('rb', 10, '36500 days', durable => false);
COMMIT;
SELECT pklimit_count('rb') AS counted;
SELECT pg_temp.wait_row('g:rb', 3) AS flushed;

-- shadow mode decides and records, and allows
SET pklimit.shadow_mode = on;
SELECT allowed, count, status FROM pklimit_check('m-fixed', 3, '36500 days', durable => false);
RESET pklimit.shadow_mode;

-- a role that is neither superuser nor BYPASSRLS: the memory path works,
-- the table stays closed to it
CREATE ROLE regress_pklimit_mem NOSUPERUSER NOBYPASSRLS;
SET ROLE regress_pklimit_mem;
SELECT count FROM pklimit_check('role', 10, '36500 days', durable => false);
SELECT count FROM pklimit_check('role', 10, '36500 days', durable => false);
SELECT pklimit_count('role') AS count;
SELECT pg_temp.sqlstate_of($$SELECT count(*) FROM platformkit_limits$$);
RESET ROLE;
DROP ROLE regress_pklimit_mem;
SELECT pg_temp.wait_row('g:role', 2) AS flushed;

-- pklimit_stats counts the memory path
SELECT memory_calls > 0 AS memory_calls, memory_reads > 0 AS memory_reads,
       flushes > 0 AS flushes, rows_flushed > 0 AS rows_flushed,
       memory_keys >= 10 AS memory_keys, flush_lag_ms IS NOT NULL AS flush_lag,
       events >= memory_calls AS events_counted
  FROM pklimit_stats WHERE datname = current_database();

-- pklimit_memory_stats() (0.4.0): the columns of pklimit_stats, then hits,
-- misses and admissions refused.  The first call on a new key is a miss,
-- whether its key was read in or it was applied durably; each later call
-- decided on it in memory is a hit (a loaded machine may send one durably,
-- a fallback: neither).
SELECT pg_get_function_arguments('pklimit_memory_stats()'::regprocedure) AS columns;
CREATE TEMP TABLE before AS SELECT hits, misses, admissions_refused
  FROM pklimit_memory_stats() WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database());
SELECT count(pklimit_allow('stats-key', 100, '36500 days', durable => false)) FROM generate_series(1, 5);
SELECT m.misses - b.misses AS misses, m.hits - b.hits BETWEEN 0 AND 4 AS hits_at_most_4,
       m.admissions_refused - b.admissions_refused AS refused
  FROM pklimit_memory_stats() m, before b
 WHERE m.dbid = (SELECT oid FROM pg_database WHERE datname = current_database());
SELECT pklimit_forget('stats-key') AS forgotten;
-- who may read it: as pklimit_stats()
SELECT has_function_privilege('public', 'pklimit_memory_stats()', 'EXECUTE') AS public_executes,
       has_function_privilege('pg_read_all_stats', 'pklimit_memory_stats()', 'EXECUTE') AS stats_readers_execute;

ALTER SYSTEM RESET pklimit.flush_interval;
SELECT pg_reload_conf();
TRUNCATE platformkit_limits;
