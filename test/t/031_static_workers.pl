# Worker slots nobody else can take: a database named in pklimit.databases
# gets its worker from server start, which the postmaster starts again if it
# ends, and a started worker keeps its slot (pklimit.worker_idle_timeout is
# 0 by default).  A plain role running parallel queries that take every
# other max_worker_processes slot switches neither off; a database with no
# worker yet answers no_worker, and the server log says why.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = pklimit_node('static_workers');
for my $db ('app', 'other')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'SET client_min_messages = error; CREATE EXTENSION pklimit');
}
$node->safe_psql('postgres', q{
	CREATE ROLE plain LOGIN;
	CREATE TABLE filler AS SELECT g FROM generate_series(1, 100000) g;
	ALTER TABLE filler SET (parallel_workers = 8);
	GRANT SELECT ON filler TO plain;
});
# slots: the logical replication launcher, app's static worker, and two more
$node->append_conf('postgresql.conf',
	"pklimit.databases = 'app'\nmax_worker_processes = 4\nmax_parallel_workers = 8\n");
$node->restart;

my $workers = "SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_stat_activity"
  . " WHERE backend_type = 'pklimit worker'";
ok($node->poll_query_until('postgres', $workers, 'app'),
	"app's worker runs from server start, before any call");
is($node->safe_psql('postgres', 'SHOW pklimit.worker_idle_timeout'), '0',
	'a started worker keeps its slot by default');
is($node->safe_psql('postgres', "SELECT pklimit_allow('k', 10, '36500 days')"), 't',
	'a call in postgres starts its worker');
is($node->safe_psql('postgres', $workers), 'app,postgres', 'which stays');

# A plain role takes every slot left with a parallel query.
my $filler = $node->background_psql('postgres', on_error_stop => 0);
$filler->query_until(qr/go/, "\\echo go\n"
	  . "SET max_parallel_workers_per_gather = 8; SET parallel_setup_cost = 0;"
	  . " SET parallel_tuple_cost = 0; SET parallel_leader_participation = off;\n"
	  . "SELECT count(*) FROM filler WHERE pg_sleep(0.01) IS NOT NULL;\n");
ok($node->poll_query_until('postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'parallel worker'", '1'),
	'a parallel query of a plain role holds the last free worker slot');

my ($out, $err) = timed_psql($node, 'app',
	"SELECT string_agg(c.status, ',') FROM generate_series(1, 5) i, LATERAL pklimit_check(left('k' || i, 1), 10, '36500 days') c");
is($out, 'ok,ok,ok,ok,ok', "app's calls are still served");
($out) = timed_psql($node, 'postgres',
	"SELECT string_agg(c.status, ',') FROM generate_series(1, 5) i, LATERAL pklimit_check(left('k' || i, 1), 10, '36500 days') c");
is($out, 'ok,ok,ok,ok,ok', "and postgres's, whose worker kept its slot");
($out, $err) = timed_psql($node, 'other',
	"SET pklimit.timeout = '200ms'; SELECT allowed, status FROM pklimit_check('k', 10, '36500 days')");
is($out, 't|no_worker', 'a database with no worker yet gets none: no_worker');
like(slurp_file($node->logfile), qr/LOG:  pklimit could not start a worker for database "other"/,
	'and the server log says so');

# The static worker is started again if it ends.
my $app_pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker' AND datname = 'app'");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($app_pid)");
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pklimit worker'"
	  . " AND datname = 'app' AND pid <> $app_pid"),
	"app's worker is started again after it was terminated");
is($node->safe_psql('app', "SELECT pklimit_count('k')"), '5', 'and serves app as before');

$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%FROM filler%' AND pid <> pg_backend_pid()");
$filler->quit;
$node->stop;
done_testing();
