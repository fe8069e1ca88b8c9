# pklimit.asynchronous_commit: the worker acknowledges events without
# waiting for its commit's flush (nor for a synchronous standby).  A clean
# restart keeps every acknowledged event; a reload switches the worker back
# to waiting.  What a crash may lose with it on is not tested: a test cannot
# make that loss happen on demand, and the crash tests (020) run with it off.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = pklimit_node('async_commit', "pklimit.asynchronous_commit = on\n", allows_streaming => 1);
is($node->safe_psql('postgres', 'SHOW pklimit.asynchronous_commit'), 'on', 'asynchronous commit is on');

# --- every acknowledged event survives a clean restart
$node->safe_psql('postgres',
	"SELECT pklimit_allow('async-' || i % 10, 1000000, '36500 days') FROM generate_series(1, 2000) i");
$node->safe_psql('postgres',
	"SELECT pklimit_check_all(ARRAY['async-a', 'async-b'], ARRAY[100, 100], ARRAY['36500 days', '36500 days']::interval[]) FROM generate_series(1, 50)");
$node->restart;    # fast: the shutdown checkpoint flushes what was acknowledged
is($node->safe_psql('postgres',
	"SELECT sum(pklimit_count('async-' || i)) FROM generate_series(0, 9) i"),
	'2000', 'a clean restart keeps every acknowledged event');
is($node->safe_psql('postgres', "SELECT pklimit_count('async-a') || ' ' || pklimit_count('async-b')"),
	'50 50', 'and every acknowledged call on several keys');

# --- the worker does not wait for a synchronous standby either
# (calls below answer within 200 ms unless they say otherwise, their
# warnings kept out of poll_query_until's way; set while a write commits
# without a standby)
$node->safe_psql('postgres',
	"ALTER DATABASE postgres SET pklimit.timeout = '200ms'; ALTER DATABASE postgres SET client_min_messages = error");
$node->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'nosuch'; SELECT pg_reload_conf()");
ok($node->poll_query_until('postgres', 'SHOW synchronous_standby_names', 'nosuch'),
	'a synchronous standby that never connects is required');
my ($out, $err) = timed_psql($node, 'postgres',
	"SET pklimit.timeout = '10s'; SET client_min_messages = warning; SELECT allowed, status FROM pklimit_check('async-standby', 5, '36500 days')");
is($out, 't|ok', 'the worker answers without waiting for the standby');
is($err, '', 'with no warning');

# --- a reload turns it off: the worker waits again (here for the standby)
my $pid = worker_pid($node);
$node->safe_psql('postgres',
	"ALTER SYSTEM SET pklimit.asynchronous_commit = off; SELECT pg_reload_conf()");
ok($node->poll_query_until('postgres',
	"SELECT status FROM pklimit_check('async-off', 5, '36500 days')", 'timeout'),
	'after a reload the worker waits for its commit to reach the standby');
is($node->safe_psql('postgres', "SELECT wait_event FROM pg_stat_activity WHERE pid = $pid"), 'SyncRep',
	'the worker is in the SyncRep wait');
$node->stop('fast');
pass('a fast shutdown ends that wait');

done_testing();
