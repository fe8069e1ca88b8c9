# Rows locked by someone else delay no other key, even in one batch, even
# with calls on one of them in two windows and a forget of it, and calls on
# four more locked rows waiting meanwhile; a call on several keys that meets
# a locked row records none of them, whenever its caller gives up.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = pklimit_node('locked_rows');

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

# Calls on several keys, one of them locked, whose callers give up while
# they are set aside (budgets around the point where no further try is
# worth it, and cancels by statement_timeout): none records its free key.
my $groups = join('', map {
	my $budget = 40 + 4 * $_;
	"SET pklimit.timeout = '${budget}ms'; SET statement_timeout = '"
	  . ($_ % 2 ? '0' : ($budget / 2) . 'ms') . "';\n"
	  . "SELECT * FROM pklimit_check_all(ARRAY['free-$_', 'held'], ARRAY[100, 100], "
	  . "ARRAY['36500 days', '36500 days']::interval[]);\n"
} 1 .. 30);
my ($gout, $gerr) = timed_psql($node, 'postgres', "SET client_min_messages = error;\n$groups");
like($gerr, qr/canceling statement due to statement timeout/, 'some calls on several keys were cancelled while set aside');
is($node->safe_psql('postgres', "SELECT count(*) FROM platformkit_limits WHERE key LIKE 'g:free-%'"), '0',
	'no call on several keys that met the locked row recorded its free key');
$locker->query_safe('ROLLBACK');
$locker->quit;
$_->quit for @waiters;
is($node->safe_psql('postgres',
	"SELECT string_agg(status, ',') FROM pklimit_check_all(ARRAY['free-1', 'held'], ARRAY[100, 100], "
	  . "ARRAY['36500 days', '36500 days']::interval[])"), 'ok,ok', 'once the row is free, such a call records both keys');


$node->stop;
done_testing();
