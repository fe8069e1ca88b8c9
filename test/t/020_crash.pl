# Crashes and restarts: every acknowledged count survives an immediate
# shutdown (crash recovery) and a worker killed with SIGKILL (the
# postmaster's crash restart); service comes back by itself.
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
kill 'KILL', $pid;
ok($node->poll_query_until('postgres', "SELECT pklimit_allow('after-kill', 10, '36500 days')"),
	'service comes back after a worker is killed with SIGKILL');
is($node->safe_psql('postgres', "SELECT pklimit_count('before-kill')"), '3',
	'counts acknowledged before the kill are kept');
my $log = slurp_file($node->logfile);
like($log, qr/terminated by signal 9/, 'the kill caused a crash restart');
my $starts = () = $log =~ /database system is ready to accept connections/g;
cmp_ok($starts, '<=', 4, 'no restart loop');

$node->stop;
done_testing();
