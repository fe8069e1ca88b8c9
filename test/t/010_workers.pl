# Workers: a stopped worker costs at most the budget and the call answers as
# pklimit.on_unavailable says; cancelled calls leak no queue slot; a
# terminated worker is replaced; two databases keep separate counts; DROP
# DATABASE is not blocked by a worker.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = pklimit_node('workers', "pklimit.queue_size = 16\n");

# --- a worker that does not answer: fail open within the budget, then recover
my $pid = worker_pid($node);
ok($pid, "worker running (pid $pid)");
kill 'STOP', $pid;
my ($out, $err, $secs) = timed_psql($node, 'postgres',
	"SET pklimit.timeout = '500ms'; SELECT allowed, status FROM pklimit_check('stuck', 1, '36500 days')");
is($out, 't|timeout', 'no answer within the budget: allowed, status timeout');
like($err, qr/WARNING:  pklimit store unavailable: timeout/, 'with a warning');
cmp_ok($secs, '>=', 0.5, 'after waiting out its budget of 500 ms');
($out) = timed_psql($node, 'postgres',
	"SET pklimit.timeout = '200ms'; SET pklimit.on_unavailable = deny; SELECT pklimit_allow('stuck', 1, '36500 days')");
is($out, 'f', 'on_unavailable = deny refuses');
($out, $err) = timed_psql($node, 'postgres',
	"SET pklimit.timeout = '200ms'; SET pklimit.on_unavailable = error; SELECT pklimit_allow('stuck', 1, '36500 days')");
like($err, qr/ERROR:  pklimit store unavailable: timeout/, 'on_unavailable = error raises');

# --- cancelled calls free their queue slots (the queue has only 16)
my $script = "SET pklimit.timeout = '10s'; SET statement_timeout = '30ms';\n"
  . "SELECT pklimit_allow('cancelled', 1000, '36500 days');\n" x 40;
($out, $err) = timed_psql($node, 'postgres', $script);
my $cancels = () = $err =~ /canceling statement due to statement timeout/g;
is($cancels, 40, '40 calls cancelled by statement_timeout while waiting');
$node->safe_psql('postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE false");
kill 'CONT', $pid;
is($node->safe_psql('postgres', "SELECT pklimit_count('cancelled')"), '0',
	'no cancelled call was recorded');
$out = $node->safe_psql('postgres',
	"SELECT string_agg(status, ',' ORDER BY i) FILTER (WHERE status <> 'ok') FROM generate_series(1, 40) i, LATERAL pklimit_check('after-' || i % 2, 1000, '36500 days')");
is($out, '', '40 calls after resuming: every one answered ok (no slot leaked)');
is($node->safe_psql('postgres', "SELECT pklimit_count('after-0') + pklimit_count('after-1')"),
	'40', 'and counted exactly');
is($node->safe_psql('postgres', "SELECT pklimit_count('stuck')"), '0',
	'calls that timed out before a worker took them were not recorded');

# --- pg_cancel_backend on a waiting call
kill 'STOP', $pid;
my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_until(qr/start/, "\\echo start\nSET pklimit.timeout = '20s';\nSELECT pklimit_allow('cancel-me', 5, '36500 days');\n");
my $waiting = "FROM pg_stat_activity WHERE query LIKE '%cancel-me%' AND pid <> pg_backend_pid() AND wait_event_type = 'Extension'";
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 $waiting"), 'a call waits for the stopped worker');
# named wait events from PostgreSQL 17; "Extension" before
my ($answer_wait, $idle_wait) = pg_major() >= 17 ? ('PklimitAnswer', 'PklimitWorkerIdle') : ('Extension', 'Extension');
is($node->safe_psql('postgres', "SELECT wait_event $waiting"), $answer_wait, "its wait event is $answer_wait");
ok($node->poll_query_until('postgres', "SELECT pg_cancel_backend(pid) $waiting"), 'a waiting call can be cancelled');
$bg->quit;
kill 'CONT', $pid;
ok($node->poll_query_until('postgres',
	"SELECT wait_event_type || ':' || wait_event FROM pg_stat_activity WHERE pid = $pid", "Extension:$idle_wait"),
	"the idle worker's wait event is $idle_wait");
is($node->safe_psql('postgres', "SELECT pklimit_count('cancel-me')"), '0', 'the cancelled call was not recorded');

# --- a terminated worker is replaced and no count is lost
$node->safe_psql('postgres', "SELECT pklimit_allow('kept', 10, '36500 days') FROM generate_series(1, 3)");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'worker terminated');
($out, $err, $secs) = timed_psql($node, 'postgres', "SELECT pklimit_allow('kept', 10, '36500 days')");
is($out, 't', 'a call after the worker was terminated is answered');
is($err, '', 'by a new worker, without a warning');
isnt(worker_pid($node), $pid, 'the new worker has another pid');
is($node->safe_psql('postgres', "SELECT pklimit_count('kept')"), '4', 'count exact across the replacement');

