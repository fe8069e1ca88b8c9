# Purge and pg_cron: CREATE EXTENSION schedules the hourly job in pg_cron's
# database, never twice, and DROP EXTENSION removes it; pg_cron really runs
# the purge, both in its background workers and, with its default settings,
# over a connection to a server that listens on its socket only (the job is
# scheduled on the socket); a job pg_cron cannot connect to run is told at
# once, with the fix; pklimit_purge_status shows how long the oldest row has
# outlived its retention; other databases and servers without pg_cron are
# told what to do; a purge started while one runs returns at once, and
# calls are served during a purge.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use PklimitTest;

my $node = pklimit_cron_node('cron', "cron.use_background_workers = on\n");

# pg_cron as it comes: jobs run over a connection to cron.host (localhost,
# over TCP), and this server listens on its socket only
my $stock = pklimit_cron_node('stock');

my $jobs = "SELECT string_agg(format('%s|%s|%s', jobname, schedule, command), ',') FROM cron.job";

# --- scheduled on install, once, and gone on drop
my ($out, $err) = ('', '');
$node->psql('postgres', 'CREATE EXTENSION pklimit', stderr => \$err);
is($err, '', 'CREATE EXTENSION in the pg_cron database warns of nothing');
is($node->safe_psql('postgres', $jobs), 'pklimit-purge|0 * * * *|SELECT public.pklimit_purge()',
	'the hourly job pklimit-purge is scheduled');
for my $round (1 .. 3)
{
	$node->safe_psql('postgres', 'DROP EXTENSION pklimit');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM cron.job'), '0', "round $round: DROP EXTENSION removes the job");
	$node->safe_psql('postgres', 'CREATE EXTENSION pklimit');
	is($node->safe_psql('postgres', "SELECT count(*) FROM cron.job WHERE jobname = 'pklimit-purge'"), '1',
		"round $round: CREATE EXTENSION schedules exactly one job");
}
is($node->safe_psql('postgres', "SELECT pklimit_schedule_purge('0 * * * *') > 0"), 't', 'the helper schedules');
is($node->safe_psql('postgres', 'SELECT count(*) FROM cron.job'), '1', 'and never duplicates');

# --- pg_cron's default connection, to localhost over TCP, is refused: the
# job is scheduled on the server's socket, where it connects
my $err_stock = '';
$stock->psql('postgres', 'CREATE EXTENSION pklimit', stderr => \$err_stock);
is($err_stock, '', 'CREATE EXTENSION with pg_cron as it comes warns of nothing');
is($stock->safe_psql('postgres', "SELECT nodename FROM cron.job WHERE jobname = 'pklimit-purge'"),
	$stock->host, "the job runs on the server's socket");
is($stock->safe_psql('postgres',
	"SELECT pklimit_purge_job_error(jobid) IS NULL FROM cron.job WHERE jobname = 'pklimit-purge'"),
	't', 'where pg_cron can connect');
# a role that may connect neither way is told at once, with the fix
$stock->safe_psql('postgres', 'CREATE ROLE nocron SUPERUSER');
my $hba = slurp_file($stock->data_dir . '/pg_hba.conf');
open(my $fh, '>', $stock->data_dir . '/pg_hba.conf') or die;
print $fh "local all nocron reject\n$hba";
close $fh;
$stock->reload;
$stock->psql('postgres', "SET ROLE nocron; SELECT pklimit_schedule_purge()", stderr => \$err_stock);
like($err_stock, qr/WARNING:  pg_cron cannot connect to run the pklimit purge \(job \d+\): every run will fail/,
	'pklimit_schedule_purge warns when pg_cron cannot connect to run the job');
like($err_stock, qr/DETAIL:  pg_cron runs the job as role nocron in database postgres over a connection to localhost, port \d+, which fails: .*; over the server's socket \S+: .*rejects connection/s,
	'saying what it tried and why it failed');
like($err_stock, qr/HINT:  Set cron.use_background_workers = on in postgresql.conf and restart the server/,
	'and how to mend it');
$stock->safe_psql('postgres', 'DROP EXTENSION pklimit');
$stock->psql('postgres', "SET ROLE nocron; CREATE EXTENSION pklimit", stderr => \$err_stock);
like($err_stock, qr/WARNING:  pg_cron cannot connect to run the pklimit purge/,
	'and so does CREATE EXTENSION');
$stock->safe_psql('postgres', 'DROP EXTENSION pklimit; CREATE EXTENSION pklimit');
is($stock->safe_psql('postgres', "SELECT string_agg(username || '\@' || nodename, ',') FROM cron.job"),
	'postgres@' . $stock->host, 'one job again, on the socket');
