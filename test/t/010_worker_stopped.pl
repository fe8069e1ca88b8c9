# A stopped worker: calls answer within their budget as
# pklimit.on_unavailable says, cancelled calls leak no queue slot and are
# not recorded, a waiting call shows its wait event and the queue depth,
# and pklimit_stats counts each answer by its reason.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = pklimit_node('stopped', "pklimit.queue_size = 16\n");

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
my $stats = "SELECT concat_ws('|', calls, allowed, refused, unavailable, failed_open, timeouts, queue_full, no_worker, errors)"
  . " FROM pklimit_stats WHERE datname = 'postgres'";
is($node->safe_psql('postgres', $stats), '3|0|0|3|1|3|0|0|0',
	'pklimit_stats: 3 calls unavailable, each a timeout, one failed open (allow; not deny or error)');

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
is($node->safe_psql('postgres', "SELECT queue_depth || '|' || worker_pid FROM pklimit_stats WHERE datname = 'postgres'"),
	"1|$pid", 'pklimit_stats shows the waiting request and the worker');
# 15 of the 16 queue slots are free: a call on 16 keys does not fit
($out, $err) = timed_psql($node, 'postgres',
	"SELECT string_agg(DISTINCT allowed || ':' || status, ',') FROM pklimit_check_all("
	  . "ARRAY(SELECT 'full-' || i FROM generate_series(1, 16) i), array_fill(5::bigint, ARRAY[16]),"
	  . " array_fill('1 day'::interval, ARRAY[16]))");
is($out, 'true:queue_full', 'a call on 16 keys with 15 slots free answers queue_full at once');
ok($node->poll_query_until('postgres', "SELECT pg_cancel_backend(pid) $waiting"), 'a waiting call can be cancelled');
$bg->quit;
kill 'CONT', $pid;
ok($node->poll_query_until('postgres',
	"SELECT wait_event_type || ':' || wait_event FROM pg_stat_activity WHERE pid = $pid", "Extension:$idle_wait"),
	"the idle worker's wait event is $idle_wait");
is($node->safe_psql('postgres', "SELECT pklimit_count('cancel-me')"), '0', 'the cancelled call was not recorded');
# cancelled calls have no answer and do not count; 40 ok after resuming
is($node->safe_psql('postgres', $stats), '44|40|0|4|2|3|1|0|0',
	'pklimit_stats: 44 answered calls, 40 allowed, 4 unavailable (3 timeouts, 1 queue_full), 2 failed open');

$node->stop;
done_testing();
