# Copyright (c) pklimit contributors
#
# Exactness of GCRA and the sliding window under concurrency
# (docs/algorithms.md): many sessions at once on one key get exactly the
# answers of the same calls made one after another.  The calls are made by
# pgbench clients; every call stores its answer in a plain table.  Windows
# are 36500 days, so the clock does not matter: a GCRA step (window /
# max_count) is a year, far longer than the run, and a sliding window that
# holds now has no previous window (its estimate is its exact count).
#
#   1. GCRA, 16 clients x 25 calls of pklimit_check on one key, max 100:
#      exactly 100 allowed, whose counts are 1..100, each once; the 300
#      refused ones are recorded capped at a full bucket, so each sees
#      count 100 and retry_after exactly one step (365 days);
#      pklimit_count = 100.
#   2. The sliding window, the same calls: exactly 100 allowed; the counts
#      are 1..400, each once, allowed exactly when <= 100 (refused calls
#      are recorded); pklimit_count = 400.
#   3. GCRA as a quota: costs 1 to 3, record_refused => false: the allowed
#      calls saw distinct running totals of their costs, ending at
#      pklimit_count, never over 100; every refused call saw a total that
#      its cost would have taken over 100.
#   4. pklimit_check_all with GCRA on two of 3 keys, record_refused =>
#      false: each key holds exactly the calls allowed on both its keys,
#      which saw distinct positions 1..n on it, never over its max.
#
# PKLIMIT_SEED (default 20251130) seeds pgbench's random choices.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PklimitTest;

my $SEED = $ENV{PKLIMIT_SEED} // 20251130;
die "PKLIMIT_SEED must be an integer\n" unless $SEED =~ /^\d+$/;
note("PKLIMIT_SEED=$SEED");

my $node = pklimit_node('algorithms_concurrency',
	"max_connections = 40\nlog_statement = none\n");
$node->safe_psql(
	'postgres', q{
	CREATE TABLE results (ok boolean NOT NULL, n bigint NOT NULL, cost int NOT NULL,
		retry interval NOT NULL);
	CREATE SEQUENCE calls;
	CREATE TABLE results_groups (call bigint NOT NULL, key text NOT NULL,
		ok boolean NOT NULL, n bigint NOT NULL);
});

my ($clients, $per_client, $max) = (16, 25, 100);
my $total = $clients * $per_client;

# $clients x $per_client runs of $sql (a pgbench script), after emptying
# the results.
sub run_pgbench
{
	my ($name, $script, $sql) = @_;
	$node->safe_psql('postgres', 'TRUNCATE results, results_groups');
	$node->safe_psql('postgres',
		"SELECT pklimit_stats_reset(oid) FROM pg_database WHERE datname = 'postgres'");
	pklimit_pgbench($node, "$name: pgbench, $clients clients x $per_client calls",
		$clients, $per_client, $SEED, { "005_$script" => $sql });
	return;
}

sub sql { return $node->safe_psql('postgres', $_[0]); }

# ---------------------------------------------------------------------------
# Case 1: GCRA, one hot key.
# ---------------------------------------------------------------------------

run_pgbench('case 1, GCRA', 'gcra', <<SQL);
INSERT INTO results SELECT allowed, count, 1, retry_after
  FROM pklimit_check('gcra', $max, '36500 days', algorithm => 'gcra');
SQL
is(sql(q{SELECT count(*), count(*) FILTER (WHERE ok), count(*) FILTER (WHERE NOT ok) FROM results}),
	"$total|$max|" . ($total - $max),
	"case 1: $total answers, exactly $max allowed");
is( sql(
		qq{SELECT count(DISTINCT n), min(n), max(n), bool_and(retry = interval '0')
		  FROM results WHERE ok}),
	"$max|1|$max|t",
	"case 1: the allowed calls saw counts 1..$max, each once, with no wait");
is( sql(
		q{SELECT bool_and(n = 100), bool_and(retry = interval '365 days')
		  FROM results WHERE NOT ok}),
	't|t',
	'case 1: every refused call saw a full bucket and retry_after of one step (365 days)');
is(sql("SELECT pklimit_count('gcra')"), $max, "case 1: pklimit_count = $max");
is( sql(
		q{SELECT concat_ws('|', calls, allowed, refused, unavailable)
		  FROM pklimit_stats WHERE datname = 'postgres'}),
	"$total|$max|" . ($total - $max) . '|0',
	"case 1: pklimit_stats counted $total calls, $max allowed");
is( sql(
		q{SELECT algorithm, max_count, window_end - window_start FROM platformkit_limits
		  WHERE key = 'g:gcra'}),
	"gcra|$max|36500 days",
	'case 1: one gcra row');

# ---------------------------------------------------------------------------
# Case 2: the sliding window, one hot key.
# ---------------------------------------------------------------------------

