# The login examples in examples/ (Python with psycopg 3, Node.js with pg,
# Go with pgx v4) run against a pklimit node and print one line per attempt;
# their output is asserted line by line.  The Python API example (api.py, a
# GCRA limit per API key) is started as a server and sent requests, its
# statuses and headers asserted.  A missing toolchain fails the test: CI
# installs python3-psycopg, nodejs/npm, golang-go and
# golang-github-jackc-pgx-v4-dev.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Cwd qw(abs_path);
use File::Copy qw(copy);
use File::Path qw(make_path);
use HTTP::Tiny;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;
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

# The API example: api.py with a limit of 10 per hour, so that one event
# comes back to a bucket only every 360 s and a burst of 12 requests meets
# no refill, however slow the machine.  Started on port 0 (it prints the
# port the kernel chose), then sent requests with HTTP::Tiny.
sub run_api_example
{
	my $db = 'ex_api';
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION pklimit');

	my ($out, $err) = ('', '');
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	local $ENV{PGDATABASE} = $db;
	local $ENV{PGUSER} = scalar getpwuid($<);
	local $ENV{API_LIMIT} = 10;
	local $ENV{API_WINDOW} = '1 hour';
	my $server = IPC::Run::start([ '/usr/bin/python3', "$examples/python/api.py", '0' ],
		'<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	$server->pump while $out !~ /^listening on (http:\S+)$/m && $server->pumpable;
	my ($base) = $out =~ /^listening on (http:\S+)$/m;
	ok($base, 'api.py starts and prints its address') or diag("stdout: $out\nstderr: $err");
	return $server->kill_kill unless $base;
	my $url = "$base/v1/quote";
	my $http = HTTP::Tiny->new(timeout => $PostgreSQL::Test::Utils::timeout_default);

	# Wait until it answers (HTTP::Tiny's 599 is its own "could not connect").
	my $deadline = Time::HiRes::time() + $PostgreSQL::Test::Utils::timeout_default;
	my $res = $http->get($url);
	while ($res->{status} == 599 && Time::HiRes::time() < $deadline)
	{
		Time::HiRes::sleep(0.1);
		$res = $http->get($url);
	}
	is($res->{status}, 401, 'api: no API key -> 401') or diag($res->{content});
	ok(!exists $res->{headers}{'ratelimit-remaining'}, 'api: no API key counts nothing');
	is($http->get($url, { headers => { Authorization => 'Bearer key-unknown' } })->{status},
		401, 'api: an unknown API key -> 401');

	# A burst of 12 on one key: 10 allowed, then refused.  The bucket drains
	# one event per 360 s, so after the i-th request it is empty in i * 360 s
	# (RateLimit-Reset) and a refused request fits again in 360 s
	# (Retry-After), each less the time the burst has taken so far (exact on
	# a fast machine; never less than the whole burst's time below).
	my $start = Time::HiRes::time();
	my @burst = map { $http->get($url, { headers => { Authorization => 'Bearer key-acme-1' } }) }
	  1 .. 12;
	my $elapsed = Time::HiRes::time() - $start;
	note sprintf('api burst of 12: %.3fs', $elapsed);
	my $within = sub {
		my ($value, $max) = @_;
		return defined $value && $value =~ /^\d+$/ && $value <= $max && $value >= $max - $elapsed;
	};
	for my $i (1 .. 12)
	{
		my ($r, $h) = ($burst[ $i - 1 ], $burst[ $i - 1 ]{headers});
		my $what = "api: burst request $i";
		is($h->{'ratelimit-limit'}, 10, "$what: RateLimit-Limit 10");
		if ($i <= 10)
		{
			is($r->{status}, 200, "$what -> 200") or diag($r->{content});
			is($h->{'ratelimit-remaining'}, 10 - $i, "$what: RateLimit-Remaining " . (10 - $i));
			ok($within->($h->{'ratelimit-reset'}, 360 * $i),
				"$what: RateLimit-Reset $h->{'ratelimit-reset'} is ${\(360 * $i)} s less the burst's time");
			ok(!exists $h->{'retry-after'}, "$what: no Retry-After");
			like($r->{content}, qr/^\{"quote": ".+"\}$/, "$what: the quote");
		}
		else
		{
			is($r->{status}, 429, "$what -> 429") or diag($r->{content});
			is($h->{'ratelimit-remaining'}, 0, "$what: RateLimit-Remaining 0");
			ok($within->($h->{'retry-after'}, 360),
				"$what: Retry-After $h->{'retry-after'} is 360 s less the burst's time");
			# the refusal is recorded, capped: the bucket is full from now
			ok($within->($h->{'ratelimit-reset'}, 3600),
				"$what: RateLimit-Reset $h->{'ratelimit-reset'} is 3600 s less the burst's time");
		}
	}

	# Another key of the same tenant, and one of another tenant by X-Api-Key:
	# each its own bucket.
	$res = $http->get($url, { headers => { Authorization => 'Bearer key-acme-2' } });
	is($res->{status}, 200, 'api: another API key -> 200');
	is($res->{headers}{'ratelimit-remaining'}, 9, 'api: another API key has its own bucket');
	$res = $http->get($url, { headers => { 'X-Api-Key' => 'key-globex-1' } });
	is($res->{status}, 200, 'api: X-Api-Key -> 200');
	is($res->{headers}{'ratelimit-remaining'}, 9, 'api: X-Api-Key, another tenant, its own bucket');

	$server->kill_kill;
	# (the memory path's keys are in the table once a flush wrote them)
	ok($node->poll_query_until($db,
			q{SELECT string_agg(key || '|' || algorithm, ',' ORDER BY key COLLATE "C") FROM platformkit_limits},
			join(',',
				't4:acme:api:key-acme-1|gcra',
				't4:acme:api:key-acme-2|gcra',
				't6:globex:api:key-globex-1|gcra')),
		'api example: one GCRA state per API key, in its tenant');
}

# A toolchain that is missing is a failure, not a skip.

# Python: Debian's python3-psycopg, with the system interpreter.
if (need('python3-psycopg', '/usr/bin/python3', '-c', 'import psycopg'))
{
	run_example('python', [ '/usr/bin/python3', "$examples/python/login.py" ]);
	run_api_example();
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
