# Unavailable stores: with max_worker_processes exhausted no worker can
# start, and calls answer at once as no_worker, whatever their budget, with
# the failure in the server log but no flood; on a hot standby calls answer
# as read_only, memory calls too.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

# The logical replication launcher takes the only background worker slot.
my $node = pklimit_node('exhausted', "max_worker_processes = 1\n");
# a budget of 10 minutes: psql is stopped after the harness's timeout, a
# fraction of it, so an answer says the budget was not waited out
my ($out, $err, $timed_out) = ('', '', 0);
$node->psql('postgres',
	"SET pklimit.timeout = '10min'; SELECT allowed, status FROM pklimit_check('k', 1, '36500 days')",
	stdout => \$out, stderr => \$err, timeout => $PostgreSQL::Test::Utils::timeout_default,
	timed_out => \$timed_out);
ok(!$timed_out, 'a call with no worker slot and a budget of 10 minutes is answered at once');
is($out, 't|no_worker', 'allowed, status no_worker');
like($err, qr/WARNING:  pklimit store unavailable: no_worker/, 'with a warning');
($out) = timed_psql($node, 'postgres',
	"SET pklimit.timeout = '50ms'; SELECT count(*) FROM generate_series(1, 50) i, LATERAL pklimit_check('k' || i, 1, '36500 days') c WHERE c.status = 'no_worker'");
is($out, '50', '50 calls in a row all answer no_worker');
my $log = slurp_file($node->logfile);
my $lines = () = $log =~ /LOG:  pklimit could not start a worker for database "postgres"/g;
cmp_ok($lines, '>=', 1, 'the failure to get a worker slot is in the server log');
cmp_ok($lines, '<', 10, 'but does not flood it (the back-off spaces the tries out)');
like($log, qr/HINT:  Raise max_worker_processes, or name the database in pklimit.databases/,
	'with the fix in its hint');
is($node->safe_psql('postgres',
	"SELECT concat_ws('|', calls, allowed, unavailable, no_worker, worker_starts, worker_pid IS NULL) FROM pklimit_stats WHERE datname = 'postgres'"),
	'51|0|51|51|0|t', 'pklimit_stats: 51 calls unavailable for want of a worker, none started, no worker pid');
$node->stop;

# A hot standby answers read_only.
my $primary = pklimit_node('primary', '', allows_streaming => 1);
$primary->safe_psql('postgres', "SELECT pklimit_allow('replicated', 5, '36500 days')");
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
($out, $err) = timed_psql($standby, 'postgres',
	"SELECT allowed, status FROM pklimit_check('replicated', 5, '36500 days')");
is($out, 't|read_only', 'a hot standby answers read_only');
is($standby->safe_psql('postgres',
	"SELECT concat_ws('|', calls, unavailable, read_only) FROM pklimit_stats WHERE datname = 'postgres'"),
	'1|1|1', "the standby's pklimit_stats counts it as read_only");
like($err, qr/pklimit store unavailable: read_only/, 'with a warning');
is($primary->safe_psql('postgres', "SELECT pklimit_count('replicated')"), '1', 'and records nothing');
# the memory path too: a key decided in the primary's memory is not in the
# standby's, and the standby's worker-less memory decides nothing
$primary->safe_psql('postgres',
	"SELECT pklimit_allow('in-memory', 5, '36500 days', durable => false) FROM generate_series(1, 3)");
$primary->wait_for_catchup($standby);
($out, $err) = timed_psql($standby, 'postgres',
	"SELECT allowed, status FROM pklimit_check('in-memory', 5, '36500 days', durable => false)"
	  . " UNION ALL SELECT allowed, status FROM pklimit_check('replicated', 5, '36500 days', durable => false)");
is($out, "t|read_only\nt|read_only", 'a hot standby answers a memory call read_only, for any key');
is($standby->safe_psql('postgres',
	"SELECT concat_ws('|', calls, read_only, memory_calls) FROM pklimit_stats WHERE datname = 'postgres'"),
	'3|3|0', 'the standby decided none of them in memory');
is($primary->safe_psql('postgres', "SELECT pklimit_count('in-memory')"), '3', 'and the primary counts 3');
$standby->stop;
$primary->stop;
done_testing();
