# Copyright (c) pklimit contributors
#
# The update from 0.3.0 to 0.4.0 (pklimit--0.3.0--0.4.0.sql, built from
# src/sql/ with the fragments every update shares):
#   - a 0.3.0 install with rows of every algorithm, updated while two
#     sessions keep making memory calls, loses no call, keeps every row and
#     has the objects of a fresh install (among them the policy table, its
#     row level security and pklimit_admin's grants); its keys count on,
#     and the recording calls take anchor;
#   - a user's view or function on one of the four replaced functions makes
#     the update fail (2BP01), naming them;
#   - the owner and privileges of each replaced function go to its
#     successor, as a user's grants; settings of the update's names planted
#     on the database are not read; default privileges neither;
#   - a view or function planted under one of the names 0.4.0 adds
#     (pklimit_policies, which 0.3.0's guards do not know) while 0.3.0 is
#     installed makes the update fail (42710), naming it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = PostgreSQL::Test::Cluster->new('upgrade_0_4');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pklimit'\nmax_worker_processes = 16\n");
$node->start;
my $version = "SELECT extversion FROM pg_extension WHERE extname = 'pklimit'";
my $recording = q{p.proname IN ('pklimit_allow', 'pklimit_check', 'pklimit_allow_all', 'pklimit_check_all')};
$node->safe_psql('postgres', 'CREATE ROLE app; CREATE ROLE keeper; CREATE ROLE bob');
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'SET client_min_messages = error; CREATE EXTENSION pklimit');
is($node->safe_psql('fresh', $version), '0.4.0', 'a new install is at 0.4.0');
my $fresh = extension_catalog($node, 'fresh');
like($fresh, qr/^function public\.pklimit_check\(text,bigint,interval,bigint,boolean,interval,text,boolean,text,text\)/m,
	'the catalog comparison sees the functions 0.4.0 creates');
like($fresh, qr/^relation public\.platformkit_limit_policies kind=r persistence=p rls=t force=t acl=\{postgres=arwdDxtm?\/postgres,pklimit_admin=arwd\/postgres\} /m,
	"and the policy table's row level security and pklimit_admin's grants on it");
like($fresh, qr/^policy public\.platformkit_limit_policies\.platformkit_tenant cmd=r /m, 'and its row level security policy');
like($fresh, qr/^function public\.pklimit_policy_set\(.*\) acl=\{postgres=X\/postgres,pklimit_admin=X\/postgres\} /m,
	"and pklimit_admin's EXECUTE on pklimit_policy_set");

# a database at 0.3.0, given only what a set-up of the application would do
sub at_030
{
	my ($db) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.3.0'");
	is($node->safe_psql($db, $version), '0.3.0', "database $db is at 0.3.0");
}

# --- rows of every algorithm, updated while memory calls go on
at_030('v030');
is($node->safe_psql('v030', q{SELECT pklimit_allow('kept', 3, '36500 days'), pklimit_allow('kept', 3, '36500 days'),
	pklimit_allow('bucket', 2, '36500 days', algorithm => 'gcra'),
	pklimit_allow('slide', 2, '36500 days', algorithm => 'sliding'),
	pklimit_allow('banned', 0, '36500 days', block => '36500 days')}), 't|t|t|t|f',
	'calls at 0.3.0 on a fixed, a GCRA, a sliding and a blocked key');
my $rows = q{SELECT key, window_start, window_end, count, updated_at, blocked_until, algorithm, max_count,
	previous_count, expires_at FROM platformkit_limits WHERE key <> 'g:during' ORDER BY key};
my $rows_before = $node->safe_psql('v030', $rows);
my $per_session = 300000;
my ($at_update, $counted) = update_under_load($node, 'v030', '0.4.0', $per_session, 'durable => false');
cmp_ok($at_update, '<', 2 * $per_session,
	"the update to 0.4.0 committed while memory calls went on ($at_update recorded by then)");
is($counted, 2 * $per_session, 'every memory call made across the update was counted');
is($node->safe_psql('v030', $version), '0.4.0', 'database v030 is now at 0.4.0');
ok($node->poll_query_until('v030',
	"SELECT count = $counted FROM platformkit_limits WHERE key = 'g:during'"),
	'and written to the table');
