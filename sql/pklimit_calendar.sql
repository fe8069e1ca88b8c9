-- pklimit_calendar: calendar windows (0.4.0).  With a time zone, a fixed
-- window of '1 day', '7 days', '1 month' or '1 year' starts at local
-- midnight (of the day, of Monday, of the 1st, of January 1st) and lasts
-- as long as the calendar says: month ends, a leap day, a 23- and a 25-hour
-- day.  Without one, windows stay aligned to the Unix epoch.

TRUNCATE platformkit_limits;
\i sql/include/sqlstate_of.sql
SET TimeZone = 'Europe/Berlin';

-- the window that holds a moment: pklimit_window(window, time_zone, at)
SELECT w.label, p.window_start, p.window_end, p.window_end - p.window_start AS length
  FROM (VALUES
	-- a month's last microsecond and the next month's first
	('January, its end', '1 month', '2027-01-31 23:59:59.999999'::timestamptz),
	('February, its start', '1 month', '2027-02-01 00:00:00'),
	('February of a leap year', '1 month', '2028-02-15 12:00'),
	('December into January', '1 month', '2027-12-31 23:00'),
	-- the leap day, and the day after it
	('the leap day', '1 day', '2028-02-29 12:00'),
	('the day after', '1 day', '2028-03-01 00:00'),
	-- Berlin's daylight-saving changes of 2027: a 23- and a 25-hour day
	('spring forward', '1 day', '2027-03-28 12:00'),
	('fall back', '1 day', '2027-10-31 12:00'),
	('a month that springs forward', '1 month', '2027-03-10'),
	-- a week from Monday, whatever the day; the one holding the change
	('a Sunday''s week', '7 days', '2027-03-28 23:59'),
	('a Monday''s week', '1 week', '2027-03-29 00:00'),
	('a leap year', '1 year', '2028-07-01'),
	('a year', '1 year', '2027-07-01')
  ) AS w(label, win, at),
  LATERAL pklimit_window(w.win::interval, 'Europe/Berlin', w.at) p;

-- the same moment in another zone: its own midnight
SELECT window_start, window_end
  FROM pklimit_window('1 day', 'America/New_York', '2027-11-07 12:00-05');
SELECT window_start, window_end
  FROM pklimit_window('1 month', 'Asia/Kolkata', '2027-01-31 20:00+00');

-- where clocks go back over midnight (Havana, 2025-11-02: midnight twice),
-- the day starts at the first midnight, and the days' windows meet
SELECT at, w.window_start AT TIME ZONE 'UTC' AS start_utc, w.window_end AT TIME ZONE 'UTC' AS end_utc
  FROM unnest(ARRAY['2025-11-02 03:59:59+00', '2025-11-02 04:00:00+00', '2025-11-02 04:30:00+00',
					'2025-11-02 05:00:00+00', '2025-11-02 12:00:00+00']::timestamptz[]) at,
	   LATERAL pklimit_window('1 day', 'America/Havana', at) w;
-- and where they skip it (Santiago, 2024-09-08: 00:00 became 01:00)
SELECT w.window_start AT TIME ZONE 'UTC' AS start_utc, w.window_end - w.window_start AS length
  FROM pklimit_window('1 day', 'America/Santiago', '2024-09-08 12:00+00') w;

-- without a time zone, windows stay aligned to the Unix epoch: a day from
-- UTC midnight, a week of 7 days from a Thursday
SELECT window_start, window_end, extract(isodow FROM window_start AT TIME ZONE 'UTC') AS isodow
  FROM pklimit_window('7 days', NULL, '2027-03-28 12:00');
SELECT window_start, window_end FROM pklimit_window('1 day', at => '2027-03-28 12:00');

-- a call counts in the calendar window that holds it, reset at its end
SELECT c.allowed, c.count, c.remaining,
	   c.reset_at = (SELECT window_end FROM pklimit_window('1 month', 'Europe/Berlin')) AS resets_at_month_end
  FROM generate_series(1, 4) i,
	   LATERAL pklimit_check('quota', 3, '1 month', cost => 1 + 0 * i,
							 time_zone => 'Europe/Berlin') c;
-- refused: retry at the month's end, from the event (a moment of the call)
SELECT clock_timestamp() AS before_call \gset
SELECT c.allowed,
	   c.retry_after BETWEEN w.window_end - clock_timestamp()
					 AND w.window_end - :'before_call'::timestamptz AS retry_at_month_end
  FROM pklimit_check('quota', 3, '1 month', time_zone => 'Europe/Berlin') c,
	   pklimit_window('1 month', 'Europe/Berlin') w;
