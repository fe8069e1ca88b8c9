# The login examples in examples/ (Python with psycopg 3, Node.js with pg,
# Go with pgx v4) run against a pklimit node and print one line per attempt;
# their output is asserted line by line.  A missing toolchain fails the test:
# CI installs python3-psycopg, nodejs/npm, golang-go and
# golang-github-jackc-pgx-v4-dev.
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

# examples/ sits next to test/ in the repository (test/t/ -> examples/).
my ($examples) = grep { -d "$_/python" } (
	$ENV{PKLIMIT_EXAMPLES} // (),
	"$FindBin::RealBin/../../examples",
	"$FindBin::RealBin/../examples");
BAIL_OUT('examples/ not found next to test/ (set PKLIMIT_EXAMPLES)') unless $examples;

my $node = pklimit_node('examples');
my $tmp = abs_path(PostgreSQL::Test::Utils::tempdir);    # go wants absolute paths

# Every example replays the same attempts, each in its own database (its own
# counters), so the expected lines are the same for all three.
my $attempts = <<'EOF';
alice acme 10.0.0.1 wrong
alice acme 10.0.0.1 wrong
alice acme 10.0.0.1 wrong
alice acme 10.0.0.1 wrong
alice acme 10.0.0.1 wrong
alice acme 10.0.0.1 wrong
alice acme 10.0.0.1 s3cret
alice globex 10.0.0.2 wrong
alice - 10.0.0.2 wrong
bob acme 10.0.0.3 wrong
bob acme 10.0.0.3 wrong
bob acme 10.0.0.3 hunter2
bob acme 10.0.0.3 wrong
mallory acme 10.0.0.3 s3cret
alice globex 10.0.0.2 s3cret
alice globex 10.0.0.2 wrong
carol acme 10.0.0.1 wrong
dave acme 10.0.0.1 wrong
EOF
# 5 attempts per account per 15 minutes, 8 per address per hour; remaining
# is the smaller of the two, retry_after the longer refusal.
my @expected = (
	qr/^alice acme 10\.0\.0\.1 wrong -> 401 remaining=4$/,
	qr/^alice acme 10\.0\.0\.1 wrong -> 401 remaining=3$/,
	qr/^alice acme 10\.0\.0\.1 wrong -> 401 remaining=2$/,
	qr/^alice acme 10\.0\.0\.1 wrong -> 401 remaining=1$/,
	qr/^alice acme 10\.0\.0\.1 wrong -> 401 remaining=0$/,
	qr/^alice acme 10\.0\.0\.1 wrong -> 429 retry_after=(\d+)$/,     # 6th: the account refuses
	qr/^alice acme 10\.0\.0\.1 s3cret -> 429 retry_after=(\d+)$/,    # refused before the hash
	qr/^alice globex 10\.0\.0\.2 wrong -> 401 remaining=4$/,         # another tenant
	qr/^alice - 10\.0\.0\.2 wrong -> 401 remaining=4$/,              # no tenant
	qr/^bob acme 10\.0\.0\.3 wrong -> 401 remaining=4$/,             # another user
	qr/^bob acme 10\.0\.0\.3 wrong -> 401 remaining=3$/,
	qr/^bob acme 10\.0\.0\.3 hunter2 -> 200$/,                       # forgets the account
	qr/^bob acme 10\.0\.0\.3 wrong -> 401 remaining=4$/,             # a fresh account count
	qr/^mallory acme 10\.0\.0\.3 s3cret -> 401 remaining=3$/,        # the address's 5th of 8
	qr/^alice globex 10\.0\.0\.2 s3cret -> 200$/,
	qr/^alice globex 10\.0\.0\.2 wrong -> 401 remaining=4$/,
	qr/^carol acme 10\.0\.0\.1 wrong -> 401 remaining=0$/,           # the address's 8th of 8
	qr/^dave acme 10\.0\.0\.1 wrong -> 429 retry_after=(\d+)$/,      # a fresh account, the address refuses
);
# The longest refusal each 429 line may report: the account's window (15
# minutes), or the address's (1 hour).
my @retry_max = (0, 0, 0, 0, 0, 900, 900, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3600);
# What the attempts leave in platformkit_limits: every attempt counts on both
# keys, the account forgotten after a correct password.
my $expected_rows = join("\n",
	'g:ip:10.0.0.2|1',
	'g:login:alice|1',
	't4:acme:ip:10.0.0.1|9',
	't4:acme:ip:10.0.0.3|5',
	't4:acme:login:alice|7',
	't4:acme:login:bob|1',
	't4:acme:login:carol|1',
	't4:acme:login:dave|1',
	't4:acme:login:mallory|1',
	't6:globex:ip:10.0.0.2|3',
	't6:globex:login:alice|1');