$node->safe_psql('v030', "SELECT pklimit_forget('during')");
is($node->safe_psql('v030', $rows), $rows_before, 'every row of 0.3.0 is kept');
is(extension_catalog($node, 'v030'), $fresh, 'the 0.3.0 install updated to 0.4.0 has the objects of a fresh install');
is($node->safe_psql('v030', q{SELECT pklimit_allow('kept', 3, '36500 days'), pklimit_allow('kept', 3, '36500 days'),
	pklimit_allow('bucket', 2, '36500 days', algorithm => 'gcra'),
	pklimit_allow('bucket', 2, '36500 days', algorithm => 'gcra'),
	pklimit_allow('slide', 2, '36500 days', algorithm => 'sliding'),
	pklimit_allow('slide', 2, '36500 days', algorithm => 'sliding'),
	pklimit_allow('banned', 100, '36500 days')}), 't|f|t|f|t|f|f',
	'the keys of 0.3.0 count on: a third fixed event, a full bucket and window, the block');
is($node->safe_psql('v030', q{SELECT c.reset_at BETWEEN clock_timestamp() + interval '59 minutes'
	AND clock_timestamp() + interval '1 hour' FROM pklimit_check('anchored', 1, '1 hour', anchor => 'first') c}), 't',
	'and the calls take anchor: a window of its own for a new key');

# --- a view or an SQL function of a user on one of the four replaced
# functions makes the update fail, naming them; one on another function of
# pklimit's does not
at_030('dependent');
$node->safe_psql('dependent', q{
	CREATE VIEW login_check AS SELECT * FROM pklimit_check('login', 5, '1 hour', algorithm => 'gcra');
	CREATE FUNCTION app_allow(k text) RETURNS boolean LANGUAGE sql
	  BEGIN ATOMIC SELECT pklimit_allow_all(ARRAY[k], ARRAY[5], ARRAY['1 hour']::interval[]); END;
	CREATE VIEW login_count AS SELECT pklimit_count('login') AS n});
my ($ret, $out, $err) =
  $node->psql('dependent', "\\set VERBOSITY verbose\nALTER EXTENSION pklimit UPDATE TO '0.4.0'");
like($err, qr/ERROR:  2BP01: cannot update pklimit while objects depend on functions it replaces: function app_allow\(text\), view login_check\n/,
	'a view on pklimit_check and an SQL function on pklimit_allow_all make the update fail with 2BP01, naming both');
like($err, qr/DETAIL:  The update drops and creates again pklimit_allow, pklimit_allow_all, pklimit_check, pklimit_check_all, pklimit_memory_stats\./,
	'saying which functions it replaces');
is($node->safe_psql('dependent', $version), '0.3.0', 'which changed nothing');
$node->safe_psql('dependent', 'DROP VIEW login_check; DROP FUNCTION app_allow(text)');
$node->safe_psql('dependent', "ALTER EXTENSION pklimit UPDATE TO '0.4.0'");
is($node->safe_psql('dependent', $version), '0.4.0', 'without them the update goes through');
is($node->safe_psql('dependent', 'SELECT n FROM login_count'), '0', 'and the view on pklimit_count stays');

