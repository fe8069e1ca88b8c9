# Copyright (c) pklimit contributors
#
# pklimit_decrement under concurrency (docs/algorithms.md, "Taking events
# back"): decrements are applied on the key's locked row beside the
# recording calls of other sessions, so none is lost and none is applied
# twice.  The calls are made by pgbench clients on one hot key.  Windows are
# 36500 days: a fixed or sliding window that holds now has no previous
# window, and with max_count 1000000 a GCRA step is about 53 minutes, far
# longer than the run, so counts do not drain while it runs.
#
#   1. For each algorithm, 16 clients x 25 runs of two hits and one
#      decrement: the key holds exactly 400 events.
#   2. A middleware that takes a refused request back (express-rate-limit's
#      skipFailedRequests): 16 clients x 25 calls with max_count 50, each
#      refused one decremented at once.  Exactly 50 are allowed and the key
#      holds exactly 50, for the fixed and the sliding window.
#   3. 400 decrements of 0 to 3 at once leave the key with what it held
#      minus their sum, whatever their order; more than it holds stops at
#      zero.
#
# PKLIMIT_SEED (default 20251202) seeds pgbench's random choices.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PklimitTest;

my $SEED = $ENV{PKLIMIT_SEED} // 20251202;
die "PKLIMIT_SEED must be an integer\n" unless $SEED =~ /^\d+$/;
note("PKLIMIT_SEED=$SEED");

my $node = pklimit_node('decrement_concurrency',
	"max_connections = 40\nlog_statement = none\n");
$node->safe_psql('postgres',
	'CREATE TABLE results (algorithm text NOT NULL, ok boolean, n bigint NOT NULL, back int)');

my ($clients, $per_client) = (16, 25);
my $total = $clients * $per_client;

sub run_pgbench
{
	my ($name, $script, $sql) = @_;
	pklimit_pgbench($node, "$name: pgbench, $clients clients x $per_client runs",
		$clients, $per_client, $SEED, { "006_$script" => $sql });
	return;
}

sub sql { return $node->safe_psql('postgres', $_[0]); }

# Case 1: two hits and a decrement, for every algorithm.
for my $algorithm (qw(fixed gcra sliding))
{
	run_pgbench("case 1, $algorithm", "net_$algorithm", <<SQL);
SELECT pklimit_allow('net_$algorithm', 1000000, '36500 days', algorithm => '$algorithm');
SELECT pklimit_allow('net_$algorithm', 1000000, '36500 days', algorithm => '$algorithm');
SELECT pklimit_decrement('net_$algorithm');
SQL
	is(sql("SELECT pklimit_count('net_$algorithm')"),
		$total, "case 1, $algorithm: $total runs of +2 -1 leave exactly $total events");
}

# Case 2: every refusal taken back at once.
for my $algorithm (qw(fixed sliding))
{
	run_pgbench("case 2, $algorithm", "skip_$algorithm", <<SQL);
SELECT allowed::int AS ok, count AS n FROM pklimit_check('skip_$algorithm', 50, '36500 days', algorithm => '$algorithm') \\gset
INSERT INTO results VALUES ('skip_$algorithm', :ok = 1, :n, 0);
\\if :ok = 0
SELECT pklimit_decrement('skip_$algorithm');
\\endif
SQL
	is( sql(
			qq{SELECT count(*), count(*) FILTER (WHERE ok), count(DISTINCT n) FILTER (WHERE ok),
				max(n) FILTER (WHERE ok) FROM results WHERE algorithm = 'skip_$algorithm'}),
		"$total|50|50|50",
		"case 2, $algorithm: exactly 50 allowed, at counts 1..50");
	is(sql("SELECT pklimit_count('skip_$algorithm')"),
		50, "case 2, $algorithm: the refusals taken back, the key holds exactly 50");
}

# Case 3: decrements of 0 to 3 at once, on a key holding 1000: whatever
# their order, the key is left with 1000 minus their sum, and the ones that
# took something answered distinct counts.  Then decrements of 3 on what is
# left, more than it holds: the count stops at zero.
sql(q{SELECT pklimit_allow('floor', 1000000, '36500 days', cost => 1000)});
run_pgbench('case 3', 'back', <<SQL);
\\set back random(0, 3)
INSERT INTO results SELECT 'back', :back > 0, pklimit_decrement('floor', :back), :back;
SQL
my $sum = sql(q{SELECT sum(back) FROM results WHERE algorithm = 'back'});
ok($sum > 0 && $sum < 1000, "case 3: the decrements took back $sum in all");
is(sql("SELECT pklimit_count('floor')"), 1000 - $sum, 'case 3: the key holds 1000 minus their sum');
is( sql(
		q{SELECT count(*) = count(DISTINCT n) FROM results WHERE algorithm = 'back' AND ok}),
	't', 'case 3: each decrement that took something answered a count of its own');
run_pgbench('case 3, to zero', 'floor', <<SQL);
INSERT INTO results SELECT 'floor', NULL, pklimit_decrement('floor', 3), 3;
SQL
is( sql(
		q{SELECT count(*), min(n), count(*) FILTER (WHERE n = 0) > 0 FROM results WHERE algorithm = 'floor'}),
	"$total|0|t",
	'case 3: more taken back than held: the answers stop at zero');
is(sql("SELECT pklimit_count('floor')"), '0', 'case 3: the key holds zero');
is( sql(q{SELECT count, window_end - window_start FROM platformkit_limits WHERE key = 'g:floor'}),
	'0|36500 days', 'case 3: its row stays, at zero, in its window');

$node->stop;
done_testing();
