# The Node.js client (clients/node, the npm package rate-limit-pklimit): its
# own test suite (node --test) runs express-rate-limit's real middleware in
# Express apps against a pklimit node, on the durable and the memory path
# (durable: false), with stores that name a policy, and through pgbouncer in
# transaction mode (one server connection), runs its concurrencyLimit
# middleware (pklimit's leases) in Express apps, a client that disconnects
# mid-request and a handler that throws included, and type-checks
# index.d.ts with tsc; each of its tests is one assertion here.
# npm ci installs express, express-rate-limit, pg and typescript from the
# committed lockfile into a writable copy under the node's basedir (the test
# runs as an unprivileged user from a copy of the tree).  A missing node, npm
# or pgbouncer fails the test.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Cwd qw(abs_path);
use File::Copy qw(copy);
use File::Path qw(make_path);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my ($package) = grep { -f "$_/index.js" } (
	"$FindBin::RealBin/../../clients/node",
	"$FindBin::RealBin/../clients/node");
BAIL_OUT('clients/node not found next to test/') unless $package;

# The Node tests, by file and number: every one must report, none may skip.
my @files = qw(test/store.test.js test/memory.test.js test/unavailable.test.js test/pgbouncer.test.js
  test/takeback.test.js test/anchor.test.js test/install.test.js test/keys.test.js test/policy.test.js
  test/types.test.js test/esm.test.mjs test/concurrency.test.js);
my $expected_tests = 69;

need('node', 'node', '--version') or BAIL_OUT('node is missing');
need('npm', 'npm', '--version') or BAIL_OUT('npm is missing');
my $pgbouncer = (grep { -x $_ } '/usr/sbin/pgbouncer', '/usr/bin/pgbouncer')[0];
ok($pgbouncer, 'pgbouncer is installed') or BAIL_OUT('pgbouncer is missing');

my $node = pklimit_node('node_client');
my $base = abs_path($node->basedir);
my $host = $node->host;
my $nport = $node->port;
my $user = scalar getpwuid($<);
$node->safe_psql('postgres', 'CREATE DATABASE erl');
$node->safe_psql('erl', 'CREATE EXTENSION pklimit');
$node->safe_psql('postgres', 'CREATE DATABASE erl_schema');
$node->safe_psql('erl_schema',
	'CREATE SCHEMA "Rate Limits"; CREATE EXTENSION pklimit SCHEMA "Rate Limits"');

# pgbouncer in transaction mode, one server connection for every client.
my ($bport, $bpid) = start_pgbouncer($pgbouncer, $node, 'erl', 50);
my ($out, $err) = ('', '');

# A writable copy of the package and its tests; node_modules from the lockfile.
my $dir = "$base/node-client";
make_path("$dir/test");
copy("$package/$_", "$dir/$_") or die "copy $_: $!"
  for (qw(package.json package-lock.json index.js index.d.ts README.md LICENSE test/helpers.js
	test/types.ts test/tsconfig.json), @files);
local $ENV{npm_config_cache} = "$base/npm-cache";
local $ENV{npm_config_update_notifier} = 'false';
my $start = time;
($out, $err) = ('', '');
my $ok = IPC::Run::run([ 'npm', 'ci', '--no-audit', '--no-fund', '--prefix', $dir ],
	'>', \$out, '2>', \$err, IPC::Run::timeout(300));
note sprintf('npm ci: %ds', time - $start);
ok($ok, 'npm ci installs express, express-rate-limit, pg and typescript from the lockfile') or diag("$out\n$err");

# What npm pack would publish: the package and nothing else.
($out, $err) = ('', '');
IPC::Run::run([ 'npm', 'pack', '--dry-run', '--json' ],
	'>', \$out, '2>', \$err, init => sub { chdir $dir });
my @packed = sort $out =~ /"path":\s*"([^"]+)"/g;
is("@packed", 'LICENSE README.md index.d.ts index.js package.json', 'npm pack: the files of the package')
  or diag("$out\n$err");

# The hour windows are aligned to the epoch: start with two minutes of room
# before the next boundary, so that none resets a count mid-suite.
my $left = $node->safe_psql('erl',
	"SELECT ceil(3600 - extract(epoch FROM clock_timestamp())::numeric % 3600)");
if ($left < 120)
{
	note "waiting ${left}s for the next hour window";
	sleep($left + 1);
}

($out, $err) = ('', '');
{
	local $ENV{PGHOST} = $host;
	local $ENV{PGPORT} = $nport;
	local $ENV{PGUSER} = $user;
	local $ENV{PGDATABASE} = 'erl';
	local $ENV{PKLIMIT_SCHEMA_DB} = 'erl_schema';
	local $ENV{PKLIMIT_BOUNCER_PORT} = $bport;
	$start = time;
	# one file at a time: the unavailable tests change server settings
	IPC::Run::run([ 'node', '--test', '--test-concurrency=1', '--test-reporter=tap', @files ],
		'>', \$out, '2>', \$err, init => sub { chdir $dir },
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default * 2));
	note sprintf('node --test: %ds', time - $start);
}

# Each top-level Node test is one assertion here, with its failure in full.
my @results = $out =~ /^((?:not )?ok \d+ - .*?)$/mg;
my %report = map { $_ => ($out =~ /^# $_ (\d+)$/m ? $1 : 'missing') }
  qw(tests pass fail cancelled skipped todo);
for my $line (@results)
{
	my ($not, $name) = $line =~ /^(not )?ok \d+ - (.*)$/;
	my ($detail) = $out =~ /^\Q$line\E\n((?:  .*\n)*)/m;
	ok(!$not, "node: $name") or diag($detail // '');
}
is(scalar @results, $expected_tests, "node --test reports $expected_tests tests")
  or diag("stdout:\n$out\nstderr:\n$err");
is($report{pass}, $expected_tests, 'node --test: every test passed');
is("$report{fail}|$report{cancelled}|$report{skipped}|$report{todo}", '0|0|0|0',
	'node --test: none failed, cancelled, skipped or todo');

stop_pgbouncer($bpid);
$node->stop;
done_testing();
