# Policies: a change committed in one session (pklimit_policy_set, an
# UPDATE of platformkit_limit_policies by its owner, pklimit_policy_drop) is
# used by the next call of every other session and by the worker, durable or
# memory; a session reads the table once, not per call; policies survive
# pg_dump and pg_restore; a shadow policy counts what it would refuse until
# it enforces; pklimit_admin serves two databases, and tenants see and
# change only their own overrides.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = PostgreSQL::Test::Cluster->new('policies');
$node->init;
# no autovacuum: an analyze of the policy table empties every session's
# cache too, and would add table reads to those counted below
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pklimit'\nautovacuum = off\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE a');
$node->safe_psql('postgres', 'CREATE DATABASE b');
$node->safe_psql('postgres', 'CREATE ROLE app1 LOGIN; CREATE ROLE app2 LOGIN; CREATE ROLE admin_login LOGIN;
	CREATE ROLE plain LOGIN');

# --- the first install makes pklimit_admin; another database's finds it
is($node->psql('a', 'SET client_min_messages = error; CREATE EXTENSION pklimit'), 0, 'pklimit installs in database a');
is($node->safe_psql('postgres', "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'pklimit_admin'"), 'f',
	'which made the role pklimit_admin, NOLOGIN');
is($node->psql('b', 'SET client_min_messages = error; CREATE EXTENSION pklimit'), 0,
	'pklimit installs in database b, where the role already exists');
$node->safe_psql('postgres', 'GRANT pklimit_admin TO admin_login');

# A session's answer to $sql: its output, or the SQLSTATE of its error.
sub answer
{
	my ($session, $sql) = @_;
	my ($out, $failed) = $session->query($sql);
	return $out unless $failed;
	my $err = $session->{stderr};
	$session->{stderr} = '';
	return $err =~ /ERROR:  ([0-9A-Z]{5}):/ ? $1 : $err;
}

# SQL as admin_login, a LOGIN role granted pklimit_admin
sub as_admin
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', 'admin_login' ]);
}

# --- two long-lived sessions of roles neither superuser nor BYPASSRLS, with
# the default grants: each change is used by their very next call
my @apps = map { $node->background_psql('a', on_error_stop => 0, extra_params => [ '-U', "app$_" ]) } 1, 2;
$_->query_safe('\set VERBOSITY verbose') for @apps;
is($apps[1]->query_safe('SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user'), 'f',
	'the callers are neither superuser nor BYPASSRLS');
# each session's next call on its own key under $policy: allowed|count|remaining
my $next = sub {
	my ($policy) = @_;
	return join ' ', map {
		answer($apps[$_], "SELECT allowed, count, remaining FROM pklimit_check('k$_', '$policy')")
	} 0, 1;
};
# the worker wrote (or flushed) both keys' rows with max_count $max
my $rows_at = sub {
	my ($policy, $max, $count) = @_;
	return $node->poll_query_until('a', "SELECT count(*) = 2 FROM platformkit_limits
		WHERE key IN (pklimit_stored_key('k0', '$policy'), pklimit_stored_key('k1', '$policy'))
		  AND max_count = $max AND count = $count");
};
for my $durable ('true', 'false')
{
	my $p = $durable eq 'true' ? 'durable_api' : 'memory_api';
	as_admin('a', "SELECT pklimit_policy_set('$p', 100, '36500 days', durable => $durable)");
	$next->($p) for 1 .. 2;
	is($next->($p), 't|3|97 t|3|97', "$p: three calls in each session under max_count 100");
	as_admin('a', "SELECT pklimit_policy_set('$p', 3, '36500 days', durable => $durable)");
	is($next->($p), 'f|4|0 f|4|0',
		"$p: pklimit_policy_set tightens it to 3 in a third session: the next call of each session is refused");
	ok($rows_at->($p, 3, 4), "$p: and the worker recorded them under the new limit");
	$node->safe_psql('a', "UPDATE platformkit_limit_policies SET max_count = 6 WHERE name = '$p'");
	is($next->($p), 't|5|1 t|5|1', "$p: an UPDATE of the table by its owner to 6: the next call of each is allowed");
	ok($rows_at->($p, 6, 5), "$p: and the worker recorded them under 6");
	is(as_admin('a', "SELECT pklimit_policy_drop('$p')"), 't', "$p: pklimit_policy_drop deletes it");
	is($next->($p), '42704 42704', "$p: the next call of each session fails with 42704");
}

# --- one table read per session, and per session again after a change
my $reads = sub {
	return $node->safe_psql('a', "SELECT coalesce(sum(table_reads), 0) FROM pklimit_policy_stats()
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'a') AND name = 'reads'");
};
my $calls = join "\n", ("SELECT pklimit_allow('r', 'reads');") x 200;
as_admin('a', "SELECT pklimit_policy_set('reads', 1000000, '36500 days')");
is($reads->(), '0', 'no table read before a call names the policy');
$apps[0]->query_safe("SELECT pklimit_allow('r', 'reads')");
is($reads->(), '1', "a session's first call reads the table once");
$apps[0]->query_safe($calls);
is($reads->(), '1', 'its next 200 calls, each a transaction of its own, read nothing');
$apps[1]->query_safe("SELECT pklimit_allow('r', 'reads')");
$apps[1]->query_safe($calls);
is($reads->(), '2', "the other session's 201 calls read it once");
as_admin('a', "SELECT pklimit_policy_set('reads', 2000000, '36500 days')");
is($reads->(), '2', 'a change reads nothing by itself');
$apps[0]->query_safe($calls);
is($reads->(), '3', 'after it, 200 calls of one session read the table once');
$apps[1]->query_safe($calls);
is($reads->(), '4', "and 200 of the other's once");

# --- shadow, then enforce
as_admin('a', "SELECT pklimit_policy_set('trial', 3, '36500 days', mode => 'shadow')");
is(join(' ', map { $apps[0]->query_safe("SELECT allowed, status FROM pklimit_check('t', 'trial')") } 1 .. 5),
	't|ok t|ok t|ok t|shadow t|shadow', 'a shadow policy of max 3 allows 5 calls, the 4th and 5th with status shadow');
my $trial = "SELECT mode, calls, allowed, refused, would_refuse FROM pklimit_policy_stats() WHERE name = 'trial'";
is($node->safe_psql('a', $trial), 'shadow|5|5|0|2', 'pklimit_policy_stats counts 2 it would refuse');
as_admin('a', "SELECT pklimit_policy_set('trial', 3, '36500 days', mode => 'enforce')");
is($apps[0]->query_safe("SELECT allowed, count, status FROM pklimit_check('t', 'trial')"), 'f|6|ok',
	'switched to enforce, the next call is refused');
is($node->safe_psql('a', $trial), 'enforce|6|5|1|2', 'and counted refused under mode enforce');
$_->quit for @apps;

# --- pg_dump and pg_restore keep the policies, default rows and overrides
as_admin('a', q{SELECT pklimit_policy_set('dumped', 2, '36500 days'),
	pklimit_policy_set('dumped', 1, '36500 days', tenant => 'acme'),
	pklimit_policy_set('dumped_memory', 4, '36500 days', durable => false, mode => 'shadow')});
my $policies = q{SELECT name, tenant, max_count, "window", algorithm, durable, mode FROM pklimit_policies
	ORDER BY name, tenant NULLS FIRST};
my $dump = $node->basedir . '/a.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'a' ], 'pg_dump -Fc of database a');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', 'restored', $dump ],
	'pg_restore into a new database, which creates the extension');
