# Copyright (c) pklimit contributors
#
# Exactness under concurrency (the README's semantics): N sessions making M calls
# each on one key leave count N*M and exactly max_count trues per window.
# The calls are made by pgbench clients; every call stores its answer in a
# plain table, so the trues can be counted afterwards.
#
#   1. 16 clients x 50 calls on one key, max 100, window 1 day: exactly 100
#      trues, 700 falses, pklimit_count = 800.  Half the calls (at random)
#      are pklimit_check, whose count must be a distinct position 1..800,
#      allowed exactly when it is <= 100.
#   2. 8 clients x 100 calls over 10 keys (Zipf-distributed, so some keys
#      get fewer attempts than the limit and some many more) in 3 namespaces
#      (global and two tenants): for every (tenant, key), trues =
#      min(attempts, 40) and pklimit_count = attempts.
#   3. Case 1 again with every session in REPEATABLE READ: the answer must
#      be fresh and exact whatever the caller's isolation level.
#   4. 8 clients x 60 calls of pklimit_check_all on two of 4 keys, in either
#      order (overlapping sets): every key counts every call naming it, its
#      trues are min(attempts, its max), and each call saw its own position.
#   5. The same with record_refused => false and costs 1 to 3 (a quota):
#      each key's count is the sum of the costs of the calls allowed on
#      both keys, never more than its max, and the allowed calls saw
#      distinct running totals ending at that count.
#
# All windows are '1 day'.  The server clock is read before and after each
# run; if UTC midnight passed in between, the counts legitimately restart,
# so the run is repeated with fresh keys (up to 3 times; never skipped).
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

my $DAY_US = 86400 * 1_000_000;
my $MAX_ATTEMPTS = 3;

my $node = PostgreSQL::Test::Cluster->new('concurrency');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pklimit'\n"
	  . "max_connections = 40\n"
	  . "log_statement = none\n");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION pklimit;
	CREATE TABLE results (ok boolean NOT NULL, n bigint,
		iso text NOT NULL DEFAULT pg_catalog.current_setting('transaction_isolation'));
	CREATE TABLE results_multi (tenant int NOT NULL, k int NOT NULL,
		ok boolean NOT NULL);
	CREATE SEQUENCE calls;
	CREATE TABLE results_groups (call bigint NOT NULL, cost int NOT NULL,
		key text NOT NULL, ok boolean NOT NULL, n bigint NOT NULL);
});

sub clock_us
{
	return $node->safe_psql('postgres',
		'SELECT (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::bigint'
	);
}

# Did a 1-day window boundary (UTC midnight) pass between the readings?
sub day_crossed
{
	my ($t0, $t1) = @_;
	use integer;
	return $t0 / $DAY_US != $t1 / $DAY_US;
}

# Run $body->($attempt) between two clock readings until no UTC midnight
# passes during it; $body returns a code ref making the assertions, which
# runs only for a run that stayed inside one window.
sub in_one_window
{
	my ($name, $body) = @_;
	for my $attempt (1 .. $MAX_ATTEMPTS)
	{
		my $t0 = clock_us();
		my $check = $body->($attempt);
		my $t1 = clock_us();
		if (day_crossed($t0, $t1))
		{
			note("$name: UTC midnight passed during attempt $attempt "
				  . "($t0..$t1 us); the counts restarted, repeating with fresh keys");
			next;
		}
		$check->();
		return;
	}
	fail("$name: UTC midnight passed during each of $MAX_ATTEMPTS attempts");
	return;
}

# ---------------------------------------------------------------------------
# Case 1 (and 3): one hot key.
# ---------------------------------------------------------------------------

