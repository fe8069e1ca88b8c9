# A worker that is terminated is replaced by the next call, no count is
# lost, pklimit_stats keeps counting across the replacement, and workers
# end with the server.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = pklimit_node('replaced');
my $pid = worker_pid($node);
my ($out, $err, $secs);

# --- a terminated worker is replaced and no count is lost
$node->safe_psql('postgres', "SELECT pklimit_allow('kept', 10, '36500 days') FROM generate_series(1, 3)");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'worker terminated');
($out, $err, $secs) = timed_psql($node, 'postgres', "SELECT pklimit_allow('kept', 10, '36500 days')");
is($out, 't', 'a call after the worker was terminated is answered');
is($err, '', 'by a new worker, without a warning');
my $new_pid = worker_pid($node);
isnt($new_pid, $pid, 'the new worker has another pid');
is($node->safe_psql('postgres', "SELECT pklimit_count('kept')"), '4', 'count exact across the replacement');
is($node->safe_psql('postgres',
	"SELECT concat_ws('|', calls, allowed, events, batches, worker_starts, worker_pid) FROM pklimit_stats WHERE datname = 'postgres'"),
	"4|4|4|4|2|$new_pid", 'pklimit_stats kept its counts across the replacement, two worker starts, the new pid');

$node->stop;
ok(!kill(0, $new_pid), 'workers end with the server');
done_testing();
