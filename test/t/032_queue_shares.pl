# No database takes another's share of the queue.  A plain role floods
# its own database with calls on 16 keys at a time, each allowed to wait
# pklimit.timeout = 10min, from 64 sessions (pgbench): first while that
# database's worker is stalled (SIGSTOP), then while it has none (the
# role's parallel queries hold every free worker slot), and a database
# floods itself.  The calls of every other database whose worker runs,
# and of those of pklimit.databases, are answered by their worker all
# along; the flooding database sees its share and no more, and has its
# row in pklimit_stats, queue_depth included, before any of its calls is
# answered.  A database that gets its worker while another one's requests
# fill the whole queue takes the places of the youngest of them.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = PostgreSQL::Test::Cluster->new('queue_shares');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pklimit'\nmax_connections = 120\n");
$node->start;
for my $db ('victim', 'other', 'attacker')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'SET client_min_messages = error; CREATE EXTENSION pklimit');
}
$node->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
$node->safe_psql('attacker', q{
	CREATE TABLE filler AS SELECT g FROM generate_series(1, 100000) g;
	ALTER TABLE filler SET (parallel_workers = 8);
	GRANT SELECT ON filler TO plain;
});
# Worker slots: the logical replication launcher, the static workers of
# victim and of late (a database that does not exist yet), other's and
# attacker's workers, and two more.  The queue: 1024 slots, a share of
# 1024 / pklimit.max_workers (8) = 128 each.
$node->append_conf('postgresql.conf', qq{
pklimit.databases = 'victim, late'
max_worker_processes = 7
max_parallel_workers = 8
});
$node->restart;

my $share = 1024 / 8;
my $depth = "SELECT coalesce((SELECT queue_depth FROM pklimit_stats WHERE datname = '%s'), -1)";
my $workers = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pklimit worker' AND datname = '%s'";
ok($node->poll_query_until('postgres', sprintf($workers, 'victim'), '1'), "victim's static worker runs");
for my $db ('other', 'attacker')
{
	$node->safe_psql($db, "SELECT pklimit_allow('start', 10, '1 day')");
	ok($node->poll_query_until('postgres', sprintf($workers, $db), '1'), "$db has its worker");
}

# --- a database of pklimit.databases whose worker is not there yet: its
# waiting call has its row, and is answered once the worker comes
ok($node->wait_for_log(qr/database "late" does not exist/),
	"late's static worker cannot start before the database exists");
$node->safe_psql('postgres', 'CREATE DATABASE late');
my $late = $node->background_psql('late');
$late->query_safe('SET client_min_messages = error; CREATE EXTENSION pklimit');
my $offset = -s $node->logfile;
$node->safe_psql('postgres', 'ALTER DATABASE late ALLOW_CONNECTIONS false');
# its next start fails; one that got in before is asked to leave
$node->wait_for_log(qr/database "late" is not currently accepting connections/, $offset);
$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
	  . " WHERE backend_type = 'pklimit worker' AND datname = 'late'");
ok($node->poll_query_until('postgres', sprintf($workers, 'late'), '0'), 'late has no worker');
$late->query_until(qr/waiting/, "SET pklimit.timeout = '5min';\n\\echo waiting\nSELECT 'count=' || pklimit_count('k');\n");
ok($node->poll_query_until('victim', sprintf($depth, 'late'), '1'),
	'a database whose calls wait has its row in pklimit_stats, with their queue_depth, before any answer');
is($node->safe_psql('victim',
	"SELECT concat_ws('|', calls, worker_pid IS NULL) FROM pklimit_stats WHERE datname = 'late'"),
	'0|t', 'no call of it answered yet, and no worker');
$node->safe_psql('postgres', 'ALTER DATABASE late ALLOW_CONNECTIONS true');
like($late->query_until(qr/count=\d+/, ''), qr/count=0/, 'its worker starts and answers the call');
$late->quit;

