# pgbouncer (Debian's package) in transaction pooling mode in front of a
# pklimit node, with one server connection shared by every client:
#  (a) a tenant set with SET LOCAL inside the transaction works through the
#      pool: the counts land in the right tenant;
#  (b) a session-level SET platformkit.tenant from client A leaks to client B
#      through the shared server connection: B, who never set a tenant, is
#      counted under A's tenant (asserted, to document the hazard);
#  (c) the safe pattern (SET LOCAL / set_config(..., true) in every
#      transaction, '' for no tenant) does not leak, even on a server
#      connection polluted by (b); the Python login example, run through the
#      pool, shows it with a real driver.
# A missing pgbouncer or python3-psycopg fails the test.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Cwd qw(abs_path);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my ($examples) = grep { -d "$_/python" } (
	$ENV{PKLIMIT_EXAMPLES} // (),
	"$FindBin::RealBin/../../examples",
	"$FindBin::RealBin/../examples");
BAIL_OUT('examples/ not found next to test/ (set PKLIMIT_EXAMPLES)') unless $examples;

my $pgbouncer = (grep { -x $_ } '/usr/sbin/pgbouncer', '/usr/bin/pgbouncer')[0];
ok($pgbouncer, 'pgbouncer is installed') or BAIL_OUT('pgbouncer is missing (apt-get install pgbouncer)');

my $node = pklimit_node('pool');
my $base = abs_path($node->basedir);

# pgbouncer listens on a Unix socket in the node's socket directory, on a
# port of its own; default_pool_size = 1: every client shares one server
# connection.
my $user = scalar getpwuid($<);
my $host = $node->host;
my ($bport, $bpid) = start_pgbouncer($pgbouncer, $node, 'postgres', 20);

# A Cluster object that is never started: only a psql client aimed at
# pgbouncer's socket (same directory as the node's, pgbouncer's port).
my $pool = PostgreSQL::Test::Cluster->new('pgbouncer', port => $bport);
ok($pool->poll_query_until('postgres', 'SELECT true'), 'psql connects through pgbouncer');

my $client_a = $pool->background_psql('postgres');
my $client_b = $pool->background_psql('postgres');

my $pid_a = $client_a->query_safe('SELECT pg_backend_pid()');
my $pid_b = $client_b->query_safe('SELECT pg_backend_pid()');
is($pid_a, $pid_b, 'clients A and B share one server connection');

sub rows
{
	return $node->safe_psql('postgres',
		'SELECT key, count FROM platformkit_limits ORDER BY key COLLATE "C"');
}

# (a) SET LOCAL inside the transaction works through the pool.
is($client_a->query_safe(
		"BEGIN; SET LOCAL platformkit.tenant = 'acme';"
		  . " SELECT count FROM pklimit_check('login:alice', 5, '15 minutes'); COMMIT;"),
	'1', '(a) A counts login:alice under acme');
is($client_b->query_safe(
		"BEGIN; SELECT set_config('platformkit.tenant', 'globex', true) IS NOT NULL;"
		  . " SELECT count FROM pklimit_check('login:alice', 5, '15 minutes'); COMMIT;"),
	"t\n1", '(a) B counts login:alice under globex, with set_config(..., true)');
is($client_a->query_safe(
		"BEGIN; SET LOCAL platformkit.tenant = 'acme';"
		  . " SELECT count FROM pklimit_check('login:alice', 5, '15 minutes'); COMMIT;"),
	'2', '(a) A counts login:alice under acme again');
is(rows(), "t4:acme:login:alice|2\nt6:globex:login:alice|1",
	'(a) the counts landed in the right tenants');

# (c) The tenant set with SET LOCAL ends with the transaction: B, after both
# tenants' transactions ran on the shared server connection, sees no tenant.
is($client_b->query_safe("SELECT coalesce(current_setting('platformkit.tenant', true), '')"),
	'', '(c) no tenant is left on the shared server connection after SET LOCAL');
is($client_b->query_safe("SELECT count FROM pklimit_check('login:bob', 5, '15 minutes')"),
	'1', '(c) B without a tenant is counted once');
