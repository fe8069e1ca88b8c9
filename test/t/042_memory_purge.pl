# Copyright (c) pklimit contributors
#
# The memory path beside the purge and a flush that cannot run
# (docs/memory.md, "One count" and "What can be lost, and back-pressure"):
#
#   1. with pklimit.flush_interval at 60s, so only the purge's own flush can
#      write them, the rows of keys whose state in memory still counts
#      survive pklimit_purge('0 seconds') though the rows showed an ended
#      state; the rows of keys whose state ended go, a durable key's and a
#      memory key's alike; the next flush brings back none of them, but the
#      row of a key called again after the purge.
#   2. a row locked by another transaction holds up the flush: memory calls
#      on other keys take the durable path (memory_fallbacks), answered ok
#      and exact, and are decided in memory again once it is released.
#   3. the table locked in SHARE mode: memory calls take the durable path
#      and are answered lock_timeout, as durable calls are, recording
#      nothing; once it is released, memory again, and every ok counted.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = pklimit_node('memory_purge', "pklimit.flush_interval = 60s\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub mem_stat { return sql("SELECT $_[0] FROM pklimit_stats WHERE datname = 'postgres'"); }

sub row
{
	return sql("SELECT count, window_end > now() + '1 day' FROM platformkit_limits WHERE key = 'g:$_[0]'");
}

sub call
{
	my ($key, $window, $durable) = @_;
	return sql("SELECT pklimit_allow('$key', 1000, '$window', durable => " . ($durable // 'false') . ')');
}

# --- 1. the purge judges keys in memory by their state there
call($_, '1 second') for qw(live dead-mem revive);
call('dead-mem', '1 second');
call('dead-dur', '1 second', 'true');
ok($node->poll_query_until('postgres',
	q{SELECT bool_and(window_end < now()) FROM platformkit_limits WHERE key LIKE 'g:%'}),
	'purge: every row shows an ended 1-second window');
# a key's next call once its window ended opens one of 36500 days, in memory
call('live', '36500 days') for 1 .. 3;
is(row('live'), '1|f', 'purge: the row of the live key still shows its ended window');
is(sql("SELECT pklimit_count('live')"), '3', 'purge: while memory counts 3 in an open window');
is(sql("SELECT pklimit_purge('0 seconds')"), '3', 'purge: pklimit_purge deleted 3 rows');
is(row('live'), '3|t', "purge: the live key's row is kept, written with its open state");
is(sql(q{SELECT string_agg(substr(key, 3), ',' ORDER BY key) FROM platformkit_limits}), 'live',
	'purge: the rows of the ended keys, of memory and durable, are gone');
is(sql("SELECT pklimit_count('live') || '|' || pklimit_count('dead-mem')"), '3|0',
	'purge: pklimit_count agrees');
sql("ALTER SYSTEM SET pklimit.flush_interval = '500ms'; SELECT pg_reload_conf()");
call('live', '36500 days');
call('revive', '36500 days');
ok($node->poll_query_until('postgres', q{SELECT string_agg(substr(key, 3) || '=' || count, ',' ORDER BY key)
	FROM platformkit_limits}, 'live=4,revive=1'),
	'purge: the next flush writes the live key and the one called again, no ended key');

# --- 2. a locked row holds up the flush: memory calls fall back, exactly
call('locked', '36500 days');
call('bp', '36500 days');
# (a key read in for a memory call has no row until a flush writes it)
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 2 FROM platformkit_limits WHERE key IN ('g:locked', 'g:bp')}),
	'locked row: a flush wrote both keys');
my $locker = $node->background_psql('postgres');
$locker->query_safe("BEGIN; SELECT FROM platformkit_limits WHERE key = 'g:locked' FOR UPDATE");
my $calls = mem_stat('memory_calls');
call('locked', '36500 days');
is(mem_stat('memory_calls'), $calls + 1, 'locked row: a call on the locked key was decided in memory');
sql('CREATE TABLE answers (phase text, status text)');

# memory calls on key bp, each answer kept, until $condition on pklimit_stats
# (a call held up by the locked table waits 200ms, and says so only in the
# answer kept)
sub calls_until
{
	my ($phase, $condition) = @_;
	local $ENV{PGOPTIONS} = '-c client_min_messages=error -c pklimit.timeout=200ms';
	return $node->poll_query_until('postgres', qq{WITH c AS (INSERT INTO answers
		SELECT '$phase', status FROM pklimit_check('bp', 1000000, '36500 days', durable => false) RETURNING 1)
		SELECT $condition FROM pklimit_stats, c WHERE datname = 'postgres'});
}

my $fallbacks = mem_stat('memory_fallbacks');
ok(calls_until('row', "memory_fallbacks > $fallbacks + 5"),
	'locked row: the flush held up, memory calls on another key take the durable path');
is(sql(q{SELECT string_agg(DISTINCT status, ',') FROM answers WHERE phase = 'row'}), 'ok',
	'locked row: and are answered ok');
$locker->query_safe('ROLLBACK');
$calls = mem_stat('memory_calls');
ok(calls_until('row', "memory_calls > $calls + 5"), 'locked row: released, memory calls are decided in memory again');
is(sql("SELECT pklimit_count('bp') || '|' || pklimit_count('locked')"),
	(1 + sql(q{SELECT count(*) FROM answers WHERE phase = 'row'})) . '|2',
	'locked row: both keys count every call');
ok($node->poll_query_until('postgres', q{SELECT count FROM platformkit_limits WHERE key = 'g:locked'}, '2'),
	"locked row: the flush wrote the locked key's call");

# --- 3. the table locked: memory calls fall back and are unavailable
$locker->query_safe('BEGIN; LOCK TABLE platformkit_limits IN SHARE MODE');
$fallbacks = mem_stat('memory_fallbacks');
my $before = sql("SELECT pklimit_count('bp')");
ok(calls_until('table', "memory_fallbacks > $fallbacks + 5"),
	'locked table: memory calls take the durable path');
cmp_ok(mem_stat('memory_fallbacks') - $fallbacks, '<=', sql(q{SELECT count(*) FROM answers WHERE phase = 'table'}),
	'locked table: memory_fallbacks counts each call that fell back once');
is(sql(q{SELECT string_agg(DISTINCT status, ',' ORDER BY status) FROM answers
	WHERE phase = 'table' AND status <> 'ok'}), 'lock_timeout',
	'locked table: and are answered lock_timeout, as a durable call is');
is(sql(q{SET client_min_messages = error; SET pklimit.timeout = '200ms';
	SELECT status FROM pklimit_check('durable', 10, '36500 days')}), 'lock_timeout',
	'locked table: (a durable call is answered lock_timeout)');
$locker->query_safe('ROLLBACK');
$calls = mem_stat('memory_calls');
ok(calls_until('table', "memory_calls > $calls + 5"), 'locked table: released, memory calls are decided in memory again');
is(sql("SELECT pklimit_count('bp')"),
	$before + sql(q{SELECT count(*) FROM answers WHERE phase = 'table' AND status = 'ok'}),
	'locked table: the key counts every call answered ok, and none answered lock_timeout');
$locker->quit;

$node->stop;
done_testing();