is($node->safe_psql('restored', $policies), $node->safe_psql('a', $policies),
	'the restored database has every policy row of database a');
is($node->safe_psql('restored', "SELECT pklimit_allow('d', 'dumped'), pklimit_allow('d', 'dumped'),
	pklimit_allow('d', 'dumped')"), 't|t|f', 'and its calls use the default row');
is($node->safe_psql('restored', "SET platformkit.tenant = 'acme'; SELECT pklimit_allow('d', 'dumped'),
	pklimit_allow('d', 'dumped')"), 't|f', "and acme's override");

# --- pklimit_admin in both databases; everyone else gets 42501
for my $db ('a', 'b')
{
	my ($ret, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\nSELECT pklimit_policy_set('shared', 10, '36500 days')",
		extra_params => [ '-U', 'admin_login' ]);
	is($ret, 0, "$db: a LOGIN role granted pklimit_admin sets a policy") or diag($err);
	($ret, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\nSELECT pklimit_policy_set('shared', 20, '36500 days')",
		extra_params => [ '-U', 'plain' ]);
	like($err, qr/ERROR:  42501: permission denied for function pklimit_policy_set/, "$db: a role without it gets 42501");
	is($node->safe_psql($db, "SELECT max_count FROM pklimit_policies WHERE name = 'shared'"), '10',
		"$db: and the policy is the admin's");
}

# --- tenants: row level security on the table, through the view too
as_admin('a', q{SELECT pklimit_policy_set('shared', 5, '36500 days', tenant => 'acme'),
	pklimit_policy_set('shared', 7, '36500 days', tenant => 'other')});
my $visible = q{SELECT string_agg(coalesce(tenant, '-') || ':' || max_count, ' ' ORDER BY tenant NULLS FIRST)
	FROM pklimit_policies WHERE name = 'shared'};
my $as = sub {
	my ($role, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('a', "\\set VERBOSITY verbose\n$sql", extra_params => [ '-U', $role ]);
	return $err =~ /ERROR:  ([0-9A-Z]{5}): (.*)/ ? "$1: $2" : $out;
};
is($as->('admin_login', $visible), '-:10 acme:5 other:7', 'pklimit_admin with no tenant sees every row');
is($as->('admin_login', "SET platformkit.tenant = 'acme'; $visible"), '-:10 acme:5',
	"pklimit_admin in a session of tenant acme sees the default row and acme's only");
is($as->('admin_login', "SET platformkit.tenant = 'acme';
	SELECT pklimit_policy_set('shared', 9, '36500 days', tenant => 'other')"),
	'42501: new row violates row-level security policy for table "platformkit_limit_policies"',
	"and cannot write tenant other's row");
is($as->('admin_login', "SET platformkit.tenant = 'acme';
	UPDATE platformkit_limit_policies SET max_count = 9 WHERE tenant = 'other'; $visible"), '-:10 acme:5',
	"nor change it directly, which it does not see");
is($node->safe_psql('a', "SELECT max_count FROM platformkit_limit_policies WHERE name = 'shared' AND tenant = 'other'"),
	'7', "tenant other's row is unchanged");
is($as->('plain', $visible), '-:10', 'a role without pklimit_admin and no tenant sees the default rows');
is($as->('plain', "SET platformkit.tenant = 'acme'; $visible"), '-:10 acme:5',
	"with tenant acme, the default rows and acme's");
is($as->('plain', "SET platformkit.tenant = 'acme'; SELECT remaining FROM pklimit_check('e', 'shared')"), '4',
	"and its calls use acme's override");
is($as->('plain', "SELECT count(*) FROM platformkit_limit_policies"),
	'42501: permission denied for table platformkit_limit_policies', 'the table itself is refused to it');

$node->stop;
done_testing();
