# Crashes and restarts: every acknowledged count survives an immediate
# shutdown (crash recovery) and a worker killed with SIGKILL (the
# postmaster's crash restart); service comes back by itself; a call on
# several keys killed half-written leaves none of them recorded; the crash
# restart starts pklimit_stats again.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = pklimit_node('crash', "restart_after_crash = on\n");

$node->safe_psql('postgres',
	"SELECT pklimit_allow('ack-' || i % 7, 1000, '36500 days') FROM generate_series(1, 700) i");
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres',
	"SELECT sum(pklimit_count('ack-' || i)) FROM generate_series(0, 6) i"),
	'700', 'every acknowledged event survives crash recovery');

my $pid = worker_pid($node);
$node->safe_psql('postgres', "SELECT pklimit_allow('before-kill', 10, '36500 days') FROM generate_series(1, 3)");
my $reset_before = $node->safe_psql('postgres',
	"SELECT stats_reset FROM pklimit_stats WHERE datname = 'postgres' AND calls = 3");
isnt($reset_before, '', 'pklimit_stats counted the 3 calls');
kill 'KILL', $pid;
ok($node->poll_query_until('postgres', "SELECT pklimit_allow('after-kill', 10, '36500 days')"),
	'service comes back after a worker is killed with SIGKILL');
is($node->safe_psql('postgres',
	"SELECT calls = 1 AND stats_reset > '$reset_before' FROM pklimit_stats WHERE datname = 'postgres'"),
	't', 'the crash restart started pklimit_stats again, with a later stats_reset');
is($node->safe_psql('postgres', "SELECT pklimit_count('before-kill')"), '3',
	'counts acknowledged before the kill are kept');
my $log = slurp_file($node->logfile);
like($log, qr/terminated by signal 9/, 'the kill caused a crash restart');
my $starts = () = $log =~ /database system is ready to accept connections/g;
cmp_ok($starts, '<=', 4, 'no restart loop');

# A call on several keys whose worker is killed after writing one key and
# before writing the other: a check constraint makes the second write wait
# on an advisory lock this test holds.
$node->safe_psql('postgres', q{
CREATE FUNCTION hold_second(k text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	IF k LIKE 'g:group-%' AND EXISTS (SELECT FROM public.platformkit_limits
	   WHERE key LIKE 'g:group-%' AND key <> k) THEN
		PERFORM pg_advisory_xact_lock(4242);
	END IF;
	RETURN true;
END $$;
ALTER TABLE platformkit_limits ADD CONSTRAINT hold_second CHECK (hold_second(key));
});
my $holder = $node->background_psql('postgres');
$holder->query_safe('SELECT pg_advisory_lock(4242)');
my $caller = $node->background_psql('postgres', on_error_stop => 0);
$caller->query_until(qr/go/, "\\echo go\nSET pklimit.timeout = '10min'; "
	  . "SELECT * FROM pklimit_check_all(ARRAY['group-a', 'group-b'], ARRAY[5, 5], ARRAY['36500 days', '36500 days']::interval[]);\n");
$pid = worker_pid($node);
ok($node->poll_query_until('postgres',
	"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = $pid", '1'),
	'the worker wrote one key of the call and waits to write the other');
kill 'KILL', $pid;
ok($node->poll_query_until('postgres', "SELECT pklimit_allow('after-group-kill', 10, '36500 days')"),
	'service comes back after the kill');
$node->safe_psql('postgres', 'ALTER TABLE platformkit_limits DROP CONSTRAINT hold_second');
is($node->safe_psql('postgres', "SELECT count(*) FROM platformkit_limits WHERE key LIKE 'g:group-%'"),
	'0', 'neither key of the killed call is recorded');
# both sessions ended with the crash restart; quitting them writes to a
# closed pipe
eval { $_->quit } for $caller, $holder;
is($node->safe_psql('postgres',
	"SELECT string_agg(key || '=' || count, ' ' ORDER BY key) FROM pklimit_check_all(ARRAY['group-a', 'group-b'], ARRAY[5, 5], ARRAY['36500 days', '36500 days']::interval[])"),
	'group-a=1 group-b=1', 'the same call afterwards records both keys');

$node->stop;
done_testing();
