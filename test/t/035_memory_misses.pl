# Copyright (c) pklimit contributors
#
# The memory path with more keys than memory holds (docs/memory.md, "A call
# on the memory path", "Admission", "Sizing"): pklimit.memory_keys = 100,
# pklimit.max_workers = 1 (the database's share is the whole table), no
# autovacuum, a flush every 60 s unless said:
#
#   1. a miss commits nothing: a memory call on a key not in memory has its
#      row read and is decided in memory, and no transaction ID is taken (no
#      transaction writes); a durable call takes one (so the test can see a
#      commit);
#   2. misses, hits and keys read in, per call, in pklimit_memory_stats();
#   3. admission: memory full of keys in use (used twice or more since
#      read in), a scan of 900 keys used once takes none of their places
#      (each call applied durably, each key refused admission, none given
#      back); a key missed a second time comes in, in the place of the
#      least recently used;
#   3b. keys used once since read in (the scan's, admitted on a second
#      miss) give their places to keys seen for the first time, least
#      recently used first, with no refusal, while the keys in use stay;
#   4. thrashing, exact: 8 clients x 150 memory calls over 400 keys (four
#      times memory) and durable calls on the same keys: every key counts
#      every call, whichever path took it, and its row holds it once
#      flushed;
#   5. most calls missing: one LOG line names pklimit.memory_keys.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = pklimit_node('memory_misses',
	"pklimit.memory_keys = 100\npklimit.max_workers = 1\npklimit.flush_interval = 60s\n"
	  . "autovacuum = off\nmax_connections = 40\nlog_statement = none\n");

sub sql { return $node->safe_psql('postgres', $_[0]); }

# columns of this database's row of pklimit_memory_stats()
sub mem
{
	return sql("SELECT $_[0] FROM pklimit_memory_stats()
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())");
}

# the changes of columns over running sql
sub delta
{
	my ($columns, $run) = @_;
	my @before = split /\|/, mem($columns);
	sql($run);
	my @after = split /\|/, mem($columns);
	return join '|', map { $after[$_] - $before[$_] } 0 .. $#after;
}

# Flushes every 60 s again, once the worker is seen to have stopped
# flushing every 100 ms (no flush for a second), so that no flush falls
# between the calls that follow.
sub slow_flushes
{
	sql("ALTER SYSTEM SET pklimit.flush_interval = '60s'; SELECT pg_reload_conf()");
	ok($node->poll_query_until('postgres',
		'SELECT flush_lag_ms > 1000 FROM pklimit_stats WHERE datname = current_database()'),
		'flushes every 60 s again');
}

sub keys_sql
{
	my ($prefix, $from, $to) = @_;
	return "ARRAY(SELECT '$prefix' || i FROM generate_series($from, $to) i)";
}

sub touch
{
	my ($list) = @_;
	return delta('memory_calls, memory_reads, hits, misses',
		"SELECT pklimit_allow(k, 1000000, '36500 days', durable => false) FROM unnest($list) k");
}

my $log_start = -s $node->logfile;
sql("SELECT pklimit_count('wake-up')");
ok($node->poll_query_until('postgres',
	'SELECT flush_lag_ms IS NOT NULL FROM pklimit_stats WHERE datname = current_database()'),
	'memory is open (the worker flushed once)');

# --- 1. a miss commits nothing (a flush in between, every 60 s, writes:
# then the same with another key)
my ($touched, $quiet);
for my $try (1 .. 3)
{
	my $flushes = mem('flushes');
	my $xid = sql('SELECT pg_snapshot_xmax(pg_current_snapshot())');
	$touched = touch("ARRAY['new$try']");
	$quiet = sql("SELECT pg_snapshot_xmax(pg_current_snapshot()) = '$xid'");
	last if mem('flushes') == $flushes;
	note("a flush ran meanwhile: again");
}
is($touched, '1|1|0|1', 'a miss: read in, decided in memory (a miss, not a hit)');
is($quiet, 't', 'and no transaction ID was taken: nothing written, nothing committed');
sql(q{SELECT pklimit_forget(k) FROM unnest(ARRAY['new1', 'new2', 'new3']) k});
is(touch("ARRAY['new']"), '1|1|0|1', 'another miss');
is(sql(q{SELECT count(*) FROM platformkit_limits WHERE key = 'g:new'}), '0', 'and no row yet');
my $xid = sql('SELECT pg_snapshot_xmax(pg_current_snapshot())');
sql("SELECT pklimit_allow('durable', 10, '36500 days')");
is(sql("SELECT pg_snapshot_xmax(pg_current_snapshot()) > '$xid'"), 't',
	'a durable call takes a transaction ID (it commits a write)');