is(rows(), "g:login:bob|1\nt4:acme:login:alice|2\nt6:globex:login:alice|1",
	'(c) ... in the global namespace, not in acme or globex');

# (b) The hazard: a session-level SET from A stays on the server connection
# when pgbouncer hands it to B.
$client_a->query_safe("SET platformkit.tenant = 'x'");
is($client_b->query_safe('SELECT pg_backend_pid()'), $pid_a, '(b) B is on the same server connection');
is($client_b->query_safe("SELECT current_setting('platformkit.tenant', true)"),
	'x', '(b) B sees the tenant A set with a session-level SET');
is($client_b->query_safe("SELECT count FROM pklimit_check('login:bob', 5, '15 minutes')"),
	'1', '(b) B, who never set a tenant, gets a fresh count');
is(rows(),
	"g:login:bob|1\nt1:x:login:bob|1\nt4:acme:login:alice|2\nt6:globex:login:alice|1",
	'(b) LEAK: B was counted under tenant x, not in the global namespace');

# (c) The safe pattern does not depend on what the server connection carries:
# every transaction sets its tenant, '' for none.
is($client_b->query_safe(
		"BEGIN; SELECT set_config('platformkit.tenant', '', true) IS NOT NULL;"
		  . " SELECT count FROM pklimit_check('login:bob', 5, '15 minutes'); COMMIT;"),
	"t\n2", '(c) B with set_config(\'\', true) is counted in the global namespace again');
is($client_b->query_safe(
		"BEGIN; SET LOCAL platformkit.tenant = 'acme';"
		  . " SELECT count FROM pklimit_check('login:alice', 5, '15 minutes'); COMMIT;"),
	'3', '(c) B with SET LOCAL acme reaches acme\'s count despite the polluted connection');
is($client_b->query_safe("SELECT current_setting('platformkit.tenant', true)"),
	'x', '(c) SET LOCAL does not clean up the session-level value it shadowed');

# (c) The Python example through the pool, while the server connection still
# carries A's tenant x: every attempt lands in the tenant it names.
ok(IPC::Run::run([ '/usr/bin/python3', '-c', 'import psycopg' ]),
	'python3-psycopg is installed');
my $left = $node->safe_psql('postgres',
	"SELECT ceil(900 - extract(epoch FROM clock_timestamp())::numeric % 900)");
if ($left < 30)
{
	note "waiting ${left}s for the next 15-minute window";
	sleep($left + 1);
}
my ($out, $err) = ('', '');
{
	local $ENV{PGHOST} = $host;
	local $ENV{PGPORT} = $bport;
	local $ENV{PGDATABASE} = 'postgres';
	local $ENV{PGUSER} = $user;
	IPC::Run::run([ '/usr/bin/python3', "$examples/python/login.py" ],
		'<', \"carol acme 10.0.0.9 wrong\ncarol - 10.0.0.9 wrong\ncarol acme 10.0.0.9 wrong\ncarol globex 10.0.0.9 wrong\n",
		'>', \$out, '2>', \$err, IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
}
is($err, '', '(c) the Python example runs through pgbouncer without errors');
is($out,
	"carol acme 10.0.0.9 wrong -> 401 remaining=4\ncarol - 10.0.0.9 wrong -> 401 remaining=4\n"
	  . "carol acme 10.0.0.9 wrong -> 401 remaining=3\ncarol globex 10.0.0.9 wrong -> 401 remaining=4\n",
	'(c) the Python example through the polluted pool: counts per tenant');
is($node->safe_psql('postgres',
		"SELECT key, count FROM platformkit_limits WHERE key LIKE '%carol' ORDER BY key COLLATE \"C\""),
	"g:login:carol|1\nt4:acme:login:carol|2\nt6:globex:login:carol|1",
	'(c) none of its attempts landed under the leaked tenant x');

# Clean the server connection (DISCARD ALL is what server_reset_query would
# send in session pooling mode) and stop.
$client_a->query_safe('RESET platformkit.tenant');
is($client_b->query_safe("SELECT coalesce(current_setting('platformkit.tenant', true), '')"),
	'', 'RESET from A clears the tenant B saw');
$client_a->quit;
$client_b->quit;

stop_pgbouncer($bpid);

$node->stop;
done_testing();
