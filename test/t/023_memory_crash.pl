# Copyright (c) pklimit contributors
#
# The memory path's crash bound (docs/memory.md, "What can be lost"): a
# crash loses at most the memory events acknowledged in the last
# 2 x pklimit.flush_interval before it; durable calls lose nothing.  Three
# rounds, each a different crash under a load of pgbench clients, each
# client with its own memory key (9 calls in 10) and its own durable key:
#
#   1. the postmaster killed with SIGKILL (its children see it die);
#   2. the worker killed with SIGKILL (the postmaster's crash restart
#      starts shared memory again, as after the OOM killer);
#   3. the postmaster and every child killed with SIGKILL at once (power);
#   4. the worker killed with SIGKILL while memory thrashes: with
#      pklimit.memory_keys = 4 for the 6 memory keys, keys are read in,
#      refused admission and given back all along (docs/memory.md,
#      "Admission").
#
# pgbench's per-transaction log holds each acknowledged call and when its
# answer came, by the client's clock.  With pklimit.on_unavailable = error a
# call that was not answered ok is not in it.  For each key, after the
# restart: the row holds at most what was acknowledged, plus the one call
# its client had in flight; a durable key at least what was acknowledged; a
# memory key at least the calls acknowledged before T - 2 x interval - slack,
# T the last acknowledged memory call of the round (a memory call is decided
# only while the last committed flush started at most 2 x interval before;
# slack, 1 s, is for its answer to reach the client).  In round 1 the worker
# sees the postmaster die and exits through its last flush, so the bound is
# loose there; rounds 2 and 3 kill the worker itself.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use PklimitTest;

my $INTERVAL_MS = 200;
# time for an answer to reach pgbench's log, on a loaded machine
my $SLACK_MS = 1000;
my $CLIENTS = 6;
my $node = pklimit_node('memory_crash',
	"restart_after_crash = on\nmax_connections = 40\nlog_statement = none\n"
	  . "pklimit.flush_interval = ${INTERVAL_MS}ms\npklimit.on_unavailable = error\n");
my $base = $node->basedir;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub gone
{
	my @pids = @_;
	for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
	{
		return 1 unless grep { kill 0, $_ } @pids;
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# PKLIMIT_SHORT (test/run.sh, on the versions in chroots): round 2 only
for my $round ($ENV{PKLIMIT_SHORT} ? (2) : (1 .. 4))
{
	my $kind = (undef, 'postmaster', 'worker', 'everything', 'worker')[$round];
	if ($round == 4)
	{
		$node->append_conf('postgresql.conf', "pklimit.memory_keys = 4\n");
		$node->restart;
	}
	my $log = "$base/round$round";
	my %script = (mem => "SELECT pklimit_allow('r$round-m' || :client_id, 1000000000, '36500 days', durable => false);\n",
		dur => "SELECT pklimit_allow('r$round-d' || :client_id, 1000000000, '36500 days');\n");
	for (keys %script)
	{
		open my $fh, '>', "$base/$_.sql" or die;
		print $fh $script{$_};
		close $fh;
	}
	sql("SELECT pklimit_stats_reset(oid) FROM pg_database WHERE datname = 'postgres'");
	my ($out, $err) = ('', '');
	my $bench = IPC::Run::start(
		[ 'pgbench', '-n', '-c', $CLIENTS, '-j', 2, '-T', 120, '-l', "--log-prefix=$log",
			'-f', "$base/mem.sql\@9", '-f', "$base/dur.sql\@1", '-h', $node->host, '-p', $node->port,
			'postgres' ],
		'>', \$out, '2>', \$err);
	ok($node->poll_query_until('postgres',
		$round == 4
		? "SELECT memory_calls >= 1000 AND flushes >= 20 AND memory_evictions >= 20"
		  . " FROM pklimit_stats WHERE datname = 'postgres'"
		: "SELECT memory_calls >= 3000 AND flushes >= 20 AND events - memory_calls >= 100"
		  . " FROM pklimit_stats WHERE datname = 'postgres'"),
		"round $round: the load runs, calls decided in memory and flushed"
		  . ($round == 4 ? ', keys given back' : ''));

	my $pids = sql('SELECT string_agg(pid::text, \' \') FROM pg_stat_activity WHERE pid <> pg_backend_pid()');
	my @children = split / /, $pids;
	my $worker = sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker'");
	my $postmaster = $node->{_pid};
	if ($kind eq 'worker')
	{
		kill 'KILL', $worker;
	}
	else
	{
		$node->kill9;
		kill 'KILL', @children if $kind eq 'everything';
	}
	$bench->finish;
	like($err, qr/aborted|server closed|terminat/, "round $round: the $kind crash ended the clients' sessions");
	if ($kind eq 'worker')
	{
		ok($node->poll_query_until('postgres', 'SELECT true'), "round $round: the crash restart brings service back");
	}
	else
	{
		ok(gone($postmaster, @children), "round $round: every process of the server is gone");
		$node->start;
	}

	# acknowledged calls per key, and when the last memory call was answered
	my (%acked, %times);
	my $last = 0;
	for my $file (glob "$log.*")
	{
		open my $fh, '<', $file or die;
		while (<$fh>)
		{
			my ($client, undef, undef, $script, $sec, $usec) = split;
			my $key = "r$round-" . ($script == 0 ? 'm' : 'd') . $client;
			my $t = $sec + $usec / 1e6;
			$acked{$key}++;
			push @{ $times{$key} }, $t;
			$last = $t if $script == 0 && $t > $last;
		}
		close $fh;
	}
	my %stored = map { split /\|/ } split /\n/,
	  sql("SELECT substr(key, 3), count FROM platformkit_limits WHERE key LIKE 'g:r$round-%'");
	my $cutoff = $last - (2 * $INTERVAL_MS + $SLACK_MS) / 1000;
	my ($over, $lost_durable, $lost_early, $before, $lost) = (0, 0, 0, 0, 0);
	for my $key (sort keys %acked)
	{
		my $got = $stored{$key} // 0;
		my $early = grep { $_ < $cutoff } @{ $times{$key} };
		$over++ if $got > $acked{$key} + 1;
		if ($key =~ /-d/)
		{
			$lost_durable++ if $got < $acked{$key};
			next;
		}
		$before += $early;
		$lost += $acked{$key} - $got if $got < $acked{$key};
		$lost_early++ if $got < $early;
		diag("round $round: $key stored $got of $acked{$key} acknowledged, $early before the cutoff")
		  if $got > $acked{$key} + 1 || $got < $early;
	}
	note("round $round ($kind): $lost memory events lost in all");
	is(scalar(grep { /-m/ } keys %acked) . '|' . scalar(grep { /-d/ } keys %acked),
		"$CLIENTS|$CLIENTS", "round $round: every client acknowledged memory and durable calls");
	cmp_ok($before, '>=', 1000, "round $round: $before memory calls acknowledged before the cutoff");
	is($over, 0, "round $round: no key holds more than was acknowledged, plus one in flight");
	is($lost_durable, 0, "round $round: no durable key lost an acknowledged call");
	is($lost_early, 0, "round $round: no memory key lost a call acknowledged more than 2 x interval before the last");
	is(sql("SELECT count FROM pklimit_check('r$round-after', 10, '36500 days', durable => false)"), '1',
		"round $round: after the restart memory calls are answered");
}

$node->stop;
done_testing();
