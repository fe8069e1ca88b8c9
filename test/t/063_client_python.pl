# The Python client, clients/python: installed with pip into a fresh venv
# over Debian's packages (no network), then its unittest suite run against
# real pklimit nodes with Debian's Flask and flask-limiter: two replicas of
# a Flask app, a restart, a rolled-back transaction, tenants, pgbouncer in
# transaction mode with one server connection, the memory path (the option
# durable false), and a node where no worker can start for each
# pklimit.on_unavailable, and pklimit.lease (leases: the bound under
# threads, a Flask app's exports at most 2 at once, a handler that raises, a
# client gone mid-request, the store unavailable); the suite makes three
# more databases on the node (tests/test_setup.py): without pklimit, with it
# in a schema off the search path, and at 0.2.0.  Each Python test is one
# TAP line; a skipped one fails.  A missing package fails the test: CI
# installs python3-venv, python3-pip, python3-flask, python3-flask-limiter,
# python3-limits, python3-psycopg, python3-psycopg-pool and pgbouncer.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Cwd qw(abs_path);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::RecursiveCopy;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my ($client) = grep { -f "$_/pyproject.toml" } (
	$ENV{PKLIMIT_CLIENT_PYTHON} // (),
	"$FindBin::RealBin/../../clients/python",
	"$FindBin::RealBin/../clients/python");
BAIL_OUT('clients/python not found next to test/ (set PKLIMIT_CLIENT_PYTHON)') unless $client;

my $pgbouncer = (grep { -x $_ } '/usr/sbin/pgbouncer', '/usr/bin/pgbouncer')[0];
ok($pgbouncer, 'pgbouncer is installed') or BAIL_OUT('pgbouncer is missing (apt-get install pgbouncer)');

my $node = pklimit_node('python');
# The logical replication launcher takes the only background worker slot:
# every call on this node answers no_worker.
my $down = pklimit_node('python_down', "max_worker_processes = 1\n");
my $base = abs_path($node->basedir);
my $host = $node->host;
my $nport = $node->port;
my $user = scalar getpwuid($<);

# pgbouncer in transaction pooling mode, one server connection for all.
my ($bport, $bpid) = start_pgbouncer($pgbouncer, $node, 'postgres', 100);
my ($out, $err) = ('', '');
my $pool = PostgreSQL::Test::Cluster->new('pgbouncer', port => $bport);
ok($pool->poll_query_until('postgres', 'SELECT true'), 'psql connects through pgbouncer');

# Installation as a user would do it, offline: a venv over Debian's
# packages, pip building from a copy of the sources (pip builds in the tree).
my $src = "$base/clients-python";
PostgreSQL::Test::RecursiveCopy::copypath($client, $src,
	filterfn => sub { $_[0] !~ m{(^|/)(build|dist|__pycache__|[^/]*\.egg-info)$} });
my $venv = "$base/venv";
local $ENV{PIP_NO_CACHE_DIR} = '1';
local $ENV{PIP_DISABLE_PIP_VERSION_CHECK} = '1';
local $ENV{PYTHONDONTWRITEBYTECODE} = '1';
($out, $err) = ('', '');
ok(IPC::Run::run([ '/usr/bin/python3', '-m', 'venv', '--system-site-packages', $venv ],
		'>', \$out, '2>', \$err), 'a venv over the system site-packages')
  or diag("$out\n$err");
($out, $err) = ('', '');
ok(IPC::Run::run([ "$venv/bin/pip", 'install', '--no-index', '--no-build-isolation', $src ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(300)),
	'pip installs the package offline, its dependencies from Debian')
  or diag("$out\n$err");
like($out, qr/Successfully installed pklimit-/, 'pip says pklimit is installed');
($out, $err) = ('', '');
ok(IPC::Run::run([ "$venv/bin/python", '-c',
			'import pklimit.limits, limits.storage as s; print(s.SCHEMES["pklimit+postgresql"].__module__)' ],
		'>', \$out, '2>', \$err, init => sub { chdir '/' }),
	'import pklimit.limits works outside the source tree') or diag($err);
is($out, "pklimit.limits\n", 'the import registers the pklimit+postgresql scheme');

# The suite: one line per test, PASS or FAIL.
my $uri = sub { "pklimit+postgresql:///postgres?host=$host&port=$_[0]" };
($out, $err) = ('', '');
my $ok;
{
	local $ENV{PGHOST} = $host;
	local $ENV{PGPORT} = $nport;
	local $ENV{PGDATABASE} = 'postgres';
	local $ENV{PGUSER} = $user;
	local $ENV{PKLIMIT_TEST_URI} = $uri->($nport);
	local $ENV{PKLIMIT_TEST_POOLER_URI} = $uri->($bport);
	local $ENV{PKLIMIT_TEST_UNAVAILABLE_URI} = $uri->($down->port);
	$ok = IPC::Run::run([ "$venv/bin/python", "$src/tests/run.py" ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(900));
}
my @lines = split /\n/, $out;
my @verdicts = grep { /^(PASS|FAIL) / } @lines;
for (@verdicts)
{
	my ($verdict, $name) = /^(PASS|FAIL) (.*)$/;
	ok($verdict eq 'PASS', "python: $name");
}
my ($ran) = $out =~ /^RAN (\d+)$/m;
ok(defined $ran && $ran >= 102, 'python: the whole suite ran (' . ($ran // 'none') . ' tests)');
is(scalar(grep { /^PASS / } @verdicts), $ran // -1, 'python: every test that ran passed');
ok($ok, 'python: the suite exits 0') or diag($err);

stop_pgbouncer($bpid);
$down->stop;
$node->stop;
done_testing();