run_pgbench('case 2, sliding', 'sliding', <<SQL);
INSERT INTO results SELECT allowed, count, 1, retry_after
  FROM pklimit_check('sliding', $max, '36500 days', algorithm => 'sliding');
SQL
is(sql(q{SELECT count(*), count(*) FILTER (WHERE ok), count(*) FILTER (WHERE NOT ok) FROM results}),
	"$total|$max|" . ($total - $max),
	"case 2: $total answers, exactly $max allowed");
is( sql(
		qq{SELECT count(DISTINCT n), min(n), max(n), bool_and(ok = (n <= $max)),
			bool_and(ok = (retry = interval '0'))
		  FROM results}),
	"$total|1|$total|t|t",
	"case 2: the counts are 1..$total, each once, allowed exactly when <= $max");
is(sql("SELECT pklimit_count('sliding')"), $total, "case 2: pklimit_count = $total");
is( sql(
		q{SELECT algorithm, count, previous_count, expires_at - window_end FROM platformkit_limits
		  WHERE key = 'g:sliding'}),
	"sliding|$total|0|36500 days",
	'case 2: one sliding row, its count every call');

# ---------------------------------------------------------------------------
# Case 3: GCRA as a quota, costs 1 to 3.
# ---------------------------------------------------------------------------

run_pgbench('case 3, GCRA quota', 'gcra_quota', <<SQL);
\\set cost random(1, 3)
INSERT INTO results SELECT allowed, count, :cost, retry_after
  FROM pklimit_check('quota', $max, '36500 days', cost => :cost, record_refused => false,
                     algorithm => 'gcra');
SQL
my $held = sql("SELECT pklimit_count('quota')");
is( sql(
		qq{SELECT sum(cost), count(DISTINCT n) = count(*), max(n) FROM results WHERE ok}),
	"$held|t|$held",
	"case 3: the allowed calls saw distinct running totals of their costs, ending at pklimit_count ($held)");
ok($held <= $max && $held > $max - 3, "case 3: the bucket holds $held, at most $max, and no cost fits more");
is( sql(
		qq{SELECT count(*) > 0, bool_and(n + cost > $max), bool_and(retry > interval '0')
		  FROM results WHERE NOT ok}),
	't|t|t',
	"case 3: every refused call's cost would have taken its total over $max");
is( sql(
		q{SELECT count(*) FROM (SELECT n, cost FROM results WHERE ok) a
		  WHERE n - cost NOT IN (SELECT n FROM results WHERE ok) AND n <> cost}),
	'0',
	'case 3: each allowed call started where an allowed one ended (a serial chain from 0)');

# ---------------------------------------------------------------------------
# Case 4: GCRA on two of 3 keys at once, all or nothing.
# ---------------------------------------------------------------------------

run_pgbench('case 4, GCRA on two keys', 'gcra_groups', <<SQL);
\\set a random(1, 3)
\\set b 1 + :a % 3
WITH c AS (SELECT nextval('calls') AS call)
INSERT INTO results_groups SELECT c.call, r.key, r.allowed, r.count
  FROM c, pklimit_check_all(ARRAY['group' || :a, 'group' || :b], ARRAY[40 * :a, 40 * :b],
    ARRAY['36500 days', '36500 days']::interval[], record_refused => false, algorithm => 'gcra') r;
SQL
is(sql('SELECT count(DISTINCT call), count(*) FROM results_groups'),
	"$total|" . (2 * $total), "case 4: $total calls, two rows each");
my $allowed_on_both = q{SELECT *, bool_and(ok) OVER (PARTITION BY call) AS all_ok FROM results_groups};
is( sql(
		qq{SELECT count(*) FROM (SELECT key FROM ($allowed_on_both) r WHERE all_ok GROUP BY key
		  HAVING count(*) <> pklimit_count(key) OR count(DISTINCT n) <> count(*)
			  OR min(n) <> 1 OR max(n) <> count(*)
			  OR count(*) > 40 * right(key, 1)::int) k}),
	'0',
	'case 4: each key holds the calls allowed on both keys, seen at positions 1..n, never over its max');
is( sql(
		qq{SELECT count(*) FILTER (WHERE all_ok) > 0, count(*) FILTER (WHERE NOT all_ok) > 0
		  FROM (SELECT call, bool_and(ok) AS all_ok FROM results_groups GROUP BY call) c}),
	't|t',
	'case 4: some calls were allowed and some refused');
is( sql(
		q{SELECT count(*) FROM (SELECT DISTINCT key FROM results_groups) k
		  WHERE NOT EXISTS (SELECT FROM platformkit_limits l
			  WHERE l.key = 'g:' || k.key AND l.algorithm = 'gcra')}),
	'0',
	'case 4: every key is a gcra row');

$node->stop;
done_testing();
