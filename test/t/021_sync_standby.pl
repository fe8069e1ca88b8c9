# A synchronous standby that never answers: the worker commits locally and
# waits for the standby, as any backend does.  A termination ends that wait
# as it does for a plain backend: the callers of the batch get their answer,
# with a WARNING that the commit was not confirmed by the standby, and a
# fast shutdown finishes.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use PklimitTest;

my $node = pklimit_node('sync_standby', '', allows_streaming => 1);
my $pid = worker_pid($node);
$node->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'nosuch'; SELECT pg_reload_conf()");
ok($node->poll_query_until('postgres', 'SHOW synchronous_standby_names', 'nosuch'),
	'a synchronous standby that never connects is required');

# A call: its event is committed locally, then the worker waits.
my ($out, $err) = ('', '');
my $call = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		"SET pklimit.timeout = '120s'; SELECT pklimit_allow('sync', 5, '36500 days')"
	],
	'>', \$out, '2>', \$err);
ok($node->poll_query_until('postgres',
	"SELECT wait_event FROM pg_stat_activity WHERE pid = $pid", 'SyncRep'),
	'the worker waits for the standby after its local commit');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
$call->finish;
chomp $out;
is($out, 't', 'a termination ends the wait: the caller gets its answer');
like($err, qr/WARNING:  pklimit's commit of this call was not confirmed by the synchronous standby/,
	'with a WARNING that the commit is local only');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'and the worker has exited');
is($node->safe_psql('postgres', "SELECT pklimit_count('sync')"), '1',
	'the event is committed locally (a count needs no standby)');

# Another batch waits for the standby; a fast shutdown ends it.
my $new_pid = worker_pid($node);
($out, $err) = ('', '');
$call = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		"SET pklimit.timeout = '120s'; SELECT pklimit_allow('sync', 5, '36500 days')"
	],
	'>', \$out, '2>', \$err);
ok($node->poll_query_until('postgres',
	"SELECT wait_event FROM pg_stat_activity WHERE pid = $new_pid", 'SyncRep'),
	'the new worker waits for the standby too');
$node->stop('fast');
pass('a fast shutdown finishes while the worker waited for the standby');
$call->finish;
ok(!kill(0, $new_pid), 'the worker has exited');
like($err, qr/not confirmed by the synchronous standby|terminating connection/,
	'its caller got an answer or the shutdown, not a hang');

done_testing();