# a role that is not a superuser, granted the helper, needs to read
# pg_cron's settings; then it schedules its own job and is told its
# connection was not checked, unless granted the check (it cannot move the
# job to the socket)
$stock->safe_psql('postgres', q{CREATE ROLE scheduler LOGIN;
	GRANT EXECUTE ON FUNCTION pklimit_schedule_purge(text) TO scheduler});
my ($ret_s, $out_s, $err_s) = $stock->psql('postgres', 'SELECT pklimit_schedule_purge() > 0',
	extra_params => [ '-U', 'scheduler' ]);
like($err_s, qr/ERROR:  pklimit_schedule_purge must read pg_cron's settings, which this role may not/,
	"a role that may not read pg_cron's settings is told so");
# pg_cron wants USAGE on its schema for a role to schedule jobs
$stock->safe_psql('postgres', 'GRANT pg_read_all_settings TO scheduler; GRANT USAGE ON SCHEMA cron TO scheduler');
($ret_s, $out_s, $err_s) = $stock->psql('postgres', 'SELECT pklimit_schedule_purge() > 0',
	extra_params => [ '-U', 'scheduler' ]);
is($out_s, 't', 'with pg_read_all_settings (and USAGE on schema cron) it schedules the purge');
like($err_s, qr/WARNING:  whether pg_cron can connect to run the pklimit purge \(job \d+\) was not checked/,
	'and is told it was not checked');
$stock->safe_psql('postgres', 'GRANT EXECUTE ON FUNCTION pklimit_purge_job_error(bigint) TO scheduler');
($ret_s, $out_s, $err_s) = $stock->psql('postgres', 'SELECT pklimit_schedule_purge() > 0',
	extra_params => [ '-U', 'scheduler' ]);
like($err_s, qr/WARNING:  pg_cron cannot connect to run the pklimit purge \(job \d+\): every run will fail/,
	'granted the check, it learns that its job cannot connect (localhost, over TCP)');
my $postgres_job = $stock->safe_psql('postgres', "SELECT jobid FROM cron.job WHERE username = 'postgres'");
($ret_s, $out_s, $err_s) = $stock->psql('postgres', "SELECT pklimit_purge_job_error($postgres_job)",
	extra_params => [ '-U', 'scheduler' ]);
like($err_s, qr/ERROR:  pg_cron has no job $postgres_job/, "but cannot try another role's job");
$stock->safe_psql('postgres', q{SELECT cron.unschedule(jobid) FROM cron.job WHERE username = 'scheduler'});

# --- another database: a warning with the exact call to run
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->psql('app', 'CREATE EXTENSION pklimit', stderr => \$err);
like($err, qr/WARNING:  pg_cron runs in database postgres, so the pklimit purge of database app is not scheduled/,
	'another database is warned');
