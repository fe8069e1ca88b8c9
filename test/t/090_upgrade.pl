# Upgrade: one library serves a database still at 0.1.0 beside one at the
# newest version; the update from 0.1.0 to 0.2.0, run while calls go on,
# keeps every row, count and the pg_cron job, and the walk on to the newest
# version (the control file's default_version, through every update script
# after 0.2.0) leaves pklimit's objects identical to a fresh install of it;
# the update refuses to go on beside an object planted under one of
# pklimit's names.  From 0.2.0 to 0.3.0 (docs/algorithms.md): a 0.2.0
# install updated, while calls go on, has the objects of a fresh install;
# its rows are fixed windows that keep counting, calls of the new algorithms
# included; a view or SQL function of a user on one of the four replaced
# recording functions makes the update fail with 2BP01, naming them; the
# privileges of the four go to their successors, default privileges
# included.  The memory path of 0.3.0 (docs/memory.md): the recording
# functions and pklimit_decrement take durable as their last parameter;
# pklimit_memory_stats(), new, gets pklimit_stats()'s privileges, so a role
# that reads the view pklimit_stats, replaced in place with the memory
# columns, still reads it, and a user's view on it stays; a function
# planted under its name makes the update fail.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Digest::SHA;
use PklimitTest;

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;

# Released scripts are frozen: they are installed exactly as released.
my %released = (
	'pklimit--0.1.0.sql' => '96a57631528e7f47bb48db7de5a68f1abbbf17ca01e74d94bc06a80071cb55f0',
	'pklimit--0.2.0.sql' => '42b70c2f514e9d9b7826e52af2e1bc09597d22f68f138ef9d9855eed3b3dec11',
	'pklimit--0.1.0--0.2.0.sql' => '8311f5496990d6a61272a61b069ccdfecf3cebcf125fa8d796563f35e8c1bcb8',
	'pklimit--0.2.0--0.3.0.sql' => '3e23207c470add2d3ec4b5f0d646a70629bb44203327ab252a792e1e36fae1a2');
my $extension_dir = $node->config_data('--sharedir') . '/extension';
for my $script (sort keys %released)
{
	is(Digest::SHA->new(256)->addfile("$extension_dir/$script")->hexdigest, $released{$script},
		"the installed $script is the released one");
}
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pklimit,pg_cron'\ncron.database_name = 'old'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE old');
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('old', 'CREATE EXTENSION pg_cron');
$node->safe_psql('old', "CREATE EXTENSION pklimit VERSION '0.1.0'");
$node->safe_psql('fresh', 'SET client_min_messages = error; CREATE EXTENSION pklimit');
my $version = "SELECT extversion FROM pg_extension WHERE extname = 'pklimit'";
my $newest = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'pklimit'");
is($node->safe_psql('old', $version), '0.1.0', 'database old is at 0.1.0');
is($node->safe_psql('fresh', $version), $newest, "a new install is the newest version, $newest");

# --- one library serves both versions at once
my $calls = "SELECT string_agg(pklimit_allow('k' || i % 3, 4, '36500 days')::text, ',' ORDER BY i)"
  . " FROM generate_series(1, 15) i";
my $expected = join(",", map { $_ <= 12 ? "true" : "false" } 1 .. 15);
is($node->safe_psql('old', $calls), $expected, 'calls on the 0.1.0 database answer as always');
is($node->safe_psql('fresh', $calls), $expected, 'and on the newest');
$node->safe_psql('old', "SET platformkit.tenant = 'acme'; SELECT pklimit_allow('login:bob', 5, '1 hour')");
my $rows = 'SELECT key, window_start, window_end, count, updated_at FROM platformkit_limits ORDER BY key';
my $rows_before = $node->safe_psql('old', $rows);
my $job = "SELECT jobid, jobname, schedule, command, database, username, active FROM cron.job";
my $job_before = $node->safe_psql('old', $job);
like($job_before, qr/pklimit-purge\|0 \* \* \* \*\|SELECT public.pklimit_purge\(\)\|old/,
	'0.1.0 scheduled its purge with pg_cron');

# 0.1.0 let SELECT, INSERT, UPDATE and DELETE be granted on the table
# (written into the catalog here, as the 0.1.0 library let a GRANT do);
# 0.2.0 takes them back, but SELECT of a role that bypasses row level
# security
$node->safe_psql('postgres', 'CREATE ROLE app');
$node->safe_psql('postgres', 'CREATE ROLE auditor BYPASSRLS');
$node->safe_psql('old', "UPDATE pg_class SET relacl = relacl || format('app=arwd/%s', current_user)::aclitem"
	  . " || format('auditor=r/%s', current_user)::aclitem WHERE oid = 'platformkit_limits'::regclass");
