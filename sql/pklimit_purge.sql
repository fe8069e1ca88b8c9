-- pklimit_purge: exact retention whatever the mix of window lengths, for
-- every tenant, never an open window; privileges decide who may purge.

TRUNCATE platformkit_limits;

-- Rows as pklimit writes them, windows of several lengths and tenants,
-- placed relative to the server clock.  "ended" is how long ago the window
-- closed (negative: still open).
CREATE TEMP TABLE fixture (key text, len interval, ended interval);
INSERT INTO fixture VALUES
  ('g:1s-ended-3d',        '1 second',  '3 days'),
  ('g:1s-ended-23h',       '1 second',  '23 hours'),
  ('t4:acme:15m-ended-2d', '15 minutes','2 days'),
  ('t4:acme:15m-open',     '15 minutes','-5 minutes'),
  ('t2:zz:1d-ended-25h',   '1 day',     '25 hours'),
  ('t2:zz:1d-ended-1h',    '1 day',     '1 hour'),
  ('g:30d-open',           '30 days',   '-10 days'),
  ('g:30d-ended-2d',       '30 days',   '2 days'),
  ('g:36500d-open',        '36500 days','-1000 days'),
  ('h:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef', '1 hour', '50 hours');
INSERT INTO platformkit_limits (key, window_start, window_end, count, updated_at)
SELECT key, clock_timestamp() - ended - len, clock_timestamp() - ended, 3,
       clock_timestamp() - ended - len / 2
  FROM fixture;

-- the default retention is 1 day: windows that closed more than a day ago go
SELECT pklimit_purge();
SELECT key FROM platformkit_limits ORDER BY key COLLATE "C";

-- retention 1 hour 30 minutes
SELECT pklimit_purge('90 minutes');
SELECT key FROM platformkit_limits ORDER BY key COLLATE "C";

-- retention 0: every closed window, never an open one
SELECT pklimit_purge('0');
SELECT key FROM platformkit_limits ORDER BY key COLLATE "C";
SELECT pklimit_purge('0');

-- retention in months is fine (it is measured back from now); one longer
-- than any window ever lasted keeps every row
SELECT pklimit_purge('1 month');
SELECT pklimit_purge('2147483647 days'), pklimit_purge('178000000 years'),
       pklimit_purge('2562047788:00:54.775807'), pklimit_purge('3650000 days'),
       pklimit_purge('6000 years 1000000 days'), pklimit_purge('70000000 hours');

-- the last purge, as a DBA sees it
SELECT running, finished_at >= started_at AS finished, deleted, failed,
       cutoff <= clock_timestamp() AS cutoff_in_past
  FROM pklimit_purge_status;

-- counts written by pklimit itself survive a purge while their window is open
SELECT pklimit_allow('live', 5, '36500 days'), pklimit_allow('live', 5, '36500 days');
SELECT pklimit_purge('0');
SELECT pklimit_count('live');

-- privileges: purge and its status are not for PUBLIC
CREATE ROLE regress_pklimit_purger NOSUPERUSER NOBYPASSRLS;
SET ROLE regress_pklimit_purger;
SELECT pklimit_purge();
SELECT * FROM pklimit_purge_status;
RESET ROLE;
-- EXECUTE is what decides: the purge runs as the table's owner, so a role
-- granted only EXECUTE deletes every tenant's closed windows, although it
-- has no privilege on the table and sees no row of it
GRANT EXECUTE ON FUNCTION pklimit_purge(interval) TO regress_pklimit_purger;
INSERT INTO platformkit_limits VALUES
  ('t1:a:old', clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1, clock_timestamp() - interval '2 days'),
  ('g:old', clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1, clock_timestamp() - interval '2 days');
SET ROLE regress_pklimit_purger;
SELECT count(*) AS rows_visible_directly FROM platformkit_limits;
SELECT pklimit_purge();
RESET ROLE;
SELECT key FROM platformkit_limits ORDER BY key COLLATE "C";
-- and neither DELETE nor SELECT on the table can be granted to it (pklimit_grants)
\set VERBOSITY terse
GRANT SELECT, DELETE ON platformkit_limits TO regress_pklimit_purger;
\set VERBOSITY default
SELECT privilege_type FROM information_schema.role_table_grants
 WHERE table_name = 'platformkit_limits' AND grantee = 'regress_pklimit_purger';
REVOKE ALL ON platformkit_limits FROM regress_pklimit_purger;
REVOKE ALL ON FUNCTION pklimit_purge(interval) FROM regress_pklimit_purger;
DROP ROLE regress_pklimit_purger;
