# Purge and pg_cron: CREATE EXTENSION schedules the hourly job in pg_cron's
# database, never twice, and DROP EXTENSION removes it; pg_cron really runs
# the purge; other databases and servers without pg_cron are told what to do;
# a purge started while one runs returns at once, and calls are served
# during a purge.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('cron');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pklimit,pg_cron'
cron.database_name = 'postgres'
cron.use_background_workers = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_cron');

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

# --- pg_cron really runs the purge
$node->safe_psql('app', q{
	INSERT INTO platformkit_limits
	SELECT 'g:expired-' || i, clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1,
	       clock_timestamp() - interval '2 days' FROM generate_series(1, 2500) i});
$node->safe_psql('postgres', q{
	INSERT INTO platformkit_limits
	SELECT 'g:expired-' || i, clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1,
	       clock_timestamp() - interval '2 days' FROM generate_series(1, 2500) i});
$node->safe_psql('postgres', "SELECT pklimit_allow('live', 5, '36500 days')");
$node->safe_psql('postgres', "SELECT pklimit_schedule_purge('* * * * *')");
my $start = time();
ok($node->poll_query_until('postgres', q{
	SELECT count(*) > 0 FROM cron.job_run_details r JOIN cron.job j USING (jobid)
	WHERE j.jobname = 'pklimit-purge' AND r.status = 'succeeded'}, 't'),
	'pg_cron ran the purge job and it succeeded');
note(sprintf('the job ran after %.0f s', time() - $start));
is($node->safe_psql('postgres', "SELECT count(*) FROM platformkit_limits WHERE key LIKE 'g:expired-%'"),
	'0', 'the expired rows are gone');
is($node->safe_psql('postgres', "SELECT pklimit_count('live')"), '1', 'the open window stays');
is($node->safe_psql('postgres', 'SELECT deleted FROM pklimit_purge_status'), '2500',
	'pklimit_purge_status shows what the purge deleted');
is($node->safe_psql('app', "SELECT count(*) FROM platformkit_limits"), '2500',
	'the job purges only its own database');
$node->safe_psql('postgres', "SELECT pklimit_schedule_purge()");

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
