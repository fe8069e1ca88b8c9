# Copyright (c) pklimit contributors
#
# The memory path (durable => false, docs/memory.md) is exact under
# concurrency, as the durable path is (002): every call is decided under its
# key's lock, in the calling backend, on one count per key.  pgbench clients
# store every answer in a plain table, so the answers are counted afterwards.
#
#   1. 16 clients x 50 memory calls on one hot key, max 100: exactly 100
#      trues, pklimit_count 800, pklimit_check's counts the distinct
#      positions 1..800, most calls decided in memory, and the row holds 800
#      once flushed.
#   2. The same key with half the clients durable and half on the memory
#      path: one count (800, exactly 300 trues, distinct positions), the row
#      800 after the flush: no event counted twice, none lost between paths.
#   3. 8 clients x 60 pklimit_allow_all(..., durable => false) on two of 4
#      keys, record_refused => false, costs 1 to 3: all or none, each key
#      holds the costs of the calls allowed, never more than its max.
#
# Windows are 36500 days, so none ends while the test runs.  PKLIMIT_SEED
# (default 20261202) seeds pgbench's random choices.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $SEED = $ENV{PKLIMIT_SEED} // 20261202;
die "PKLIMIT_SEED must be an integer\n" unless $SEED =~ /^\d+$/;
note("PKLIMIT_SEED=$SEED");

my $node = pklimit_node('memory_concurrency',
	"max_connections = 40\nlog_statement = none\n");
$node->safe_psql('postgres', q{
	CREATE TABLE results (ok boolean NOT NULL, n bigint, durable boolean NOT NULL);
	CREATE SEQUENCE calls;
	CREATE TABLE results_all (call bigint NOT NULL, cost int NOT NULL, a int NOT NULL,
		b int NOT NULL, ok boolean NOT NULL);
});

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub stats
{
	return sql("SELECT $_[0] FROM pklimit_stats WHERE datname = 'postgres'");
}

sub run_pgbench
{
	my ($name, $clients, $per_client, $scripts) = @_;
	pklimit_pgbench($node, "$name: pgbench, $clients clients x $per_client calls",
		$clients, $per_client, $SEED, $scripts);
	return;
}

# One key, 16 x 50 calls; $durable is the SQL of each call's durable
# argument.  Returns the number of calls.
sub one_key
{
	my ($name, $key, $max, $durable) = @_;
	sql('TRUNCATE results');
	sql("SELECT pklimit_stats_reset(oid) FROM pg_database WHERE datname = 'postgres'");
	run_pgbench($name, 16, 50, {
		"007_${key}_allow" => "INSERT INTO results SELECT pklimit_allow('$key', $max, '36500 days',"
		  . " durable => $durable), NULL, $durable;\n",
		"007_${key}_check" => "INSERT INTO results SELECT allowed, count, $durable"
		  . " FROM pklimit_check('$key', $max, '36500 days', durable => $durable);\n",
	});
	my $total = 800;
	is(sql("SELECT count(*), count(*) FILTER (WHERE ok), pklimit_count('$key') FROM results"),
		"$total|$max|$total", "$name: $total answers, exactly $max true, pklimit_count $total");
	is(sql(qq{SELECT count(*) > 0, count(*) = count(DISTINCT n), bool_and(n BETWEEN 1 AND $total),
		bool_and(ok = (n <= $max)) FROM results WHERE n IS NOT NULL}),
		't|t|t|t', "$name: pklimit_check's counts are distinct positions 1..$total, allowed exactly when <= $max");
	is(stats('calls, allowed, events'), "$total|$max|$total",
		"$name: pklimit_stats counted $total calls, $max allowed, $total events");
	ok($node->poll_query_until('postgres',
		"SELECT count FROM platformkit_limits WHERE key = 'g:$key'", $total),
		"$name: once flushed, the row holds $total");
	return $total;
}

# Case 1: memory calls only.
my $total = one_key('case 1, memory calls', 'hot', 100, 'false');
my ($calls, $reads) = split /\|/, stats('memory_calls, memory_reads');
cmp_ok($calls, '>=', $total / 2, "case 1: most calls were decided in memory ($calls of $total)");
cmp_ok($reads, '>=', 1, "case 1: the key was read into memory ($reads)");
cmp_ok(stats('rows_flushed'), '>=', 1, 'case 1: a flush wrote its row');

# Case 2: even clients durable, odd ones on the memory path.
one_key('case 2, durable and memory calls', 'mixed', 300, ':client_id % 2 = 0');
is(sql('SELECT count(*) FILTER (WHERE durable), count(*) FILTER (WHERE NOT durable) FROM results'),
	'400|400', 'case 2: 400 durable calls and 400 memory calls');
cmp_ok(stats('memory_calls'), '>', 0, 'case 2: some memory calls were decided in memory');
sql("SELECT pklimit_allow('mixed', 300, '36500 days')");
is(sql("SELECT pklimit_count('mixed')"), '801', 'case 2: a durable call after them counts on from 800');

# Case 3: several keys at once, all or none.
{
	my ($clients, $per_client) = (8, 60);
	$total = $clients * $per_client;
	sql("SELECT pklimit_stats_reset(oid) FROM pg_database WHERE datname = 'postgres'");
	run_pgbench('case 3, allow_all', $clients, $per_client, {
		'007_allow_all' => qq{\\set a random(1, 4)
\\set b 1 + (:a + random(0, 2)) % 4
\\set cost random(1, 3)
INSERT INTO results_all SELECT nextval('calls'), :cost, :a, :b,
  pklimit_allow_all(ARRAY['all' || :a, 'all' || :b], ARRAY[25 * :a, 25 * :b],
    ARRAY['36500 days', '36500 days']::interval[], cost => :cost, record_refused => false,
    durable => false);
}
	});
	my $want = q{SELECT 'all' || k AS key, coalesce(sum(cost) FILTER (WHERE ok), 0) AS count
		FROM (SELECT a AS k, cost, ok FROM results_all UNION ALL SELECT b, cost, ok FROM results_all) r
		GROUP BY k};
	my $got = q{SELECT 'all' || k, pklimit_count('all' || k) FROM generate_series(1, 4) k};
	is(sql("SELECT count(*) FROM (($want) EXCEPT ($got)) d"), '0',
		'case 3: each key holds the costs of the calls allowed on both keys, and nothing of the refused ones');
	is(sql(q{SELECT count(*) FROM generate_series(1, 4) k WHERE pklimit_count('all' || k) > 25 * k}),
		'0', 'case 3: no key went over its max');
	is(sql('SELECT count(*), count(*) FILTER (WHERE ok) > 0, count(*) FILTER (WHERE NOT ok) > 0 FROM results_all'),
		"$total|t|t", "case 3: $total calls, some allowed and some refused");
	ok($node->poll_query_until('postgres', qq{SELECT count(*) FROM ((SELECT * FROM ($want) w WHERE count > 0)
		EXCEPT (SELECT substr(key, 3), count FROM platformkit_limits WHERE key LIKE 'g:all%')) d}, '0'),
		'case 3: once flushed, the rows hold the same counts');
	cmp_ok(stats('memory_calls'), '>', 0, 'case 3: calls on several keys were decided in memory');
}

$node->stop;
done_testing();
