-- pklimit_errors: every bad input is an ERROR with its SQLSTATE, raised
-- before anything is recorded.

TRUNCATE platformkit_limits;

\i sql/include/sqlstate_of.sql

SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
  ($$SELECT pklimit_allow(NULL)$$),
  ($$SELECT pklimit_allow(NULL, 1, '1 hour')$$),
  ($$SELECT pklimit_allow('k', NULL::bigint, '1 hour')$$),
  ($$SELECT pklimit_allow('k', 1, NULL)$$),
  ($$SELECT pklimit_check(NULL, 1, '1 hour')$$),
  ($$SELECT pklimit_check('k', NULL::bigint, '1 hour')$$),
  ($$SELECT pklimit_check('k', 1, NULL)$$),
  ($$SELECT pklimit_count(NULL)$$),
  ($$SELECT pklimit_forget(NULL)$$),
  ($$SELECT pklimit_purge(NULL)$$),
  ($$SELECT pklimit_allow('')$$),
  ($$SELECT pklimit_allow('', 1, '1 hour')$$),
  ($$SELECT pklimit_check('', 1, '1 hour')$$),
  ($$SELECT pklimit_count('')$$),
  ($$SELECT pklimit_forget('')$$),
  ($$SELECT pklimit_allow('k', -1, '1 hour')$$),
  ($$SELECT pklimit_check('k', -9223372036854775808, '1 hour')$$),
  ($$SELECT pklimit_allow('k', 1, '0')$$),
  ($$SELECT pklimit_allow('k', 1, '-1 second')$$),
  ($$SELECT pklimit_allow('k', 1, '1 day -24 hours')$$),
  ($$SELECT pklimit_allow('k', 1, '1 month')$$),
  ($$SELECT pklimit_allow('k', 1, '1 year')$$),
  ($$SELECT pklimit_allow('k', 1, '1 mon -30 days')$$),
  ($$SELECT pklimit_check('k', 1, '1 month')$$),
  ($$SELECT pklimit_allow('k', 1, '3650001 days')$$),
  ($$SELECT pklimit_allow('k', 1, '2147483647 days 2562047788 hours')$$),
  ($$SELECT pklimit_allow('k', 1, '213503990 days')$$),
  ($$SELECT pklimit_check('k', 1, '-213503990 days')$$),
  ($$SELECT pklimit_purge('-178000000 years')$$),
  ($$SELECT pklimit_purge('-2562047788:00:54.775807')$$),
  ($$SELECT pklimit_purge('-1 second')$$),
  ($$SELECT pklimit_purge('-1 month')$$)
) AS t(q);

-- nothing was recorded by any of them
SELECT count(*) FROM platformkit_limits;

-- messages, details and hints as a user sees them
SELECT pklimit_allow(NULL, 1, '1 hour');
SELECT pklimit_allow('', 1, '1 hour');
SELECT pklimit_allow('k', -5, '1 hour');
SELECT pklimit_allow('k', 1, '0');
SELECT pklimit_allow('k', 1, '1 month');
SELECT pklimit_allow('k', 1, '3650001 days');
SELECT pklimit_purge('-1 day');
