# Copyright (c) pklimit contributors
#
# The memory path with fewer entries than keys (docs/memory.md, "Bounded
# memory and fairness"), pklimit.memory_keys = 50 and pklimit.max_workers
# = 2, so each database keeps a share of 25:
#
#   1. one database alone fills the table, and keeps it; a key that finds
#      it full of keys in use (used twice or more since read in) comes
#      in only when missed a second time (admission: the first time its
#      call takes the durable path), and then takes the entry of the least
#      recently used written key, and no other; in the exact order of their
#      last use, even among the calls of one statement and keys used one
#      statement each;
#   2. while database postgres reads in far more keys than its share
#      (pgbench over 500 keys), database b still gets its 25 keys into
#      memory; every answer of both is exact (no error, no event lost),
#      entries given back and calls falling back along the way.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use PklimitTest;

my $node = pklimit_node('memory_full',
	"pklimit.memory_keys = 50\npklimit.max_workers = 2\npklimit.flush_interval = 1s\n"
	  . "max_connections = 40\nlog_statement = none\n");

sub sql { return $node->safe_psql($_[1] // 'postgres', $_[0]); }

sub mem_stat
{
	my ($columns, $db) = @_;
	return sql("SELECT $columns FROM pklimit_stats WHERE datname = current_database()", $db);
}

# One memory call on each key of the list, in database $db; returns the
# memory_calls and memory_reads they added.
sub touch
{
	my ($list, $db) = @_;
	my ($calls, $reads) = split /\|/, mem_stat('memory_calls, memory_reads', $db);
	sql("SELECT pklimit_allow(k, 1000, '36500 days', durable => false) FROM unnest($list) k", $db);
	my ($calls2, $reads2) = split /\|/, mem_stat('memory_calls, memory_reads', $db);
	return ($calls2 - $calls) . '|' . ($reads2 - $reads);
}

# Wait until a flush wrote every key of the list of postgres as memory has
# it (pklimit_count reads memory without using the key: which keys are the
# least recently used stays as it was).
sub flushed
{
	my ($list) = @_;
	return $node->poll_query_until('postgres', qq{SELECT bool_and(l.count IS NOT DISTINCT FROM pklimit_count(k))
		FROM unnest($list) k LEFT JOIN platformkit_limits l ON l.key = 'g:' || k});
}

sub keys_sql
{
	my ($prefix, $from, $to) = @_;
	return "ARRAY(SELECT '$prefix' || i FROM generate_series($from, $to) i)";
}

# admissions refused in database $db
sub refused
{
	return sql(q{SELECT admissions_refused FROM pklimit_memory_stats()
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())}, $_[0]);
}

# --- 1. one database fills the table; least recently used written keys go
sql("SELECT pklimit_count('wake-up')");
ok($node->poll_query_until('postgres',
	'SELECT flush_lag_ms IS NOT NULL FROM pklimit_stats WHERE datname = current_database()'),
	'one database: memory is open');
is(touch(keys_sql('a', 1, 50)), '50|50', 'one database: 50 keys read in, their calls decided in memory');
is(mem_stat('memory_keys, memory_evictions'), '50|0', 'one database: it holds all 50 entries');
is(touch(keys_sql('a', 1, 50)), '50|0', 'one database: all 50 still in memory');
is(touch(keys_sql('a', 1, 10)), '10|0', 'one database: a1..a10 used again, the latest');
ok(flushed(keys_sql('a', 1, 50)), 'one database: a flush wrote all 50');
my $refused = refused();
is(touch(keys_sql('c', 1, 4)), '0|0', 'one database: 4 more keys, missed once: their calls take the durable path');
is(mem_stat('memory_keys, memory_evictions') . '|' . (refused() - $refused), '50|0|4',
	'one database: no entry was given back for them: they were refused admission');
is(touch(keys_sql('c', 1, 4)), '4|4', 'one database: missed again, the 4 keys come in, decided in memory');
is(mem_stat('memory_keys, memory_evictions'), '50|4', 'one database: 4 entries were given back for them');
my $kept = 'ARRAY[' . join(', ', map { "'$_'" } (map { "c$_" } 1 .. 4), (map { "a$_" } 1 .. 10, 15 .. 50)) . ']';
is(touch($kept), '50|0', 'one database: the 4 new keys, a1..a10 and a15..a50 are in memory');
ok(flushed($kept), 'one database: a flush wrote them');
is(touch(keys_sql('a', 11, 14)), '0|0',
	'one database: a11..a14, the least recently used, were given back: their calls take the durable path');
is(sql("SELECT string_agg(DISTINCT pklimit_count('a' || i)::text, ',') FROM generate_series(11, 14) i"),
	'3', 'one database: and lost nothing: they count 3');

# --- 1b. the order of eviction is the order of last use, exactly, whatever
# the clock: 50 new keys read in one statement each (each missed twice:
# refused, then admitted; then used again, so that no key seen for the
# first time may take its place) take every entry of the keys before; used
# again one statement each in another known order, then written, 4 keys
# more take the entries of the first 4 used, one by one.
ok(flushed('ARRAY(SELECT k FROM unnest(ARRAY[' . join(', ', map { "'$_'" } (map { "c$_" } 1 .. 4),
	(map { "a$_" } 1 .. 50)) . ']) k)'), 'eviction order: every key before is written');
my @read_order = map { 'e' . (($_ * 17) % 50 + 1) } 0 .. 49;
my @use_order = map { 'e' . (($_ * 23 + 7) % 50 + 1) } 0 .. 49;
my ($evicted_before) = mem_stat('memory_evictions');
is(join(',', map { touch("ARRAY['$_']") . '/' . touch("ARRAY['$_']") . '/' . touch("ARRAY['$_']") } @read_order),
	join(',', ('0|0/1|1/1|0') x 50), 'eviction order: 50 new keys refused, then read in, then used, one statement each');
is(mem_stat('memory_keys') . '|' . (mem_stat('memory_evictions') - $evicted_before), '50|50',
	'eviction order: they took the 50 entries of the keys before');
is(join(',', map { touch("ARRAY['$_']") } @use_order), join(',', ('1|0') x 50),
	'eviction order: the 50 used again in another order, one statement each');
my $e_all = 'ARRAY(SELECT \'e\' || i FROM generate_series(1, 50) i)';
ok(flushed($e_all), 'eviction order: a flush wrote them');
is(touch(keys_sql('f', 1, 4)) . '/' . touch(keys_sql('f', 1, 4)), '0|0/4|4',
	'eviction order: 4 more keys refused, then read in');
my @first4 = @use_order[0 .. 3];
my $rest = 'ARRAY[' . join(', ', map { "'$_'" } @use_order[4 .. 49], map { "f$_" } 1 .. 4) . ']';
is(touch($rest), '50|0', 'eviction order: the 46 used last and the 4 new keys are in memory');
ok(flushed($rest), 'eviction order: a flush wrote them');
is(touch('ARRAY[' . join(', ', map { "'$_'" } @first4) . ']'), '4|4',
	"eviction order: the first 4 used (@first4) were given back: read in again (missed before: admitted)");

# --- 2. one database floods memory, the other still gets its share
sql('CREATE DATABASE b');
sql('CREATE EXTENSION pklimit', 'b');
sql('CREATE TABLE results (k int NOT NULL, ok boolean NOT NULL)');
my $script = $node->basedir . '/flood.sql';
open my $fh, '>', $script or die;
print $fh "\\set k random(1, 500)\n"
  . "INSERT INTO results SELECT :k, pklimit_allow('p' || :k, 5, '36500 days', durable => false);\n";
close $fh;
my ($reads0, $evictions0) = split /\|/, mem_stat('memory_reads, memory_evictions');
my ($out, $err) = ('', '');
my $bench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', 4, '-j', 2, '-T', 30, '-f', $script, '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$out, '2>', \$err);
ok($node->poll_query_until('postgres',
	"SELECT memory_reads > $reads0 + 200 FROM pklimit_stats WHERE datname = 'postgres'"),
	'flood: postgres read in far more keys than its share');