sub one_hot_key
{
	my ($name, $key_prefix, $clients, $per_client, $max, $iso) = @_;
	my $total = $clients * $per_client;
	in_one_window(
		$name,
		sub {
			my ($attempt) = @_;
			my $key = "$key_prefix$attempt";
			$node->safe_psql('postgres', 'TRUNCATE results');
			$node->safe_psql('postgres',
				"SELECT pklimit_stats_reset(oid) FROM pg_database WHERE datname = 'postgres'");
			my $tag = $key =~ s/\W/_/gr;
			pklimit_pgbench(
				$node,
				"$name: pgbench, $clients clients x $per_client calls",
				$clients, $per_client, $SEED,
				{
					"002_${tag}_allow" =>
					  "INSERT INTO results (ok) SELECT pklimit_allow('$key', $max, '1 day');\n",
					"002_${tag}_check" =>
					  "INSERT INTO results (ok, n) SELECT allowed, count"
					  . " FROM pklimit_check('$key', $max, '1 day');\n",
				});
			return sub {
				my $res = $node->safe_psql(
					'postgres', qq{
					SELECT count(*),
						count(*) FILTER (WHERE ok),
						count(*) FILTER (WHERE NOT ok),
						pklimit_count('$key')
					FROM results;
				});
				is($res, "$total|$max|" . ($total - $max) . "|$total",
					"$name: $total answers, exactly $max true, "
					  . ($total - $max) . " false, pklimit_count = $total");

				# Every pklimit_check saw its own event's position.
				$res = $node->safe_psql(
					'postgres', qq{
					SELECT count(*) > 0,
						count(*) = count(DISTINCT n),
						coalesce(bool_and(n BETWEEN 1 AND $total), true),
						coalesce(bool_and(ok = (n <= $max)), true)
					FROM results WHERE n IS NOT NULL;
				});
				is($res, 't|t|t|t',
					"$name: pklimit_check counts are distinct positions 1..$total,"
					  . " allowed exactly when <= $max");

				is( $node->safe_psql(
						'postgres',
						'SELECT string_agg(DISTINCT iso, \',\') FROM results'),
					$iso,
					"$name: every call ran in $iso");

				# pklimit_stats counted every call and event exactly.
				is( $node->safe_psql(
						'postgres',
						"SELECT concat_ws('|', calls, allowed, refused, unavailable, events,"
						  . " batches BETWEEN 1 AND $total) FROM pklimit_stats WHERE datname = 'postgres'"),
					"$total|$max|" . ($total - $max) . "|0|$total|t",
					"$name: pklimit_stats counted $total calls, $max allowed, $total events");
			};
		});
	return;
}

one_hot_key('case 1, one hot key', 'hot', 16, 50, 100, 'read committed');

# ---------------------------------------------------------------------------
# Case 2: several keys and tenants at once.
# ---------------------------------------------------------------------------

{
	my ($clients, $per_client, $max, $nkeys) = (8, 100, 40, 10);
	my $total = $clients * $per_client;
	my @tenants = ('', 'tenant1', 'tenant2');    # 0 = global namespace
	in_one_window(
		'case 2, several keys',
		sub {
			my ($attempt) = @_;
			my $prefix = "multi$attempt:";
			$node->safe_psql('postgres', 'TRUNCATE results_multi');
			pklimit_pgbench(
				$node,
				"case 2: pgbench, $clients clients x $per_client calls over"
				  . " $nkeys keys x 3 namespaces",
				$clients, $per_client, $SEED,
				{
					"002_multi_$attempt" => qq{\\set k random_zipfian(1, $nkeys, 1.5)
\\set t random(0, 2)
SELECT pg_catalog.set_config('platformkit.tenant', CASE WHEN :t = 0 THEN '' ELSE 'tenant' || :t END, false);
INSERT INTO results_multi (tenant, k, ok) SELECT :t, :k, pklimit_allow('$prefix' || :k, $max, '1 day');
}
				});
			return sub {
				my %attempts;
				my %trues;
				for my $line (split /\n/,
					$node->safe_psql(
						'postgres',
						'SELECT tenant, k, count(*), count(*) FILTER (WHERE ok)'
						  . ' FROM results_multi GROUP BY 1, 2'))
				{
					my ($t, $k, $n, $ok) = split /\|/, $line;
					$attempts{"$t/$k"} = $n;
					$trues{"$t/$k"} = $ok;
				}
				my (%want_trues, %want_count, %got_trues, %got_count);
				my $script = '';
				my @groups;
				for my $t (0 .. 2)
				{
					$script .= "SET platformkit.tenant = '$tenants[$t]';\n";
					for my $k (1 .. $nkeys)
					{
						my $g = "$t/$k";
						push @groups, $g;
						my $n = $attempts{$g} // 0;
						$want_trues{$g} = $n < $max ? $n : $max;
						$want_count{$g} = $n;
						$got_trues{$g} = $trues{$g} // 0;
						$script .= "SELECT pklimit_count('$prefix$k');\n";
					}
				}
				my @counts = split /\n/, $node->safe_psql('postgres', $script);
				@got_count{@groups} = @counts;

				my $sum = 0;
				$sum += $_ for values %attempts;
				is($sum, $total, "case 2: $total answers recorded");
				is_deeply(\%got_trues, \%want_trues,
					"case 2: every (tenant, key) got min(attempts, $max) trues");
				is_deeply(\%got_count, \%want_count,
					"case 2: every (tenant, key) has pklimit_count = attempts");
				my $below = grep { $_ > 0 && $_ < $max } values %attempts;
				my $above = grep { $_ > $max } values %attempts;
				ok($below > 0 && $above > 0,
					"case 2 covers keys below ($below) and above ($above) the limit");
			};
		});
}