is(touch("ARRAY['new', 'new', 'new']"), '3|0|3|0', 'the same key again: three hits');
is(sql("SELECT pklimit_count('new')"), '4', 'counting 4');

# --- 2./3. memory full of keys in use; a scan of keys used once
is(touch(keys_sql('hot', 1, 99)), '99|99|0|99', 'memory fills: 99 keys read in, 99 misses');
is(mem('memory_keys'), '100', 'memory holds 100 keys: it is full');
is(touch(keys_sql('hot', 1, 99)), '99|0|99|0', 'the 99 keys used again: keys in use');
sql("ALTER SYSTEM SET pklimit.flush_interval = '100ms'; SELECT pg_reload_conf()");
ok($node->poll_query_until('postgres', q{SELECT bool_and(l.count = 2)
	FROM platformkit_limits l WHERE l.key LIKE 'g:hot%' HAVING count(*) = 99}),
	'a flush wrote them (only written keys can be given back)');
slow_flushes();
is(delta('memory_calls, memory_reads, memory_evictions, admissions_refused, misses, memory_fallbacks',
	"SELECT pklimit_allow(k, 1000000, '36500 days', durable => false) FROM unnest(" . keys_sql('once', 1, 900) . ') k'),
	'0|0|0|900|900|900',
	'a scan of 900 keys used once: each missed, refused admission, applied durably; none given back');
is(touch(keys_sql('hot', 1, 99) . " || ARRAY['new']"), '100|0|100|0', 'the 100 keys in use are all still in memory');
is(sql("SELECT count(*) FILTER (WHERE pklimit_count('once' || i) = 1) FROM generate_series(1, 900) i"), '900',
	'and the scanned keys each count their call');
is(delta('memory_calls, memory_reads, memory_evictions, admissions_refused',
	"SELECT pklimit_allow('once7', 1000000, '36500 days', durable => false)"), '0|0|0|0',
	'a scanned key missed again before a flush: its place could only be of a changed key, which stays');
sql("ALTER SYSTEM SET pklimit.flush_interval = '100ms'; SELECT pg_reload_conf()");
ok($node->poll_query_until('postgres', q{SELECT count = 3 FROM platformkit_limits WHERE key = 'g:hot1'}),
	'a flush wrote the keys in use');
slow_flushes();
is(delta('memory_calls, memory_reads, memory_evictions, admissions_refused',
	"SELECT pklimit_allow('once7', 1000000, '36500 days', durable => false)"), '1|1|1|0',
	'missed again once written: it comes in, in the place of one key, and is decided in memory');
is(touch("ARRAY['hot1']"), '0|0|0|1', 'the place was that of the least recently used key, hot1');
is(sql("SELECT pklimit_count('once7') || '|' || pklimit_count('hot1')"), '3|4',
	'and nothing was lost on the way: once7 counts 3, hot1 4');

# --- 3b. keys used once since read in give way to keys seen for the first
# time: once1..once4 read in on their second miss (each in the place of
# the least recently used key in use: hot2..hot5) and written, like once7;
# then 4 keys never seen come in at once, in the places of the least
# recently used of the keys used once (once7, once1, once2, once3), and no
# key in use is given back
is(delta('memory_calls, memory_reads, memory_evictions, admissions_refused',
	"SELECT pklimit_allow(k, 1000000, '36500 days', durable => false) FROM unnest(" . keys_sql('once', 1, 4) . ') k'),
	'4|4|4|0', 'once1..once4 missed a second time: read in, each in the place of a key in use');
is(touch(keys_sql('hot', 2, 5)), '0|0|0|4', 'the places were those of hot2..hot5, the least recently used');
sql("ALTER SYSTEM SET pklimit.flush_interval = '100ms'; SELECT pg_reload_conf()");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 4 FROM platformkit_limits
	WHERE key LIKE 'g:once_' AND count = 2}), 'a flush wrote once1..once4');