# The flood: 64 sessions of plain, each call on 16 keys allowed to wait
# 10 minutes (the settings any role may set), retried every 10 ms when
# answered without its store.
my $script = "$PostgreSQL::Test::Utils::tmp_check/flood.sql";
PostgreSQL::Test::Utils::append_to_file($script, q{SET client_min_messages = error;
SET pklimit.timeout = '10min';
SELECT pklimit_allow_all(array(SELECT 'flood' || g FROM generate_series(1, 16) g),
                         array_fill(1000000::bigint, ARRAY[16]), array_fill('1 day'::interval, ARRAY[16]));
\sleep 10 ms
});
sub flood
{
	my ($db) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[ 'pgbench', '-n', '-c', '64', '-j', '2', '-T', '900', '-f', $script,
			'-h', $node->host, '-p', $node->port, '-U', 'plain', $db ],
		'>', \$out, '2>', \$err);
}

sub stop_flood
{
	my ($pgbench) = @_;
	$pgbench->kill_kill;
	$node->safe_psql('postgres',
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'plain' AND query NOT LIKE '%filler%'");
	$node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE usename = 'plain' AND query NOT LIKE '%filler%'", '0');
}

# 20 calls on one key each and one on 16 keys, in database $db: their
# statuses, run-length encoded ("ok*36"); each may wait 30 s, however busy
# the flood keeps the machine
my $calls = q{
	SET pklimit.timeout = '30s';
	SELECT string_agg(s || '*' || n, ',' ORDER BY s) FROM (
		SELECT s, count(*) n FROM (
			SELECT c.status s FROM generate_series(1, 20) i,
				LATERAL pklimit_check('served' || i, 1000, '1 day') c
			UNION ALL
			SELECT status FROM pklimit_check_all(array(SELECT 'group' || g FROM generate_series(1, 16) g),
				array_fill(1000::bigint, ARRAY[16]), array_fill('1 day'::interval, ARRAY[16]))) a
		GROUP BY s) b};

# --- attacker's worker stalls: attacker fills its share and what the other
# databases' shares leave, no more
my $attacker_pid = $node->safe_psql('postgres', sprintf(
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker' AND datname = '%s'", 'attacker'));
kill 'STOP', $attacker_pid;
my $pgbench = flood('attacker');
# the databases with a worker: victim, late, other and attacker
ok($node->poll_query_until('victim', sprintf($depth, 'attacker'), 1024 - 3 * $share),
	'a flood of a database whose worker stalls holds the queue but for the shares of the other three databases with a worker ('
	  . (1024 - 3 * $share) . ' slots)');
ok($node->poll_query_until('attacker', q{SELECT queue_full > 0 FROM pklimit_stats WHERE datname = 'attacker'}),
	'and its calls past that are answered queue_full');
is($node->safe_psql('victim', $calls), 'ok*36', 'the calls of victim (pklimit.databases) are answered by its worker');
is($node->safe_psql('other', $calls), 'ok*36', "and other's (a worker started on demand)");
is($node->safe_psql('victim', sprintf($depth, 'attacker')), 1024 - 3 * $share,
	'while the flood still holds what it held');
stop_flood($pgbench);
kill 'CONT', $attacker_pid;
ok($node->poll_query_until('victim', sprintf($depth, 'attacker'), '0'), "the flood's calls are gone");

# --- attacker has no worker: plain's parallel queries hold every free slot
$node->safe_psql('postgres', "SELECT pg_terminate_backend($attacker_pid)");
ok($node->poll_query_until('postgres', sprintf($workers, 'attacker'), '0'), "attacker's worker is gone");
# the postmaster frees its slot a moment after: a parallel query started
# before then gets one worker fewer, and is started again
my $parallel = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'parallel worker'";
my $filler;
for my $try (1 .. 20)
{
	$filler = $node->background_psql('attacker', on_error_stop => 0, extra_params => [ '-U', 'plain' ]);
	$filler->query_until(qr/go/, "\\echo go\n"
		  . "SET max_parallel_workers_per_gather = 8; SET parallel_setup_cost = 0;"
		  . " SET parallel_tuple_cost = 0; SET parallel_leader_participation = off;\n"
		  . "SELECT count(*) FROM filler WHERE pg_sleep(0.01) IS NOT NULL;\n");
	$node->poll_query_until('postgres', "SELECT ($parallel) >= 2");
	last if $node->safe_psql('postgres', $parallel) eq '3';
	$node->safe_psql('postgres',
		"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%FROM filler%' AND pid <> pg_backend_pid()");
	$filler->quit;
	$node->poll_query_until('postgres', $parallel, '0');
}
is($node->safe_psql('postgres', $parallel), '3', "plain's parallel query holds the three free worker slots");
$pgbench = flood('attacker');
ok($node->poll_query_until('attacker', q{SELECT no_worker > 100 FROM pklimit_stats WHERE datname = 'attacker'}),
	'a flood of a database that can get no worker is answered no_worker at once');
is($node->safe_psql('victim', $calls), 'ok*36', "victim's calls are answered by its worker");
is($node->safe_psql('other', $calls), 'ok*36', "and other's");
is(join(',', map { $node->safe_psql('victim', sprintf($depth, 'attacker')) } 1 .. 5), '0,0,0,0,0',
	'the flood holds no slot of the queue');
stop_flood($pgbench);
$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%FROM filler%' AND pid <> pg_backend_pid()");
$filler->quit;

# --- a database floods itself: victim's worker stalls; only victim's
# calls wait
my $victim_pid = $node->safe_psql('postgres', sprintf(
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker' AND datname = '%s'", 'victim'));
kill 'STOP', $victim_pid;
$pgbench = flood('victim');
# the databases with a worker: victim, late and other
ok($node->poll_query_until('victim', sprintf($depth, 'victim'), 1024 - 2 * $share),
	'a database flooding itself holds the queue but for the shares of the other two with a worker ('
	  . (1024 - 2 * $share) . ' slots)');
is($node->safe_psql('other', $calls), 'ok*36', "other's calls are still answered by its worker");
is($node->safe_psql('victim', "SET pklimit.timeout = '1s'; SELECT status FROM pklimit_check('own', 10, '1 day')"),
	'queue_full', "victim's own calls are what its flood holds up");
stop_flood($pgbench);
kill 'CONT', $victim_pid;
ok($node->poll_query_until('victim', sprintf($depth, 'victim'), '0'), 'the flood is gone');
is($node->safe_psql('victim', $calls), 'ok*36', "and victim's calls are answered again");
$node->stop;

# --- one database alone fills the whole queue; another that gets its
# worker then takes the places of the youngest of those requests
my $two = PostgreSQL::Test::Cluster->new('two_databases');
$two->init;
$two->append_conf('postgresql.conf', "shared_preload_libraries = 'pklimit'\nmax_connections = 120\n");
$two->start;
for my $db ('alone', 'newcomer')
{
	$two->safe_psql('postgres', "CREATE DATABASE $db");
	$two->safe_psql($db, 'SET client_min_messages = error; CREATE EXTENSION pklimit');
}
$two->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
$node = $two;
$two->safe_psql('alone', "SELECT pklimit_allow('start', 10, '1 day')");
my $alone_pid = $two->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker' AND datname = 'alone'");
kill 'STOP', $alone_pid;
$pgbench = flood('alone');
ok($two->poll_query_until('alone', sprintf($depth, 'alone'), '1024'),
	'a database alone may fill the whole queue');
is($two->safe_psql('alone', "SELECT queue_full FROM pklimit_stats WHERE datname = 'alone'"), '0',
	'with calls on 16 keys from 64 sessions, none refused');
is($two->safe_psql('newcomer', $calls), 'ok*36',
	"a database that then gets its worker has its calls answered by it");
is($two->safe_psql('alone', sprintf($depth, 'alone')), 1024 - 16,
	"in the places of the youngest of the other's requests (one call on 16 keys)");
cmp_ok($two->safe_psql('alone', "SELECT queue_full FROM pklimit_stats WHERE datname = 'alone'"), '>', 0,
	'which were answered queue_full');
stop_flood($pgbench);
kill 'CONT', $alone_pid;
$two->stop;
done_testing();