# ---------------------------------------------------------------------------
# Case 3: case 1 with every session in REPEATABLE READ.
# ---------------------------------------------------------------------------

{
	local $ENV{PGOPTIONS} = '-c default_transaction_isolation=repeatable\ read';
	one_hot_key('case 3, one hot key, REPEATABLE READ', 'hot_rr', 16, 50, 100,
		'repeatable read');
}

# ---------------------------------------------------------------------------
# Cases 4 and 5: calls on two overlapping keys at once.
# ---------------------------------------------------------------------------

sub groups
{
	my ($name, $quota) = @_;
	my ($clients, $per_client) = (8, 60);
	my $total = $clients * $per_client;
	in_one_window(
		$name,
		sub {
			my ($attempt) = @_;
			my $prefix = ($quota ? 'quota' : 'group') . "$attempt:";
			my $options = $quota ? ', cost => :cost, record_refused => false' : '';
			$node->safe_psql('postgres', 'TRUNCATE results_groups');
			pklimit_pgbench(
				$node,
				"$name: pgbench, $clients clients x $per_client calls on two of 4 keys",
				$clients, $per_client, $SEED,
				{
					"002_groups_${quota}_$attempt" => qq{\\set a random(1, 4)
\\set b 1 + (:a + random(0, 2)) % 4
\\set cost } . ($quota ? 'random(1, 3)' : '1') . qq{
WITH c AS (SELECT nextval('calls') AS call)
INSERT INTO results_groups SELECT c.call, :cost, r.key, r.allowed, r.count
  FROM c, pklimit_check_all(ARRAY['$prefix' || :a, '$prefix' || :b],
    ARRAY[25 * :a, 25 * :b], ARRAY['1 day', '1 day']::interval[]$options) r;
}
				});
			return sub {
				is($node->safe_psql('postgres',
					'SELECT count(DISTINCT call), count(*) FROM results_groups'),
					"$total|" . (2 * $total), "$name: $total calls, two rows each");
				# what each key must show, from the answers
				my $want = $quota
				  ? q{SELECT key, coalesce(sum(cost) FILTER (WHERE all_ok), 0) AS count
					  FROM (SELECT *, bool_and(ok) OVER (PARTITION BY call) AS all_ok
							  FROM results_groups) r GROUP BY key}
				  : q{SELECT key, count(*) AS count,
						least(count(*), 25 * right(key, 1)::int) AS trues
					  FROM results_groups GROUP BY key};
				my $got = 'SELECT key, pklimit_count(key) AS count'
				  . ($quota ? '' : ', count(*) FILTER (WHERE ok) AS trues')
				  . ' FROM results_groups GROUP BY key';
				is($node->safe_psql('postgres',
					"SELECT count(*) FROM (($want) EXCEPT ($got)) d"), '0',
					$quota
					? "$name: each key counts the costs of the calls allowed on both keys, and nothing of the others"
					: "$name: each key counts every call naming it, and min(attempts, max) were allowed");
				is($node->safe_psql('postgres', q{SELECT count(*) FROM (SELECT key FROM results_groups
					GROUP BY key HAVING pklimit_count(key) > 25 * right(key, 1)::int) k}),
					$quota ? '0' : '4',
					$quota ? "$name: no key went over its max" : "$name: every key counted refused calls past its max");
				is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE all_ok) > 0, count(*) FILTER (WHERE NOT all_ok) > 0
					  FROM (SELECT call, bool_and(ok) AS all_ok FROM results_groups GROUP BY call) c}),
					't|t', "$name: some calls were allowed and some refused");
				my $positions = $quota
				  ? q{SELECT count(*) FROM (SELECT key FROM (SELECT *, bool_and(ok) OVER (PARTITION BY call) AS all_ok
						FROM results_groups) r WHERE all_ok GROUP BY key
					  HAVING count(DISTINCT n) <> count(*) OR max(n) <> pklimit_count(key)) k}
				  : q{SELECT count(*) FROM (SELECT key FROM results_groups GROUP BY key
					  HAVING count(DISTINCT n) <> count(*) OR min(n) <> 1 OR max(n) <> count(*)) k};
				is($node->safe_psql('postgres', $positions), '0',
					"$name: the calls saw distinct positions on every key, ending at its count");
			};
		});
	return;
}

groups('case 4, overlapping keys', 0);
groups('case 5, overlapping keys, a quota', 1);

$node->stop;
done_testing();