SELECT (l.window_start, l.window_end) = (SELECT window_start, window_end
		  FROM pklimit_window('1 month', 'Europe/Berlin')) AS row_is_the_month,
	   l.count
  FROM platformkit_limits l WHERE l.key = 'g:quota';
-- the other calls: allow, a group, the memory path, a week, a year
SELECT pklimit_allow('day', 2, '1 day', time_zone => 'Asia/Tokyo') FROM generate_series(1, 3);
SELECT key, allowed, count,
	   reset_at = (SELECT window_end FROM pklimit_window('7 days', 'UTC')) AS resets_monday
  FROM pklimit_check_all(ARRAY['wk1', 'wk2'], ARRAY[5, 5], ARRAY['7 days', '1 week']::interval[],
						 time_zone => 'UTC');
SELECT pklimit_allow_all(ARRAY['y1'], ARRAY[1], ARRAY['1 year']::interval[], time_zone => 'Pacific/Auckland');
SELECT c.allowed, c.count,
	   c.reset_at = (SELECT window_end FROM pklimit_window('1 day', 'Europe/Berlin')) AS resets_at_midnight
  FROM generate_series(1, 3) i,
	   LATERAL pklimit_check('mem-day', 2, '1 day', cost => 1 + 0 * i, durable => false,
							 time_zone => 'Europe/Berlin') c;
SELECT pklimit_count('mem-day'), pklimit_forget('mem-day');

-- a policy with a time zone: a monthly quota per plan
SELECT pklimit_policy_set('monthly', 2, '1 month', time_zone => 'America/New_York');
SELECT name, "window", time_zone FROM pklimit_policies WHERE name = 'monthly';
SELECT c.allowed, c.count,
	   c.reset_at = (SELECT window_end FROM pklimit_window('1 month', 'America/New_York')) AS resets_at_month_end
  FROM generate_series(1, 3) i,
	   LATERAL pklimit_check('acct', 'monthly', 1 + 0 * i) c;
SELECT pklimit_policy_drop('monthly');

-- errors
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
  ($$SELECT pklimit_allow('k', 1, '1 month', time_zone => 'Mars/Olympus')$$),
  ($$SELECT pklimit_allow('k', 1, '1 month', time_zone => '')$$),
  ($$SELECT pklimit_allow('k', 1, '1 month', algorithm => 'gcra', time_zone => 'UTC')$$),
  ($$SELECT pklimit_allow('k', 1, '1 day', algorithm => 'sliding', time_zone => 'UTC')$$),
  ($$SELECT pklimit_allow('k', 1, '1 day', anchor => 'first', time_zone => 'UTC')$$),
  ($$SELECT pklimit_allow('k', 1, '2 days', time_zone => 'UTC')$$),
  ($$SELECT pklimit_allow('k', 1, '24 hours', time_zone => 'UTC')$$),
  ($$SELECT pklimit_allow('k', 1, '3 months', time_zone => 'UTC')$$),
  ($$SELECT pklimit_allow('k', 1, '1 month 1 day', time_zone => 'UTC')$$),
  ($$SELECT pklimit_allow('k', 1, '1 month')$$),
  ($$SELECT pklimit_check_all(ARRAY['k'], ARRAY[1], ARRAY['1 hour']::interval[], time_zone => 'UTC')$$),
  ($$SELECT pklimit_window('1 month')$$),
  ($$SELECT pklimit_window('1 hour', 'UTC')$$),
  ($$SELECT pklimit_window(NULL, 'UTC')$$),
  ($$SELECT pklimit_window('1 day', 'UTC', NULL)$$),
  ($$SELECT pklimit_window('1 day', 'Nowhere/City')$$),
  ($$SELECT pklimit_window('1 hour', NULL, '294276-12-31 23:30:00+00')$$),
  ($$SELECT pklimit_window('1 hour', NULL, 'infinity')$$),
  ($$SELECT pklimit_window('1 day', 'UTC', 'infinity')$$),
  ($$SELECT pklimit_window('1 year', 'UTC', '294276-06-01')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 month', time_zone => 'Mars/Olympus')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 month', algorithm => 'gcra', time_zone => 'UTC')$$),
  ($$SELECT pklimit_policy_set('p', 1, '5 days', time_zone => 'UTC')$$),
  ($$SELECT pklimit_policy_set('p', 1, '1 month', anchor => 'first', time_zone => 'UTC')$$)
) AS t(q);
SELECT count(*) AS rows_of_k FROM platformkit_limits WHERE key = 'g:k';

RESET TimeZone;
TRUNCATE platformkit_limits;