my $app_privileges = "SELECT string_agg(p, ',') FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) p"
  . " WHERE has_table_privilege('app', 'platformkit_limits', p)";
is($node->safe_psql('old', $app_privileges), 'SELECT,INSERT,UPDATE,DELETE', 'a role holds what 0.1.0 let it hold');
# a grant of the DBA's on a function the update replaces is carried over
$node->safe_psql('old', 'GRANT EXECUTE ON FUNCTION pklimit_purge_status() TO app');
# 0.1.0 scheduled the job on cron.host, localhost over TCP, where this
# server does not listen
is($node->safe_psql('old', "SELECT nodename FROM cron.job WHERE jobname = 'pklimit-purge'"), 'localhost',
	'0.1.0 scheduled its purge on cron.host');

# --- the update, while two sessions keep calling on the 0.1.0 database
my $per_session = 20000;
my ($at_update, $counted) = update_under_load($node, 'old', '0.2.0', $per_session);
cmp_ok($at_update, '<', 2 * $per_session, "the update committed while calls went on ($at_update recorded by then)");
is($counted, 2 * $per_session, 'every call made across the update was recorded');
is($node->safe_psql('old', $version), '0.2.0', 'database old is now at 0.2.0');
is($node->safe_psql('old',
	"SELECT concat_ws('|', calls, allowed, refused, unavailable) FROM pklimit_stats WHERE datname = 'old'"),
	'40016|40013|3|0', 'pklimit_stats, new in 0.2.0, counted every call, those made at 0.1.0 included');
is($node->safe_psql('old', $app_privileges), '', 'the update took back what 0.2.0 lets nobody but the owner hold');
is($node->safe_psql('old', "SELECT has_table_privilege('auditor', 'platformkit_limits', 'SELECT')"), 't',
	'but a SELECT of a role that bypasses row level security');
$node->safe_psql('old', "REVOKE ALL ON platformkit_limits FROM auditor");
like($node->safe_psql('old',
	"SELECT pklimit_purge_job_error(jobid) FROM cron.job WHERE jobname = 'pklimit-purge'"),
	qr/localhost.*failed/, 'after the update, pklimit_purge_job_error tells that the job of 0.1.0 cannot run');
is($node->safe_psql('old', "SELECT has_function_privilege('app', 'pklimit_purge_status(interval)', 'EXECUTE')"), 't',
	'the grant on the replaced pklimit_purge_status is carried over');
$node->safe_psql('old', 'REVOKE ALL ON FUNCTION pklimit_purge_status(interval) FROM app');

# --- on to the newest version: nothing lost, and the same objects as a
# fresh install
$node->safe_psql('old', 'SET client_min_messages = warning; ALTER EXTENSION pklimit UPDATE');
is($node->safe_psql('old', $version), $newest, "database old is now at the newest version, $newest");
$node->safe_psql('old', "SELECT pklimit_forget('during')");
is($node->safe_psql('old', $rows), $rows_before, 'every row and count is kept');
is($node->safe_psql('old', $job), $job_before, 'the pg_cron job is kept');
$node->safe_psql('old', 'SELECT pklimit_schedule_purge()');
is($node->safe_psql('old', "SELECT nodename FROM cron.job WHERE jobname = 'pklimit-purge'"), $node->host,
	"pklimit_schedule_purge() moves it to the server's socket, where pg_cron can connect");
is($node->safe_psql('old', $job), $job_before, 'the same job');
my $updated = extension_catalog($node, 'old');
my $fresh = extension_catalog($node, 'fresh');
like($fresh, qr/^function public\.pklimit_allow\(text,bigint,interval,bigint,boolean,interval,text,boolean,text,text\)/m,
	'the catalog comparison sees the functions');
like($fresh, qr/^function public\.pklimit_decrement\(text,bigint,boolean\)/m, 'and pklimit_decrement');
like($fresh, qr/^function public\.pklimit_memory_stats\(\)/m, 'and pklimit_memory_stats');
like($fresh, qr/^view public\.pklimit_stats .*memory_calls.*flush_lag_ms/ms, 'and the view with its memory columns');
like($fresh, qr/^column public\.platformkit_limits\.blocked_until timestamp with time zone/m,
	'and the column 0.2.0 adds');
like($fresh, qr/^column public\.platformkit_limits\.count bigint/m, 'and the columns');
like($fresh, qr/^column public\.platformkit_limits\.expires_at timestamp with time zone/m,
	'and the columns 0.3.0 adds');
like($fresh, qr/^index CREATE INDEX platformkit_limits_purge_idx .*\(GREATEST\(window_end, blocked_until, expires_at\)\)$/m,
	'and the purge index of 0.3.0');
