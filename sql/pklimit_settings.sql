-- pklimit_settings: every setting's default and its invalid values, each
-- rejected with its SQLSTATE.  PostgreSQL 17 and later print the valid range
-- of a setting with units ("1 ms .. 2147483647 ms"): pklimit_settings_1.out.

\i sql/include/sqlstate_of.sql

SELECT name, setting, unit, context, vartype, min_val, max_val, enumvals, boot_val
  FROM pg_settings WHERE name LIKE 'pklimit.%' ORDER BY name;

SELECT s, pg_temp.sqlstate_of(s) FROM (VALUES
  ($$SET pklimit.default_window = '-1'$$),
  ($$SET pklimit.default_window = '0'$$),
  ($$SET pklimit.default_window = 'soon'$$),
  ($$SET pklimit.default_window = '1 fortnight'$$),
  ($$SET pklimit.default_max = 'many'$$),
  ($$SET pklimit.default_max = -1$$),
  ($$SET pklimit.default_max = 2147483648$$),
  ($$SET pklimit.on_unavailable = 'maybe'$$),
  ($$SET pklimit.timeout = 0$$),
  ($$SET pklimit.timeout = '-1s'$$),
  ($$SET pklimit.queue_size = 10$$),
  ($$SET pklimit.max_workers = 2$$),
  ($$SET pklimit.worker_idle_timeout = 0$$),
  ($$SET pklimit.no_such_setting = 1$$)
) AS t(s);

-- pklimit.default_window takes what the window argument takes
SELECT s, pg_temp.sqlstate_of(s) FROM (VALUES
  ($$SET pklimit.default_window = '1 month'$$),
  ($$SET pklimit.default_window = '1 day -24 hours'$$),
  ($$SET pklimit.default_window = '3650001 days'$$),
  ($$SET pklimit.default_window = '1 hour'$$),
  ($$SET pklimit.default_window = '00:00:00.5'$$),
  ($$SET pklimit.default_window = '3650000 days'$$),
  ($$SET pklimit.default_window = '90'$$)
) AS t(s);
SHOW pklimit.default_window;
RESET pklimit.default_window;

-- as a user sees them, with the detail and the hint
SET pklimit.on_unavailable = 'maybe';
SET pklimit.timeout = 0;
SET pklimit.default_window = '0';
SET pklimit.default_window = '1 month';
SET pklimit.default_window = '1 fortnight';
SET pklimit.default_window = '3650001 days';

-- nothing was changed by them
SHOW pklimit.default_max;
SHOW pklimit.default_window;
SHOW pklimit.timeout;
SHOW pklimit.on_unavailable;
SHOW pklimit.queue_size;
SHOW pklimit.max_workers;
SHOW pklimit.worker_idle_timeout;