# --- owners and privileges go to the successors: a grant, a REVOKE from
# PUBLIC, a grant option, another owner, the defaults; settings of the
# update's own names planted on the database are not read
my $acl = sub {
	my ($db, $nargs) = @_;
	return $node->safe_psql($db, qq{
	SELECT string_agg(p.proname || '=' || p.proowner::regrole || ':' || (SELECT string_agg(format('%s:%s:%s',
			CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,
			a.privilege_type, a.is_grantable), ',' ORDER BY a.grantee, a.privilege_type)
		  FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE $recording AND p.pronargs = $nargs});
};
at_030('carried');
$node->safe_psql('carried', q{
	REVOKE ALL ON FUNCTION pklimit_allow(text, bigint, interval, bigint, boolean, interval, text, boolean) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION pklimit_allow(text, bigint, interval, bigint, boolean, interval, text, boolean) TO app;
	REVOKE ALL ON FUNCTION pklimit_check(text, bigint, interval, bigint, boolean, interval, text, boolean) FROM PUBLIC;
	ALTER FUNCTION pklimit_check(text, bigint, interval, bigint, boolean, interval, text, boolean) OWNER TO keeper;
	REVOKE ALL ON FUNCTION pklimit_check_all(text[], bigint[], interval[], bigint, boolean, interval, text, boolean)
	  FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION pklimit_check_all(text[], bigint[], interval[], bigint, boolean, interval, text, boolean)
	  TO app WITH GRANT OPTION;
	SET ROLE app;
	GRANT EXECUTE ON FUNCTION pklimit_check_all(text[], bigint[], interval[], bigint, boolean, interval, text, boolean)
	  TO bob;
	RESET ROLE});
for my $planted ("pklimit_update.acl_pklimit_allow_all = '{app=X/postgres}'",
	"pklimit_update.replaced_names = 'pklimit_count'", "pklimit_update.acl_pklimit_count = '{app=X/postgres}'",
	"pklimit_update.privileges_from = 'pklimit_count=pklimit_purge(interval)'")
{
	$node->safe_psql('postgres', "ALTER DATABASE carried SET $planted");
}
my $acl_030 = $acl->('carried', 8);
$node->safe_psql('carried', "ALTER EXTENSION pklimit UPDATE TO '0.4.0'");
is($acl->('carried', 10), $acl_030, 'each new function has the owner and privileges of the one it replaces');
is($node->safe_psql('carried', qq{
	SELECT string_agg(p.proname || ':' || has_function_privilege('app', p.oid, 'EXECUTE')
	  || ':' || has_function_privilege('public', p.oid, 'EXECUTE')
	  || ':' || has_function_privilege('app', p.oid, 'EXECUTE WITH GRANT OPTION')
	  || ':' || p.proowner::regrole, ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE $recording AND p.pronargs = 10}),
	'pklimit_allow:true:false:false:postgres pklimit_allow_all:true:true:false:postgres'
	  . ' pklimit_check:false:false:false:keeper pklimit_check_all:true:false:true:postgres',
	'a grant, a REVOKE from PUBLIC, a grant option, an owner and the defaults are carried');
my $grantors = q{SELECT string_agg(a.grantee::regrole || '/' || a.grantor::regrole, ' ' ORDER BY 1)
	  FROM pg_proc p, aclexplode(p.proacl) a
	 WHERE p.proname = 'pklimit_check_all' AND p.pronargs = %d AND a.grantee <> p.proowner};
is($node->safe_psql('carried', sprintf($grantors, 10)), 'app/postgres bob/app',
	"a grant made with another role's grant option keeps its grantor");
$node->safe_psql('carried', 'REVOKE ALL ON FUNCTION pklimit_check_all(text[], bigint[], interval[], bigint, boolean,'
	  . ' interval, text, boolean, text, text) FROM app CASCADE');
is($node->safe_psql('carried', q{SELECT has_function_privilege('bob', 'pklimit_check_all(text[], bigint[],
	interval[], bigint, boolean, interval, text, boolean, text, text)', 'EXECUTE')}), 'f',
	'so that revoking the grant option with CASCADE takes it back');
is($node->safe_psql('carried', q{SELECT has_function_privilege('app', 'pklimit_count(text)', 'EXECUTE')
	|| ':' || (SELECT proacl IS NULL FROM pg_proc WHERE oid = 'pklimit_count(text)'::regprocedure)}), 'true:true',
	'a function the update does not replace keeps its privileges, whatever the planted settings say');
is($node->safe_psql('carried', qq{
	SELECT count(*) FROM pg_init_privs i JOIN pg_proc p ON p.oid = i.objoid
	 WHERE i.classoid = 'pg_proc'::regclass AND $recording AND p.pronargs = 10}),
	'0', 'the carried privileges are the grants of a user, which pg_dump dumps');
is($node->safe_psql('carried', q{SET ROLE app; SELECT pklimit_allow('k', 1, '1 hour', anchor => 'first')}), 't',
	'a role granted EXECUTE at 0.3.0 records at 0.4.0');

# under default privileges that take EXECUTE from PUBLIC and grant it to
# app: the new functions get the privileges of the replaced ones, not those
at_030('defaults');
$node->safe_psql('defaults', q{
	ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
	ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO app});
$acl_030 = $acl->('defaults', 8);
$node->safe_psql('defaults', "ALTER EXTENSION pklimit UPDATE TO '0.4.0'");
is($acl->('defaults', 10), $acl_030,
	'under default privileges, each new function has the privileges of the one it replaces');
is($node->safe_psql('defaults', qq{SELECT count(*) FROM pg_proc p, aclexplode(p.proacl) a
	WHERE $recording AND a.grantee = 'app'::regrole}), '0', 'and app no grant of its own on them');
# a fresh install under the same default privileges (CREATE EXTENSION runs
# 0.2.0, then each update)
$node->safe_psql('postgres', 'CREATE DATABASE fresh_defaults');
$node->safe_psql('fresh_defaults', q{
	ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
	ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO app;
	SET client_min_messages = error;
	CREATE EXTENSION pklimit});
is($node->safe_psql('fresh_defaults', qq{
	SELECT string_agg(p.proname || ':' || has_function_privilege('public', p.oid, 'EXECUTE')
	  || ':' || has_function_privilege('app', p.oid, 'EXECUTE'), ' ' ORDER BY p.proname)
	  FROM pg_proc p WHERE $recording AND p.pronargs = 10}),
	'pklimit_allow:false:false pklimit_allow_all:false:false pklimit_check:false:false pklimit_check_all:false:false',
	'installed under those default privileges, the recording functions have what the install of 0.2.0 gave them:'
	  . ' nothing for PUBLIC, no grant to app');

# --- a schema whose name starts with "s", with standard_conforming_strings
# off (where a backslash in a string is an escape): installed and updated
$node->safe_psql('postgres', 'CREATE DATABASE escapes');
$node->safe_psql('postgres', 'ALTER DATABASE escapes SET standard_conforming_strings = off');
$node->safe_psql('escapes', "CREATE SCHEMA svc; SET client_min_messages = error;
	CREATE EXTENSION pklimit SCHEMA svc VERSION '0.3.0'");
$node->safe_psql('escapes', "ALTER EXTENSION pklimit UPDATE TO '0.4.0'");
is($node->safe_psql('escapes', $version), '0.4.0', 'standard_conforming_strings off: the update to 0.4.0 goes through');
$node->safe_psql('escapes', 'CREATE SCHEMA sec; DROP EXTENSION pklimit; SET client_min_messages = error;
	CREATE EXTENSION pklimit SCHEMA sec');
is($node->safe_psql('escapes', $version), '0.4.0', 'and so does a fresh install');

# --- a view and a function planted under the name pklimit_policies while
# 0.3.0 is installed (its guards do not know the name) make the update fail,
# naming them: they could take the place of pklimit's own view
at_030('planted');
$node->safe_psql('planted', 'GRANT CREATE ON SCHEMA public TO app');
$node->safe_psql('planted', q{SET ROLE app;
	CREATE VIEW public.pklimit_policies AS SELECT 'mine'::text AS name;
	CREATE FUNCTION public.pklimit_policies(k text) RETURNS text LANGUAGE sql AS $$SELECT k$$});
($ret, $out, $err) = $node->psql('planted', "\\set VERBOSITY verbose\nALTER EXTENSION pklimit UPDATE TO '0.4.0'");
like($err, qr/ERROR:  42710: schema public has objects with pklimit's names that are not pklimit's: relation pklimit_policies, function pklimit_policies\(text\)\n/,
	'a view and a function named pklimit_policies make the update fail with 42710, naming both');
is($node->safe_psql('planted', $version), '0.3.0', 'which changed nothing');
$node->safe_psql('planted', 'DROP VIEW public.pklimit_policies');
($ret, $out, $err) = $node->psql('planted', "\\set VERBOSITY verbose\nALTER EXTENSION pklimit UPDATE TO '0.4.0'");
like($err, qr/ERROR:  42710: schema public has objects with pklimit's names that are not pklimit's: function pklimit_policies\(text\)\n/,
	'the function alone makes it fail too');
$node->safe_psql('planted', "DROP FUNCTION public.pklimit_policies(text); ALTER EXTENSION pklimit UPDATE TO '0.4.0'");
is($node->safe_psql('planted', $version), '0.4.0', 'without them the update goes through');
$node->safe_psql('planted', "SELECT pklimit_policy_set('login', 3, '1 hour')");
is($node->safe_psql('planted', "SELECT name || ':' || max_count FROM pklimit_policies"), 'login:3',
	"and pklimit's own view answers");

$node->stop;
done_testing();
