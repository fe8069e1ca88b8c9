# pklimit.asynchronous_commit: the worker acknowledges events without
# waiting for its commit's flush, nor for a synchronous standby.  With a
# synchronous standby required that never answers (proved in force first),
# calls are still answered at once, so the option is in force; every event
# acknowledged so survives a clean restart; a lease call is flushed all the
# same, without waiting for the standby;
# a reload turns the option off and the worker waits again.  What a crash may lose with it on is not tested: a
# test cannot make that loss happen on demand, and the crash tests (020) run
# with it off.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use PklimitTest;

my $node = pklimit_node('async_commit', "pklimit.asynchronous_commit = on\n", allows_streaming => 1);
is($node->safe_psql('postgres', 'SHOW pklimit.asynchronous_commit'), 'on', 'asynchronous commit is on');
$node->safe_psql('postgres', 'SELECT pklimit_count(\'wake-up\')');    # the worker starts

# Calls below answer within 200 ms unless they say otherwise, their warnings
# kept out of poll_query_until's way (set while a write commits without a
# standby).
$node->safe_psql('postgres',
	"ALTER DATABASE postgres SET pklimit.timeout = '200ms'; ALTER DATABASE postgres SET client_min_messages = error");

# --- a synchronous standby that never answers, in force: a plain write waits
$node->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'nosuch'; SELECT pg_reload_conf()");
my ($out, $err) = ('', '');
my $write = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		'SET client_min_messages = warning; SET synchronous_commit = on; CREATE TABLE probe ()'
	],
	'>', \$out, '2>', \$err);
ok($node->poll_query_until('postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE '%probe%'", '1'),
	'a plain write waits for the synchronous standby that never answers');
$node->safe_psql('postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%CREATE TABLE probe%' AND pid <> pg_backend_pid()");
$write->finish;

# --- the worker does not wait: every call answered, and recorded
($out, $err) = timed_psql($node, 'postgres',
	"SET pklimit.timeout = '10s'; SET client_min_messages = warning;"
	  . " SELECT count(*) FILTER (WHERE status = 'ok') FROM generate_series(1, 2000) i,"
	  . " LATERAL pklimit_check('async-' || i % 10, 1000000, '36500 days')");
is($out, '2000', 'the worker answers every call without waiting for its flush or the standby');
is($err, '', 'with no warning');
($out, $err) = timed_psql($node, 'postgres',
	"SET pklimit.timeout = '10s'; SET client_min_messages = warning;"
	  . " SELECT count(*) FROM generate_series(1, 50) i, LATERAL pklimit_check_all(ARRAY['async-a' || left(i::text, 0), 'async-b'],"
	  . " ARRAY[100, 100], ARRAY['36500 days', '36500 days']::interval[]) c WHERE c.status = 'ok'");
is($out, '100', 'and every call on several keys');

# --- a lease call's transaction is flushed at its commit all the same (a
# lease lost at a crash would let one more holder in), with
# synchronous_commit = local: it does not wait for the standby either, so a
# standby that does not answer holds up no call
my $lsn = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
is($node->safe_psql('postgres',
	"SET pklimit.timeout = '10s'; SELECT status FROM pklimit_acquire_check('async-lease', 1, '1 hour')"),
	'ok', 'a lease call is answered without waiting for the standby');
is($node->safe_psql('postgres', "SELECT pg_current_wal_flush_lsn() > '$lsn'::pg_lsn"), 't',
	'its commit was flushed before the answer');
is($node->safe_psql('postgres', "SELECT status FROM pklimit_check('async-after-lease', 5, '36500 days')"),
	'ok', 'and the calls after it are answered');

# --- what was acknowledged survives a clean restart
$node->restart;    # fast: the shutdown checkpoint flushes what was acknowledged
is($node->safe_psql('postgres',
	"SELECT sum(pklimit_count('async-' || i)) FROM generate_series(0, 9) i"),
	'2000', 'a clean restart keeps every event acknowledged before the flush');
is($node->safe_psql('postgres', "SELECT pklimit_count('async-a') || ' ' || pklimit_count('async-b')"),
	'50 50', 'and every acknowledged call on several keys');

# --- a reload turns it off: the worker waits for the standby again
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
