/* pklimit--0.3.0--0.4.0.sql: update script from pklimit 0.3.0 to 0.4.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pklimit UPDATE TO '0.4.0'" to load this file. \quit

--@include guard.sql

-- 0.4.0: the fixed window's anchor (docs/algorithms.md): 'epoch', windows
-- aligned to the Unix epoch as before, or 'first', a window that starts at
-- the event that finds none open.  pklimit_allow, pklimit_check,
-- pklimit_check_all and pklimit_allow_all take it as their last parameter,
-- so they are replaced (their C functions read it when it is there, and
-- serve databases still at 0.3.0 too).
SELECT pg_catalog.set_config('pklimit_update.replaced',
		'@extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);'
		'@extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);'
		'@extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);'
		'@extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool)',
		true),
	   pg_catalog.set_config('pklimit_update.privileges_from', '', true);

--@include replace_begin.sql

DROP FUNCTION @extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);
DROP FUNCTION @extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);
DROP FUNCTION @extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);
DROP FUNCTION @extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);

CREATE FUNCTION @extschema@.pklimit_allow(key pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval,
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true, anchor pg_catalog.text DEFAULT 'epoch')
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool, pg_catalog.text) IS
'Records cost events (default 1) for key; true if the key is not blocked and its limit of max_count per window allows them, as algorithm counts: fixed (default), gcra or sliding. record_refused => false: a refused call records nothing. block: a refusal blocks the key that long. durable => false: decided in shared memory and written to the table within pklimit.flush_interval (a crash may lose the last of them). anchor: where a fixed window starts, epoch (default: aligned to the Unix epoch) or first (at the event that finds no window open).';

CREATE FUNCTION @extschema@.pklimit_check(key pg_catalog.text,
	max_count pg_catalog.int8, "window" pg_catalog.interval,
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true, anchor pg_catalog.text DEFAULT 'epoch',
	OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_check_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool, pg_catalog.text) IS
'The same call as pklimit_allow, returning allowed, count, remaining, reset_at, retry_after and status for RateLimit and Retry-After headers.';

CREATE FUNCTION @extschema@.pklimit_check_all(keys pg_catalog.text[],
	max_counts pg_catalog.int8[], windows pg_catalog.interval[],
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true, anchor pg_catalog.text DEFAULT 'epoch',
	OUT key pg_catalog.text, OUT allowed pg_catalog.bool, OUT count pg_catalog.int8,
	OUT remaining pg_catalog.int8, OUT reset_at pg_catalog.timestamptz,
	OUT retry_after pg_catalog.interval, OUT status pg_catalog.text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_check_all_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool, pg_catalog.text) IS
'Several limits in one call, recorded together in one transaction or not at all, every key by the one algorithm and anchor: one row per key, in the order of the arrays, with the columns of pklimit_check. record_refused => false: nothing is recorded unless every limit allows.';

CREATE FUNCTION @extschema@.pklimit_allow_all(keys pg_catalog.text[],
	max_counts pg_catalog.int8[], windows pg_catalog.interval[],
	cost pg_catalog.int8 DEFAULT 1, record_refused pg_catalog.bool DEFAULT true,
	block pg_catalog.interval DEFAULT NULL, algorithm pg_catalog.text DEFAULT 'fixed',
	durable pg_catalog.bool DEFAULT true, anchor pg_catalog.text DEFAULT 'epoch')
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'pklimit_allow_all_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool, pg_catalog.text) IS
'Several limits in one call, as pklimit_check_all: true iff every limit allows.';

--@include replace_end.sql

COMMENT ON COLUMN @extschema@.platformkit_limits.window_start IS
'fixed: start of the window, aligned to the Unix epoch, or the first event''s moment with anchor first; sliding: start of the current window; gcra: where tat is counted from. The window is window_end - window_start.';