my ($call) = $err =~ /run: (SELECT cron\.schedule_in_database\(.*\);)/;
ok($call, "the warning gives the call: " . ($call // 'none'));
$node->psql('app', 'SELECT pklimit_schedule_purge()', stderr => \$err);
like($err, qr/ERROR:  pg_cron runs in database postgres/, 'the helper explains instead of scheduling');
$node->safe_psql('postgres', $call);
is($node->safe_psql('postgres', "SELECT database || ' ' || command FROM cron.job WHERE jobname = 'pklimit-purge-app'"),
	'app SELECT public.pklimit_purge()', 'the call from the warning schedules the purge of app');
$node->safe_psql('postgres', "SELECT cron.unschedule('pklimit-purge-app')");

# --- pg_cron really runs the purge, on both servers: every minute, so one
# minute boundary serves all
my $expired = q{
	INSERT INTO platformkit_limits
	SELECT 'g:expired-' || i, clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1,
	       clock_timestamp() - interval '2 days' FROM generate_series(1, 2500) i};
$node->safe_psql('app', $expired);
for my $n ($node, $stock)
{
	$n->safe_psql('postgres', $expired);
	$n->safe_psql('postgres', "SELECT pklimit_allow('live', 5, '36500 days')");
}
like($stock->safe_psql('postgres', 'SELECT overdue FROM pklimit_purge_status'), qr/^(23|24):\d\d:\d\d/,
	'pklimit_purge_status: the oldest row has outlived the retention of 1 day by about a day');
is($stock->safe_psql('postgres', "SELECT overdue FROM pklimit_purge_status('3 days')"), '00:00:00',
	'and a retention of 3 days by nothing');
my $start = time();
$_->safe_psql('postgres', "SELECT pklimit_schedule_purge('* * * * *')") for ($node, $stock);
my $succeeded = q{
	SELECT count(*) > 0 FROM cron.job_run_details r JOIN cron.job j USING (jobid)
	WHERE j.jobname = 'pklimit-purge' AND r.status = 'succeeded'};
# each is scheduled hourly again as soon as it ran, so that no second run
# comes before the checks
ok($node->poll_query_until('postgres', $succeeded, 't'),
	'pg_cron ran the purge job in a background worker, and it succeeded');
$node->safe_psql('postgres', "SELECT pklimit_schedule_purge()");
ok($stock->poll_query_until('postgres', $succeeded, 't'),
	"and over a connection to the server's socket, with pg_cron's default settings");
$stock->safe_psql('postgres', "SELECT pklimit_schedule_purge()");
note(sprintf('the jobs ran after %.0f s', time() - $start));
for my $n ($node, $stock)
{
	my $name = $n->name;
	is($n->safe_psql('postgres', "SELECT count(*) FROM platformkit_limits WHERE key LIKE 'g:expired-%'"),
		'0', "$name: the expired rows are gone");
	is($n->safe_psql('postgres', "SELECT pklimit_count('live')"), '1', "$name: the open window stays");
	ok($n->poll_query_until('postgres', 'SELECT deleted FROM pklimit_purge_status', '2500'),
		"$name: pklimit_purge_status shows what the purge deleted");
	is($n->safe_psql('postgres', 'SELECT overdue FROM pklimit_purge_status'), '00:00:00',
		"$name: and no row outlives its retention");
}
$stock->stop;
is($node->safe_psql('app', "SELECT count(*) FROM platformkit_limits"), '2500',
	'the job purges only its own database');

# --- a second purge while one runs returns at once; calls are served meanwhile
$node->safe_psql('app', q{
	INSERT INTO platformkit_limits
	SELECT 'g:many-' || i, clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1,
	       clock_timestamp() - interval '2 days' FROM generate_series(1, 300000) i});
my $bg = $node->background_psql('app');
$bg->query_until(qr/started/, "\\echo started\nSELECT pklimit_purge();\n");
ok($node->poll_query_until('app', 'SELECT running FROM pklimit_purge_status'), 'the first purge runs');
my $t0 = time();
$node->psql('app', 'SELECT pklimit_purge()', stdout => \$out, stderr => \$err);
my $second = time() - $t0;
is($out, '0', 'a second purge deletes nothing');
like($err, qr/NOTICE:  a purge of this database is already running/, 'and says why');
is($node->safe_psql('app', 'SELECT running FROM pklimit_purge_status'), 't',
	sprintf('it returned while the first still runs (after %.2f s)', $second));
is($node->safe_psql('app', "SELECT status FROM pklimit_check('during-purge', 5, '36500 days')"), 'ok',
	'a call during the purge is answered by the store');
ok($node->poll_query_until('app', 'SELECT NOT running FROM pklimit_purge_status'), 'the first purge ends');
$bg->quit;
is($node->safe_psql('app', 'SELECT deleted FROM pklimit_purge_status'), '302500', 'it deleted every expired row');
is($node->safe_psql('app', 'SELECT count(*) FROM platformkit_limits'), '1', 'only the open window is left');

# --- a cancelled purge stops (a row locked by another transaction holds
# the purge up meanwhile, however fast the machine)
$node->safe_psql('app', q{
	INSERT INTO platformkit_limits
	SELECT 'g:more-' || i, clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1,
	       clock_timestamp() - interval '2 days' FROM generate_series(1, 300000) i});
my $locker = $node->background_psql('app');
$locker->query_safe("BEGIN; SELECT 1 FROM platformkit_limits WHERE key = 'g:more-1' FOR UPDATE");
$node->psql('app', "SET statement_timeout = '300ms'; SELECT pklimit_purge()", stderr => \$err);
like($err, qr/canceling statement due to statement timeout/, 'a purge can be cancelled');
ok($node->poll_query_until('app', 'SELECT NOT running FROM pklimit_purge_status'), 'and the worker stops it');
cmp_ok($node->safe_psql('app', 'SELECT count(*) FROM platformkit_limits'), '>', 1000,
	'before deleting everything');
$locker->query_safe('ROLLBACK');
$locker->quit;
$node->stop;

# --- without pg_cron: installs, and says the purge is unscheduled
my $plain = PostgreSQL::Test::Cluster->new('no_cron');
$plain->init;
$plain->append_conf('postgresql.conf', "shared_preload_libraries = 'pklimit'\n");
$plain->start;
is($plain->psql('postgres', 'CREATE EXTENSION pklimit', stderr => \$err), 0, 'installs without pg_cron');
like($err, qr/WARNING:  pg_cron is not loaded, so the pklimit purge is not scheduled/, 'and warns');
$plain->stop;
done_testing();
