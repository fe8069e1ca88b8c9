/* pklimit--0.3.0--0.4.0.sql: update script from pklimit 0.3.0 to 0.4.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pklimit UPDATE TO '0.4.0'" to load this file. \quit

--@include guard.sql

-- 0.4.0: the fixed window's anchor (docs/algorithms.md): 'epoch', windows
-- aligned to the Unix epoch as before, or 'first', a window that starts at
-- the event that finds none open.  pklimit_allow, pklimit_check,
-- pklimit_check_all and pklimit_allow_all take it as their last parameter,
-- so they are replaced (their C functions read it when it is there, and
-- serve databases still at 0.3.0 too).  pklimit_memory_stats() gains the
-- memory table's hits, misses and admissions refused (docs/memory.md,
-- "Sizing"), as columns at its end, so it is replaced too; the view
-- pklimit_stats keeps its columns.
SELECT pg_catalog.set_config('pklimit_update.replaced',
		'@extschema@.pklimit_memory_stats();'
		'@extschema@.pklimit_allow(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);'
		'@extschema@.pklimit_check(pg_catalog.text, pg_catalog.int8, pg_catalog.interval, pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);'
		'@extschema@.pklimit_check_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool);'
		'@extschema@.pklimit_allow_all(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval[], pg_catalog.int8, pg_catalog.bool, pg_catalog.interval, pg_catalog.text, pg_catalog.bool)',
		true),
	   pg_catalog.set_config('pklimit_update.privileges_from', '', true);

--@include replace_begin.sql

-- The view pklimit_stats reads pklimit_memory_stats(): it reads a stand-in
-- while the function is replaced, so that it, its grants and the objects of
-- users that depend on it stay.
CREATE FUNCTION @extschema@.pklimit_memory_stats_0_4(
	OUT dbid pg_catalog.oid, OUT memory_calls pg_catalog.int8,
	OUT memory_reads pg_catalog.int8, OUT memory_fallbacks pg_catalog.int8,
	OUT memory_evictions pg_catalog.int8, OUT flushes pg_catalog.int8,
	OUT rows_flushed pg_catalog.int8, OUT memory_keys pg_catalog.int8,
	OUT flush_lag_ms pg_catalog.float8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_memory_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE OR REPLACE VIEW @extschema@.pklimit_stats AS
	SELECT s.*, m.memory_calls, m.memory_reads, m.memory_fallbacks,
		   m.memory_evictions, m.flushes, m.rows_flushed, m.memory_keys,
		   m.flush_lag_ms
	  FROM @extschema@.pklimit_stats() s
	  LEFT JOIN @extschema@.pklimit_memory_stats_0_4() m
		ON m.dbid OPERATOR(pg_catalog.=) s.dbid;

DROP FUNCTION @extschema@.pklimit_memory_stats();
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

CREATE FUNCTION @extschema@.pklimit_memory_stats(
	OUT dbid pg_catalog.oid, OUT memory_calls pg_catalog.int8,
	OUT memory_reads pg_catalog.int8, OUT memory_fallbacks pg_catalog.int8,
	OUT memory_evictions pg_catalog.int8, OUT flushes pg_catalog.int8,
	OUT rows_flushed pg_catalog.int8, OUT memory_keys pg_catalog.int8,
	OUT flush_lag_ms pg_catalog.float8, OUT hits pg_catalog.int8,
	OUT misses pg_catalog.int8, OUT admissions_refused pg_catalog.int8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pklimit_memory_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_memory_stats() IS
'Per database, the memory path''s part of pklimit_stats: calls decided in memory, keys read into memory, memory calls applied durably instead (fallbacks), keys given back, flushes and the rows they wrote, the keys held in memory now, the flush lag in milliseconds (NULL while memory is closed or unused); then the memory calls that found their keys in memory (hits) and those that did not (misses), and the keys the admission rule kept out of a full memory (admissions_refused).';

CREATE OR REPLACE VIEW @extschema@.pklimit_stats AS
	SELECT s.*, m.memory_calls, m.memory_reads, m.memory_fallbacks,
		   m.memory_evictions, m.flushes, m.rows_flushed, m.memory_keys,
		   m.flush_lag_ms
	  FROM @extschema@.pklimit_stats() s
	  LEFT JOIN @extschema@.pklimit_memory_stats() m
		ON m.dbid OPERATOR(pg_catalog.=) s.dbid;

DROP FUNCTION @extschema@.pklimit_memory_stats_0_4();

-- 0.4.0: routing on Citus (docs/citus.md): the stored key a call makes of a
-- key under the session's tenant, and the node that holds its row.
CREATE FUNCTION @extschema@.pklimit_stored_key(key pg_catalog.text)
RETURNS pg_catalog.text
AS 'MODULE_PATHNAME', 'pklimit_stored_key_sql'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_stored_key(pg_catalog.text) IS
'The key of the row that calls on key count in, under the session''s platformkit.tenant: what Citus hashes to place the row.';

CREATE FUNCTION @extschema@.pklimit_node(key pg_catalog.text,
	OUT node_name pg_catalog.text, OUT node_port pg_catalog.int4,
	OUT shard_id pg_catalog.int8)
RETURNS record
AS 'MODULE_PATHNAME', 'pklimit_node'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.pklimit_node(pg_catalog.text) IS
'On Citus, the node (name and port, as Citus knows it) and the shard that hold the row of key under the session''s platformkit.tenant: a call sent there runs on that node alone. All NULL where platformkit_limits is not distributed by key.';

--@include replace_end.sql

COMMENT ON COLUMN @extschema@.platformkit_limits.window_start IS
'fixed: start of the window, aligned to the Unix epoch, or the first event''s moment with anchor first; sliding: start of the current window; gcra: where tat is counted from. The window is window_end - window_start.';