# The 15-minute windows are aligned to the epoch: start a replay at least 30 s
# before the next boundary, so that no boundary resets a count mid-replay.
sub wait_for_window_room
{
	my ($db) = @_;
	my $left = $node->safe_psql($db,
		"SELECT ceil(900 - extract(epoch FROM clock_timestamp())::numeric % 900)");
	if ($left < 30)
	{
		note "waiting ${left}s for the next 15-minute window";
		sleep($left + 1);
	}
}

sub run_example
{
	my ($lang, $cmd, %opt) = @_;
	my $db = "ex_$lang";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION pklimit');
	wait_for_window_room($db);

	my ($out, $err) = ('', '');
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	local $ENV{PGDATABASE} = $db;
	local $ENV{PGUSER} = scalar getpwuid($<);
	my $start = time;
	my $ok = IPC::Run::run($cmd, '<', \$attempts, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	note sprintf('%s example: %ds', $lang, time - $start);
	ok($ok, "$lang example exits 0") or diag("stderr: $err");
	is($err, '', "$lang example writes nothing to stderr");

	my @lines = split /\n/, $out;
	is(scalar @lines, scalar @expected, "$lang example prints one line per attempt")
	  or diag($out);
	for my $i (0 .. $#expected)
	{
		my $line = $lines[$i] // '';
		like($line, $expected[$i], "$lang attempt " . ($i + 1));
		if ($line =~ /retry_after=(\d+)$/)
		{
			ok($1 >= 1 && $1 <= $retry_max[$i], "$lang retry_after $1 is within 1..$retry_max[$i] s");
		}
	}
	is($node->safe_psql($db,
			'SELECT key, count FROM platformkit_limits ORDER BY key COLLATE "C"'),
		$expected_rows, "$lang example: counts land in the right tenant");
}

# A toolchain that is missing is a failure, not a skip.
sub need
{
	my ($what, @cmd) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval { IPC::Run::run(\@cmd, '>', \$out, '2>', \$err) };
	ok($ok, "$what is installed (@cmd)") or diag($@ || $err);
	return $ok;
}

# Python: Debian's python3-psycopg, with the system interpreter.
if (need('python3-psycopg', '/usr/bin/python3', '-c', 'import psycopg'))
{
	run_example('python', [ '/usr/bin/python3', "$examples/python/login.py" ]);
}

# Node.js: pg from npm, installed with "npm ci" from the lockfile into a
# writable copy under the node's basedir (the test runs as an unprivileged
# user from a copy of the tree, and node_modules is not committed).
if (need('node', 'node', '--version') && need('npm', 'npm', '--version'))
{
	my $dir = abs_path($node->basedir) . '/node-example';
	make_path($dir);
	copy("$examples/node/$_", "$dir/$_") or die "copy $_: $!"
	  for qw(package.json package-lock.json login.js);
	my ($out, $err) = ('', '');
	my $start = time;
	local $ENV{npm_config_cache} = abs_path($node->basedir) . '/npm-cache';
	local $ENV{npm_config_update_notifier} = 'false';
	my $ok = IPC::Run::run([ 'npm', 'ci', '--no-audit', '--no-fund', '--prefix', $dir ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(300));
	note sprintf('npm ci: %ds', time - $start);
	ok($ok, 'npm ci installs pg from the lockfile') or diag("$out\n$err");
	run_example('node', [ 'node', "$dir/login.js" ]) if $ok;
}

# Go: pgx v4 from Debian's golang-github-jackc-pgx-v4-dev, built offline in
# GOPATH mode (GO111MODULE=off) against /usr/share/gocode, no module proxy.
if (need('golang-go', 'go', 'version')
	&& ok(-d '/usr/share/gocode/src/github.com/jackc/pgx/v4',
		'golang-github-jackc-pgx-v4-dev is installed'))
{
	my $bin = "$tmp/login-go";
	my ($out, $err) = ('', '');
	my $start = time;
	local $ENV{GO111MODULE} = 'off';
	local $ENV{GOPATH} = '/usr/share/gocode';
	local $ENV{GOCACHE} = "$tmp/go-cache";
	local $ENV{GOPROXY} = 'off';
	local $ENV{GOFLAGS} = '';
	local $ENV{GOTOOLCHAIN} = 'local';
	my $ok = IPC::Run::run([ 'go', 'build', '-o', $bin, "$examples/go/main.go" ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(300));
	note sprintf('go build: %ds', time - $start);
	ok($ok, 'the Go example builds offline from Debian packages') or diag("$out\n$err");
	run_example('go', [$bin]) if $ok;
}

$node->stop;
done_testing();