ok($node->poll_query_until('b', q{SELECT m.memory_keys FROM
	(SELECT count(pklimit_allow('b' || i, 1000000, '36500 days', durable => false)) FROM generate_series(1, 25) i) c,
	pklimit_stats m WHERE m.datname = current_database()}, '25'),
	'flood: b got its 25 keys into memory meanwhile');
my $reads_then = mem_stat('memory_reads');
cmp_ok(mem_stat('memory_keys'), '<=', 25, 'flood: postgres holds at most the other 25');
is(sql("SELECT count(DISTINCT pklimit_count('b' || i)) FROM generate_series(1, 25) i", 'b'), '1',
	"flood: b's keys all count the same, one per round of calls");
$bench->finish;
cmp_ok(mem_stat('memory_reads'), '>', $reads_then,
	'flood: which still ran after b got its keys: postgres read keys in after');
my $n = sql("SELECT pklimit_count('b1')", 'b');
is(touch(keys_sql('b', 1, 25), 'b') . '|' . sql("SELECT sum(pklimit_count('b' || i)) FROM generate_series(1, 25) i", 'b'),
	'25|0|' . 25 * ($n + 1), "flood: b's keys stayed in memory, and count on exactly");
like($out, qr/processed: \d+/, 'flood: pgbench ran');
unlike($err, qr/WARNING|ERROR|aborted/, 'flood: no call of postgres was unavailable or failed');
is(sql(q{SELECT count(*) FROM (SELECT k, count(*) AS n, count(*) FILTER (WHERE ok) AS trues
	FROM results GROUP BY k) r WHERE trues <> least(n, 5) OR pklimit_count('p' || k) <> n}), '0',
	'flood: every key of postgres allowed min(attempts, 5) and counts every attempt');
is(sql('SELECT count(DISTINCT k) > 400 FROM results'), 't', 'flood: over 400 keys were called');
my ($evictions, $fallbacks) = split /\|/, mem_stat('memory_evictions, memory_fallbacks');
cmp_ok($evictions, '>', $evictions0, "flood: postgres gave entries back ($evictions)");
note("flood: postgres memory_fallbacks $fallbacks");

$node->stop;
done_testing();