slow_flushes();
is(delta('memory_calls, memory_reads, memory_evictions, admissions_refused',
	"SELECT pklimit_allow(k, 1000000, '36500 days', durable => false) FROM unnest(" . keys_sql('fresh', 1, 4) . ') k'),
	'4|4|4|0', '4 keys seen for the first time, one statement: no refusal, each read in, in the place of a key used once');
is(touch("ARRAY['once4']") . '/' . touch(keys_sql('hot', 6, 99)), '1|0|1|0/94|0|94|0',
	'once4, used once but used last, and the keys in use hot6..hot99 are all in memory');
is(delta('hits, misses', "SELECT pklimit_allow(k, 1000000, '36500 days', durable => false)"
	. " FROM unnest(ARRAY['once7', 'once1', 'once2', 'once3']) k"), '0|4',
	'the places were those of once7, once1, once2 and once3');
is(sql("SELECT string_agg(pklimit_count(k)::text, ',') FROM unnest(ARRAY['once1', 'fresh1', 'hot2', 'hot6']) k"),
	'3,1,4,4', 'and nothing was lost on the way');

# --- 4. thrashing, exact, whichever path
my $evictions = mem('memory_evictions');
sql("ALTER SYSTEM SET pklimit.flush_interval = '200ms'; SELECT pg_reload_conf()");
sql('CREATE TABLE results (k int NOT NULL, durable boolean NOT NULL, ok boolean NOT NULL)');
pklimit_pgbench($node, 'thrash: pgbench, 8 clients x 150 calls over 400 keys', 8, 150, 20261203, {
	'035_memory' => "\\set k random(1, 400)\nINSERT INTO results SELECT :k, false,"
	  . " pklimit_allow('t' || :k, 3, '36500 days', durable => false);\n",
	'035_durable' => "\\set k random(1, 400)\nINSERT INTO results SELECT :k, true,"
	  . " pklimit_allow('t' || :k, 3, '36500 days');\n",
});
is(sql(q{SELECT count(*) FROM (SELECT k, count(*) AS n, count(*) FILTER (WHERE ok) AS trues
	FROM results GROUP BY k) r WHERE trues <> least(n, 3) OR pklimit_count('t' || k) <> n}), '0',
	'thrash: every key allowed min(calls, 3) and counts every call, whichever path took it');
cmp_ok(mem('memory_evictions'), '>', $evictions, 'thrash: keys were given back along the way');
my $unwritten = q{SELECT string_agg(r.k || ':' || r.n || '/' || coalesce(l.count::text, 'none'), ' ')
	FROM (SELECT k, count(*) AS n FROM results GROUP BY k) r
	LEFT JOIN platformkit_limits l ON l.key = 'g:t' || r.k WHERE l.count IS DISTINCT FROM r.n};
ok($node->poll_query_until('postgres', $unwritten, ''), 'thrash: and every row holds its count once flushed')
  or diag('key:calls/row ' . sql($unwritten));

# --- 5. most calls missing (the scans of 3 and here, the thrash): one LOG
# line, however many thousands of calls missed, naming the setting
sql("SELECT pklimit_allow(k, 1000000, '36500 days', durable => false) FROM unnest("
	  . keys_sql('scan', 1, 1200) . ') k');
# a flush that started after the scan (flush_lag_ms is the time since the
# last flush started): the worker checks the misses at each flush
my $scanned = sql('SELECT clock_timestamp()');
ok($node->poll_query_until('postgres', "SELECT clock_timestamp() - flush_lag_ms * interval '1 millisecond'
	> '$scanned'::timestamptz FROM pklimit_stats WHERE datname = current_database()"),
	'the worker flushed since');
my $log = slurp_file($node->logfile, $log_start);
my @lines = $log =~ /LOG:  pklimit: \d+ of the last \d+ memory calls of database "postgres" did not find their key in memory/g;
is(scalar @lines, 1, 'one LOG line said most memory calls missed, once (at most once an hour)');
like($log, qr/HINT:  Raise pklimit.memory_keys/, 'and named the setting');

$node->stop;
done_testing();