# --- two databases: separate tables, separate workers, separate counts
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION pklimit');
$node->safe_psql('other', "SELECT pklimit_allow('shared-name', 10, '36500 days') FROM generate_series(1, 5)");
$node->safe_psql('postgres', "SELECT pklimit_allow('shared-name', 10, '36500 days') FROM generate_series(1, 2)");
is($node->safe_psql('other', "SELECT pklimit_count('shared-name')"), '5', 'database other counts its own');
is($node->safe_psql('postgres', "SELECT pklimit_count('shared-name')"), '2', 'database postgres counts its own');
is($node->safe_psql('postgres',
	"SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_stat_activity WHERE backend_type = 'pklimit worker'"),
	'other,postgres', 'one worker per database');

# --- settings of the database or role do not reach the worker
$node->safe_psql('postgres', "ALTER DATABASE other SET default_transaction_read_only = on");
$node->safe_psql('postgres', "ALTER DATABASE other SET statement_timeout = '1ms'");
$node->safe_psql('postgres', "ALTER DATABASE other SET default_transaction_isolation = 'serializable'");
$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'pklimit worker' AND datname = 'other'");
($out, $err) = timed_psql($node, 'other', "SET statement_timeout = 0; SELECT status FROM pklimit_check('shared-name', 10, '36500 days')");
is($out, 'ok', 'a read-only, 1 ms, serializable database still gets its events recorded');
$node->safe_psql('postgres', "ALTER DATABASE other RESET ALL");

# --- nobody but the database's owner can make its worker leave
my $worker_other = worker_pid($node, 'other');
$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');
$node->psql('postgres', 'SET ROLE mallory; DROP DATABASE other', stderr => \$err);
like($err, qr/must be owner of database other/, 'an ordinary role cannot drop the database');
is(worker_pid($node, 'other'), $worker_other, 'and its attempt did not stop the worker');

# --- statements that need the database to themselves are not blocked
is($node->psql('postgres', 'CREATE DATABASE copy TEMPLATE other'), 0,
	'CREATE DATABASE from it as a template succeeds while a worker serves it');
is($node->psql('postgres', 'ALTER DATABASE other RENAME TO other2'), 0, 'so does renaming it');
is($node->psql('postgres', 'DROP DATABASE other2'), 0, 'and DROP DATABASE');
is($node->safe_psql('copy', "SELECT pklimit_count('shared-name')"), '6', 'the copy keeps its counts (5, and the one recorded above)');

# --- rows locked by someone else delay no other key, even in one batch,
# even with calls on one of them in two windows and a forget of it, and
# calls on four more locked rows, waiting meanwhile
my $locker = $node->background_psql('postgres');
$locker->query_safe("SELECT pklimit_allow(k, 100, '36500 days') FROM unnest(ARRAY['held', 'held2', 'held3', 'held4', 'held5']) k");
is($locker->query_safe("BEGIN; SELECT count(*) FROM (SELECT 1 FROM platformkit_limits WHERE key LIKE 'g:held%' FOR UPDATE) l"),
	'5', 'five rows locked');
my @waiters;
for my $call ("pklimit_allow('held', 100, '36500 days')", "pklimit_allow('held', 100, '1 hour')",
	"pklimit_forget('held')", map { "pklimit_allow('held$_', 100, '36500 days')" } 2 .. 5)
{
	my $waiter = $node->background_psql('postgres', on_error_stop => 0);
	$waiter->query_until(qr/go/,
		"\\echo go\nSET pklimit.timeout = '3s'; SELECT $call FROM generate_series(1, 3);\n");
	push @waiters, $waiter;
}
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND backend_type = 'client backend'",
		scalar(@waiters)),
	'the calls on locked rows wait in the queue');
my $retry_wait = pg_major() >= 17 ? 'PklimitWorkerRetry' : 'Extension';
ok($node->poll_query_until('postgres',
	"SELECT wait_event FROM pg_stat_activity WHERE backend_type = 'pklimit worker' AND datname = 'postgres'", $retry_wait),
	"meanwhile the worker's wait event is $retry_wait");
my $bench = $node->basedir . '/others.sql';
open my $fh, '>', $bench or die;
print $fh "\\set k random(1, 20)\nSELECT pklimit_allow('other-' || :k, 1000, '36500 days');\n";
close $fh;
my ($bout, $berr) = ('', '');
IPC::Run::run([ 'pgbench', '-n', '-c', '4', '-t', '100', '-f', $bench, '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$bout, '2>', \$berr);
unlike($berr, qr/WARNING/, '400 calls on other keys while rows are locked: none unavailable');
is($node->safe_psql('postgres', "SELECT sum(pklimit_count('other-' || i)) FROM generate_series(1, 20) i"),
	'400', 'and all 400 counted');
$locker->query_safe('ROLLBACK');
$locker->quit;
$_->quit for @waiters;


$node->stop;
ok(!kill(0, $pid), 'workers end with the server');
done_testing();