is($updated, $fresh, 'the updated database has the objects of a fresh install');
is($node->safe_psql('old', q{SELECT count(*), count(*) FILTER (WHERE algorithm = 'fixed' AND max_count IS NULL
	AND previous_count IS NULL AND expires_at IS NULL) FROM platformkit_limits}), '4|4',
	'the rows written before 0.3.0 are fixed windows, with NULL in the columns it adds');
is($node->safe_psql('old', "SELECT pklimit_allow('after', 1, '1 hour')"), 't', 'calls go on after the update');
is($node->safe_psql('old', "SELECT allowed FROM pklimit_check('after', 1, '1 hour', block => '1 day')"), 'f',
	'and take what 0.2.0 adds');

# --- the privileges of a replaced function are carried over, as a user's
$node->safe_psql('postgres', 'CREATE DATABASE carried');
$node->safe_psql('carried', "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.1.0'");
$node->safe_psql('carried', q{
	REVOKE ALL ON FUNCTION pklimit_allow(text, bigint, interval) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION pklimit_allow(text, bigint, interval) TO app;
	REVOKE ALL ON FUNCTION pklimit_check(text, bigint, interval) FROM PUBLIC});
# a setting of the update's own name, planted on the database, is not read
$node->safe_psql('postgres', "ALTER DATABASE carried SET pklimit_update.acl_pklimit_check_all = '{app=X/postgres}'");
$node->safe_psql('carried', "ALTER EXTENSION pklimit UPDATE TO '0.2.0'");
is($node->safe_psql('carried', q{
	SELECT string_agg(p.proname || ':' || has_function_privilege('app', p.oid, 'EXECUTE')
	  || ':' || has_function_privilege('public', p.oid, 'EXECUTE'), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_allow_all', 'pklimit_check_all')
	   AND p.pronargs = 6}),
	'pklimit_allow:true:false pklimit_allow_all:true:false pklimit_check:false:false pklimit_check_all:false:false',
	'a replaced function keeps the privileges of the one it replaces, and its call on several keys gets them');
is($node->safe_psql('carried', q{
	SELECT count(*) FROM pg_init_privs i JOIN pg_proc p ON p.oid = i.objoid
	 WHERE i.classoid = 'pg_proc'::regclass
	   AND p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_allow_all', 'pklimit_check_all')}),
	'0', 'as the grants of a user, which pg_dump dumps');

# --- a replaced function with the default privileges keeps them, even when
# default privileges set after the 0.1.0 install take EXECUTE from PUBLIC
$node->safe_psql('postgres', 'CREATE DATABASE defaults');
$node->safe_psql('defaults', "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.1.0'");
$node->safe_psql('defaults', 'ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC');
$node->safe_psql('defaults', 'ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO app');
$node->safe_psql('defaults', "ALTER EXTENSION pklimit UPDATE TO '0.2.0'");
is($node->safe_psql('defaults', q{
	SELECT string_agg(p.proname || ':' || has_function_privilege('app', p.oid, 'EXECUTE'), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE p.proname IN ('pklimit_purge_job_error', 'pklimit_purge_status', 'pklimit_schedule_purge')}),
	'pklimit_purge_job_error:false pklimit_purge_status:false pklimit_schedule_purge:false',
	'default privileges that grant EXECUTE give nothing on the functions the update makes');
is($node->safe_psql('defaults', q{
	SELECT string_agg(p.proname || ':' || has_function_privilege('app', p.oid, 'EXECUTE'), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_allow_all', 'pklimit_check_all')
	   AND p.pronargs = 6}),
	'pklimit_allow:true pklimit_allow_all:true pklimit_check:true pklimit_check_all:true',
	'default privileges that take EXECUTE from PUBLIC do not take the replaced functions away from it');
is($node->safe_psql('defaults', q{SET ROLE app; SELECT pklimit_allow('k', 1, '1 hour')}), 't',
	'a plain role still records after the update');

# --- a view of a user on a replaced function makes the update fail
$node->safe_psql('postgres', 'CREATE DATABASE viewed');
$node->safe_psql('viewed', "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.1.0'");
$node->safe_psql('viewed', "CREATE VIEW login_check AS SELECT * FROM pklimit_check('login', 5, '1 hour')");
my ($ret, $out, $err) = $node->psql('viewed', "ALTER EXTENSION pklimit UPDATE TO '0.2.0'");
like($err, qr/cannot drop function pklimit_check\(text,bigint,interval\) because other objects depend on it/,
	'a view on a replaced function blocks the update, naming it');
is($node->safe_psql('viewed', $version), '0.1.0', 'which changed nothing');
$node->safe_psql('viewed', "DROP VIEW login_check; ALTER EXTENSION pklimit UPDATE TO '0.2.0'");
is($node->safe_psql('viewed', $version), '0.2.0', 'without the view the update goes through');

# --- an overload planted before a 0.1.0 install (whose script does not
# check) makes the update fail: it would take the place of pklimit's
# function in a call
$node->safe_psql('postgres', 'CREATE DATABASE planted');
$node->safe_psql('planted', 'GRANT CREATE ON SCHEMA public TO app');
$node->safe_psql('planted', q{SET ROLE app;
	CREATE FUNCTION public.pklimit_allow(k text, m integer, w interval) RETURNS boolean
	LANGUAGE sql AS $$SELECT true$$});
$node->safe_psql('planted', "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.1.0'");
($ret, $out, $err) = $node->psql('planted', "ALTER EXTENSION pklimit UPDATE TO '0.2.0'");
like($err, qr/schema public has objects with pklimit's names that are not pklimit's: function pklimit_allow\(text,integer,interval\)/,
	'an overload planted at 0.1.0 makes the update fail, naming it');
is($node->safe_psql('planted', $version), '0.1.0', 'which changed nothing');
$node->safe_psql('planted', 'DROP FUNCTION public.pklimit_allow(text, integer, interval)');
# so does an index of the name of 0.2.0's purge index, on another table
$node->safe_psql('planted', q{SET ROLE app; CREATE TABLE other (t timestamptz);
	CREATE INDEX platformkit_limits_purge_idx ON other (t)});
($ret, $out, $err) = $node->psql('planted', "ALTER EXTENSION pklimit UPDATE TO '0.2.0'");
like($err, qr/schema public has objects with pklimit's names that are not pklimit's: relation platformkit_limits_purge_idx/,
	'an index planted under the name of the purge index makes the update fail, naming it');
is($node->safe_psql('planted', $version), '0.1.0', 'which changed nothing either');
$node->safe_psql('planted', "DROP TABLE other; ALTER EXTENSION pklimit UPDATE TO '0.2.0'");
is($node->safe_psql('planted', "SELECT pklimit_allow('k', 0, '1 hour')"), 'f',
	'without it the update goes through, and pklimit answers');

# --- a column blocked_until added to the 0.1.0 table by hand, of another
# type, is not taken for pklimit's
$node->safe_psql('postgres', 'CREATE DATABASE column_added');
$node->safe_psql('column_added', q{
	SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.1.0';
	ALTER TABLE platformkit_limits ADD COLUMN blocked_until text});
($ret, $out, $err) = $node->psql('column_added', "ALTER EXTENSION pklimit UPDATE TO '0.2.0'");
like($err, qr/column "blocked_until" of platformkit_limits is not pklimit's/,
	'a column blocked_until of another type makes the update fail');
is($node->safe_psql('column_added', $version), '0.1.0', 'which changed nothing');

# --- from 0.2.0 to 0.3.0: a 0.2.0 install, with rows, updated while two
# sessions keep calling, has the objects of a fresh install, and its rows
# keep counting as the fixed windows they are
$node->safe_psql('postgres', 'CREATE DATABASE v020');
$node->safe_psql('v020', "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.2.0'");
is($node->safe_psql('v020', $version), '0.2.0', 'database v020 is at 0.2.0');
is($node->safe_psql('v020', q{SELECT pklimit_allow('kept', 3, '36500 days'), pklimit_allow('kept', 3, '36500 days'),
	pklimit_allow('banned', 0, '36500 days', block => '36500 days')}), 't|t|f',
	'calls at 0.2.0: a key with 2 of 3 events, a blocked key');
my $v020_rows = 'SELECT key, window_start, window_end, count, updated_at, blocked_until'
  . ' FROM platformkit_limits WHERE key <> \'g:during\' ORDER BY key';
my $v020_before = $node->safe_psql('v020', $v020_rows);
($at_update, $counted) = update_under_load($node, 'v020', '0.3.0', $per_session);
cmp_ok($at_update, '<', 2 * $per_session,
	"the update to 0.3.0 committed while calls went on ($at_update recorded by then)");
is($counted, 2 * $per_session, 'every call made across the update to 0.3.0 was recorded');
$node->safe_psql('v020', "SELECT pklimit_forget('during')");
is($node->safe_psql('v020', $version), '0.3.0', 'database v020 is now at 0.3.0');
$node->safe_psql('postgres', 'CREATE DATABASE fresh030');
$node->safe_psql('fresh030', "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.3.0'");
is(extension_catalog($node, 'v020'), extension_catalog($node, 'fresh030'),
	'the 0.2.0 install updated to 0.3.0 has the objects of a fresh install of 0.3.0');
$node->safe_psql('postgres', 'DROP DATABASE fresh030');
is($node->safe_psql('v020', $v020_rows), $v020_before, 'every row of 0.2.0 is kept');
is($node->safe_psql('v020', q{SELECT string_agg(concat_ws(':', key, algorithm, max_count IS NULL, previous_count IS NULL,
	expires_at IS NULL), ' ' ORDER BY key) FROM platformkit_limits}),
	'g:banned:fixed:t:t:t g:kept:fixed:t:t:t',
	'as fixed windows, with NULL in the columns 0.3.0 adds');
is($node->safe_psql('v020', "SELECT pklimit_count('kept')"), '2', 'the count of 0.2.0 survives');
is($node->safe_psql('v020', q{SELECT pklimit_decrement('kept'), pklimit_allow('kept', 100, '36500 days', cost => 0)}),
	'1|t', 'a decrement takes an event back from a row of 0.2.0');
is($node->safe_psql('v020', "SELECT count, max_count IS NULL FROM platformkit_limits WHERE key = 'g:kept'"),
	'1|t', 'and leaves its max_count NULL: no call has recorded on it since');
$node->safe_psql('v020', "SELECT pklimit_allow('kept', 100, '36500 days')");
is($node->safe_psql('v020', q{
	SELECT string_agg(concat_ws(':', a, allowed, count, remaining), ' ' ORDER BY i)
	  FROM unnest(ARRAY['gcra', 'gcra', 'sliding', 'fixed']) WITH ORDINALITY v(a, i),
		   LATERAL pklimit_check('kept', 3, '36500 days', algorithm => a)}),
	'gcra:t:3:0 gcra:f:4:0 sliding:f:5:0 fixed:f:6:0',
	'calls of every algorithm count in the open fixed window of 0.2.0');
is($node->safe_psql('v020', "SELECT algorithm, count, max_count FROM platformkit_limits WHERE key = 'g:kept'"),
	'fixed|6|3', 'which stays a fixed window, with the max_count of the last call');
is($node->safe_psql('v020', q{SELECT pklimit_allow('banned', 100, '36500 days', algorithm => 'gcra'),
	pklimit_allow('banned', 100, '36500 days', algorithm => 'sliding')}), 'f|f',
	'a key blocked at 0.2.0 stays blocked for every algorithm');
is($node->safe_psql('v020', q{SELECT allowed, count FROM pklimit_check('new', 2, '36500 days', algorithm => 'gcra')}),
	't|1', 'and GCRA counts a new key');
is($node->safe_psql('v020', q{SELECT string_agg(pklimit_allow('memory', 2, '36500 days', durable => false)::text, ','
	ORDER BY i) FROM generate_series(1, 3) i}), 'true,true,false', 'the memory path counts as the durable one');
is($node->safe_psql('v020', q{SELECT pklimit_decrement('memory', 1, false), pklimit_decrement('memory', 1, true)}),
	'2|1', 'and a decrement takes events back on either path');

# --- a view or an SQL function of a user on one of the four recording
# functions 0.3.0 replaces makes the update fail, naming them; one on
# another of pklimit's functions does not
$node->safe_psql('postgres', 'CREATE DATABASE dependent');
$node->safe_psql('dependent', "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.2.0'");
$node->safe_psql('dependent', q{
	CREATE VIEW login_check AS SELECT * FROM pklimit_check('login', 5, '1 hour');
	CREATE FUNCTION app_allow(k text) RETURNS boolean LANGUAGE sql
	  BEGIN ATOMIC SELECT pklimit_allow_all(ARRAY[k], ARRAY[5], ARRAY['1 hour']::interval[]); END;
	CREATE VIEW login_count AS SELECT pklimit_count('login') AS n});
($ret, $out, $err) = $node->psql('dependent', "\\set VERBOSITY verbose\nALTER EXTENSION pklimit UPDATE TO '0.3.0'");
like($err, qr/ERROR:  2BP01: cannot update pklimit while objects depend on its recording functions: function app_allow\(text\), view login_check\n/,
	'a view on pklimit_check and an SQL function on pklimit_allow_all make the update fail with 2BP01, naming both');
is($node->safe_psql('dependent', $version), '0.2.0', 'which changed nothing');
$node->safe_psql('dependent', 'DROP VIEW login_check');
($ret, $out, $err) = $node->psql('dependent', "\\set VERBOSITY verbose\nALTER EXTENSION pklimit UPDATE TO '0.3.0'");
like($err, qr/ERROR:  2BP01: cannot update pklimit while objects depend on its recording functions: function app_allow\(text\)\n/,
	'the function alone still makes it fail');
$node->safe_psql('dependent', "DROP FUNCTION app_allow(text); ALTER EXTENSION pklimit UPDATE TO '0.3.0'");
is($node->safe_psql('dependent', $version), '0.3.0', 'without them the update goes through');
is($node->safe_psql('dependent', 'SELECT n FROM login_count'), '0', 'and the view on pklimit_count stays');

# --- the privileges of the four replaced functions go to their successors:
# a grant, a REVOKE from PUBLIC, a grant option, the defaults; a setting of
# the update's own name, planted on the database, is not read
my $acl = sub {
	my ($db, $nargs) = @_;
	return $node->safe_psql($db, qq{
	SELECT string_agg(p.proname || '=' || (SELECT string_agg(format('%s:%s:%s',
			CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,
			a.privilege_type, a.is_grantable), ',' ORDER BY 1)
		  FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_allow_all', 'pklimit_check_all')
	   AND p.pronargs = $nargs});
};
$node->safe_psql('postgres', 'CREATE DATABASE carried3');
$node->safe_psql('carried3', "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.2.0'");
$node->safe_psql('carried3', q{
	REVOKE ALL ON FUNCTION pklimit_allow(text, bigint, interval, bigint, boolean, interval) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION pklimit_allow(text, bigint, interval, bigint, boolean, interval) TO app;
	REVOKE ALL ON FUNCTION pklimit_check(text, bigint, interval, bigint, boolean, interval) FROM PUBLIC;
	REVOKE ALL ON FUNCTION pklimit_check_all(text[], bigint[], interval[], bigint, boolean, interval) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION pklimit_check_all(text[], bigint[], interval[], bigint, boolean, interval)
	  TO app WITH GRANT OPTION;
	REVOKE ALL ON FUNCTION pklimit_forget(text) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION pklimit_forget(text) TO app});
$node->safe_psql('postgres',
	"ALTER DATABASE carried3 SET pklimit_update.acl_pklimit_allow_all = '{app=X/postgres}'");
$node->safe_psql('postgres',
	"ALTER DATABASE carried3 SET pklimit_update.acl_pklimit_decrement = '{=X/postgres}'");
$node->safe_psql('postgres',
	"ALTER DATABASE carried3 SET pklimit_update.acl_pklimit_memory_stats = '{=X/postgres}'");
my $acl_020 = $acl->('carried3', 6);
$node->safe_psql('carried3', "ALTER EXTENSION pklimit UPDATE TO '0.3.0'");
is($acl->('carried3', 8), $acl_020, 'each new function has the privileges of the one it replaces');
is($node->safe_psql('carried3', q{
	SELECT string_agg(p.proname || ':' || has_function_privilege('app', p.oid, 'EXECUTE')
	  || ':' || has_function_privilege('public', p.oid, 'EXECUTE')
	  || ':' || has_function_privilege('app', p.oid, 'EXECUTE WITH GRANT OPTION'), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_allow_all', 'pklimit_check_all')
	   AND p.pronargs = 8}),
	'pklimit_allow:true:false:false pklimit_allow_all:true:true:false pklimit_check:false:false:false'
	  . ' pklimit_check_all:true:false:true',
	'a grant, a REVOKE from PUBLIC, a grant option and the defaults are carried');
is($node->safe_psql('carried3', q{
	SELECT count(*) FROM pg_init_privs i JOIN pg_proc p ON p.oid = i.objoid
	 WHERE i.classoid = 'pg_proc'::regclass
	   AND p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_allow_all', 'pklimit_check_all')}),
	'0', 'as the grants of a user, which pg_dump dumps');
is($node->safe_psql('carried3', q{SET ROLE app; SELECT pklimit_allow('k', 1, '1 hour', algorithm => 'gcra')}), 't',
	'a role granted EXECUTE at 0.2.0 records at 0.3.0');
# pklimit_decrement, new, lowers a count as pklimit_forget does: it gets
# forget's privileges (a planted setting of its name is not read)
my $same_as_forget = q{
	SELECT string_agg(p.proname || ':' || has_function_privilege('app', p.oid, 'EXECUTE')
	  || ':' || has_function_privilege('public', p.oid, 'EXECUTE'), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE p.proname IN ('pklimit_forget', 'pklimit_decrement')};
is($node->safe_psql('carried3', $same_as_forget),
	'pklimit_decrement:true:false pklimit_forget:true:false',
	'pklimit_decrement gets the privileges of pklimit_forget: PUBLIC did not keep forgetting, nor gets decrementing');
# pklimit_memory_stats, new, is called by the view pklimit_stats beside
# pklimit_stats(): it gets pklimit_stats()'s privileges (a planted setting
# of its name is not read either)
my $same_as_stats = q{
	SELECT string_agg(p.proname || ':' || has_function_privilege('pg_read_all_stats', p.oid, 'EXECUTE')
	  || ':' || has_function_privilege('public', p.oid, 'EXECUTE'), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE p.proname IN ('pklimit_stats', 'pklimit_memory_stats')};
is($node->safe_psql('carried3', $same_as_stats),
	'pklimit_memory_stats:true:false pklimit_stats:true:false',
	'pklimit_memory_stats gets the privileges of pklimit_stats(): the readers of statistics, not PUBLIC');

# and the database whose privileges were carried from 0.1.0 to 0.2.0 (with
# its planted setting) keeps them at 0.3.0
$node->safe_psql('carried', "ALTER EXTENSION pklimit UPDATE TO '0.3.0'");
is($node->safe_psql('carried', q{
	SELECT string_agg(p.proname || ':' || has_function_privilege('app', p.oid, 'EXECUTE')
	  || ':' || has_function_privilege('public', p.oid, 'EXECUTE'), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_allow_all', 'pklimit_check_all')
	   AND p.pronargs = 8}),
	'pklimit_allow:true:false pklimit_allow_all:true:false pklimit_check:false:false pklimit_check_all:false:false',
	'the privileges carried from 0.1.0 to 0.2.0 are carried on to 0.3.0');

# under default privileges (database defaults, at 0.2.0 since above, with
# default privileges that take EXECUTE from PUBLIC and grant it to app):
# the new functions get the privileges of the replaced ones, not those
$acl_020 = $acl->('defaults', 6);
$node->safe_psql('defaults', "ALTER EXTENSION pklimit UPDATE TO '0.3.0'");
is($node->safe_psql('defaults', $version), '0.3.0', 'database defaults is at 0.3.0');
is($acl->('defaults', 8), $acl_020,
	'under default privileges, each new function has the privileges of the one it replaces');
is($node->safe_psql('defaults', q{
	SELECT count(DISTINCT (SELECT string_agg(a.grantee || ':' || a.privilege_type || ':' || a.is_grantable,
			',' ORDER BY a.grantee) FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a))
	  FROM pg_proc p
	 WHERE p.proname IN ('pklimit_forget', 'pklimit_decrement')}),
	'1', 'under default privileges, pklimit_decrement has the privileges of pklimit_forget, not theirs');
# and a fresh install whose default privileges take EXECUTE from PUBLIC
# (CREATE EXTENSION runs 0.2.0, then the update)
$node->safe_psql('postgres', 'CREATE DATABASE fresh_defaults');
$node->safe_psql('fresh_defaults', q{
	ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
	ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO app;
	SET client_min_messages = error;
	CREATE EXTENSION pklimit});
is($node->safe_psql('fresh_defaults', $same_as_forget),
	'pklimit_decrement:false:false pklimit_decrement:false:false pklimit_forget:false:false pklimit_forget:false:false',
	'installed under default privileges that take EXECUTE from PUBLIC, pklimit_decrement (and its policy form) is as pklimit_forget');
is($node->safe_psql('defaults', q{
	SELECT string_agg(p.proname || ':' || has_function_privilege('public', p.oid, 'EXECUTE'), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_allow_all', 'pklimit_check_all')
	   AND p.pronargs = 8}),
	'pklimit_allow:true pklimit_allow_all:true pklimit_check:true pklimit_check_all:true',
	'default privileges that take EXECUTE from PUBLIC do not take the new functions away from it');
is($node->safe_psql('defaults', q{SELECT count(*) FROM pg_proc p, aclexplode(p.proacl) a
	WHERE p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_allow_all', 'pklimit_check_all')
	  AND p.pronargs = 8 AND a.grantee = 'app'::regrole}), '0',
	'nor give app a grant of its own on them');
is($node->safe_psql('defaults', q{SET ROLE app; SELECT pklimit_allow('k3', 1, '36500 days', algorithm => 'sliding')}), 't',
	'a plain role still records after the update to 0.3.0');

# --- the view pklimit_stats, replaced in place with the memory columns:
# a role granted what reading it needs at 0.2.0 still reads it, with the
# memory columns; a user's view on it stays
# (the databases above hold every worker slot, max_worker_processes: their
# workers go, for the worker of this one)
$node->safe_psql('postgres',
	q{SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'pklimit worker'});
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'pklimit worker'}),
	'the workers of the databases above are gone');
$node->safe_psql('postgres', 'CREATE ROLE monitor');
$node->safe_psql('postgres', 'CREATE DATABASE monitored');
$node->safe_psql('monitored', "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.2.0'");
ok($node->poll_query_until('monitored',
	q{SELECT status = 'ok' FROM pklimit_check('wake-up', 1, '36500 days', cost => 0)}),
	'a worker serves database monitored');
$node->safe_psql('monitored', q{
	SELECT pklimit_stats_reset(oid) FROM pg_database WHERE datname = 'monitored';
	GRANT EXECUTE ON FUNCTION pklimit_stats() TO monitor;
	GRANT SELECT ON pklimit_stats TO monitor;
	CREATE VIEW busy AS SELECT datname, calls, allowed FROM pklimit_stats;
	GRANT SELECT ON busy TO monitor;
	SELECT pklimit_allow('k', 1, '36500 days'), pklimit_allow('k', 1, '36500 days')});
my $read_stats = q{SET ROLE monitor; SELECT concat_ws('|', calls, allowed, refused) FROM pklimit_stats
	WHERE datname = 'monitored'};
my $read_busy = q{SET ROLE monitor; SELECT concat_ws('|', calls, allowed) FROM busy WHERE datname = 'monitored'};
is($node->safe_psql('monitored', $read_stats), '2|1|1', 'at 0.2.0 a monitoring role reads pklimit_stats');
is($node->safe_psql('monitored', $read_busy), '2|1', 'and a view of a user on it');
$node->safe_psql('monitored', "ALTER EXTENSION pklimit UPDATE TO '0.3.0'");
is($node->safe_psql('monitored', $version), '0.3.0', 'database monitored is at 0.3.0');
is($node->safe_psql('monitored', q{SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
	WHERE attrelid = 'pklimit_stats'::regclass AND attnum > 0 AND NOT attisdropped}),
	$node->safe_psql('fresh', q{SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
	WHERE attrelid = 'pklimit_stats'::regclass AND attnum > 0 AND NOT attisdropped}),
	'the view pklimit_stats has the columns of a fresh install');
like($node->safe_psql('monitored', q{SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
	WHERE attrelid = 'pklimit_stats'::regclass AND attnum > 0 AND NOT attisdropped}),
	qr/,memory_calls,memory_reads,memory_fallbacks,memory_evictions,flushes,rows_flushed,memory_keys,flush_lag_ms$/,
	'its memory columns at the end');
is($node->safe_psql('monitored', $read_stats), '2|1|1', 'the monitoring role still reads it after the update');
is($node->safe_psql('monitored', q{SET ROLE monitor; SELECT concat_ws('|', memory_calls, memory_reads,
	memory_fallbacks, memory_evictions, flushes IS NOT NULL, rows_flushed IS NOT NULL, memory_keys)
	FROM pklimit_stats WHERE datname = 'monitored'}), '0|0|0|0|t|t|0',
	'the memory columns included, though no call took the memory path');
is($node->safe_psql('monitored', $read_busy), '2|1', 'the view of a user on it stays, and reads it');
is($node->safe_psql('monitored', q{SELECT has_function_privilege('monitor', 'pklimit_memory_stats()', 'EXECUTE'),
	has_function_privilege('public', 'pklimit_memory_stats()', 'EXECUTE')}), 't|f',
	'the monitoring role got EXECUTE on pklimit_memory_stats, PUBLIC did not');
ok($node->poll_query_until('monitored', q{SELECT pklimit_allow('m', 1000000, '36500 days', durable => false)
	AND (SELECT memory_reads > 0 FROM pklimit_stats WHERE datname = 'monitored')}), 'memory calls read their key in');
is($node->safe_psql('monitored', q{SET ROLE monitor; SELECT memory_reads > 0, memory_keys > 0 FROM pklimit_stats
	WHERE datname = 'monitored'}), 't|t', 'which the monitoring role sees');

# --- a function planted under the name pklimit_memory_stats while 0.2.0
# was installed (0.2.0's scripts do not know the name) makes the update to
# 0.3.0 fail, naming it: an overload would take the place of pklimit's
# function in a call
$node->safe_psql('postgres', 'CREATE DATABASE planted3');
$node->safe_psql('planted3', 'GRANT CREATE ON SCHEMA public TO app');
$node->safe_psql('planted3', q{SET ROLE app;
	CREATE FUNCTION public.pklimit_memory_stats(x integer) RETURNS bigint
	LANGUAGE sql AS $$SELECT 0::bigint$$});
$node->safe_psql('planted3', "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.2.0'");
($ret, $out, $err) = $node->psql('planted3', "ALTER EXTENSION pklimit UPDATE TO '0.3.0'");
like($err,
	qr/schema public has objects with pklimit's names that are not pklimit's: function pklimit_memory_stats\(integer\)/,
	'a pklimit_memory_stats planted at 0.2.0 makes the update to 0.3.0 fail, naming it');
is($node->safe_psql('planted3', $version), '0.2.0', 'which changed nothing');
$node->safe_psql('planted3', "DROP FUNCTION public.pklimit_memory_stats(integer); ALTER EXTENSION pklimit UPDATE TO '0.3.0'");
is($node->safe_psql('planted3', $version), '0.3.0', 'without it the update goes through');
is($node->safe_psql('planted3', 'SELECT count(*) FROM pklimit_memory_stats()'),
	$node->safe_psql('planted3', 'SELECT count(*) FROM pklimit_stats()'), "and pklimit's own answers");

$node->stop;
done_testing();
