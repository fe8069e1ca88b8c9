# Copyright (c) pklimit contributors
#
# Leases (docs/leases.md) under load, across a kill, a crash and a restart,
# and against a reference model:
#
#   1. Exactness: 16 pgbench clients after 3 slots of one key.  A client
#      that gets a lease inserts a row into the plain table held right
#      after, counts the rows of held into seen, holds the lease a few
#      milliseconds, deletes its row right before it releases.  The largest
#      count ever seen is the number of leases held at once: exactly 3, and
#      reached.
#   2. The same harness against a deliberately racy acquire (a read of the
#      live leases, then an insert, without a row lock) sees more than 3:
#      the harness can tell an exact acquire from a racy one.
#   3. A killed client's lease: held until it ends, then its slot is free.
#   4. A crash (immediate stop) and a clean restart keep live leases.
#   5. A random sequence of acquires, releases and renewals on a few keys,
#      each answer compared with a model of the rules (PKLIMIT_SEED).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PklimitTest;

my $SEED = $ENV{PKLIMIT_SEED} // 20261204;
die "PKLIMIT_SEED must be an integer\n" unless $SEED =~ /^\d+$/;
note("PKLIMIT_SEED=$SEED");
srand($SEED);

my $node = pklimit_node('leases', "max_connections = 40\n");
$node->safe_psql('postgres', q{
	CREATE TABLE held (token uuid PRIMARY KEY);
	CREATE TABLE seen (n bigint NOT NULL);
	-- a semaphore written by hand, wrong on purpose: it reads the live
	-- leases, then inserts, with nothing held in between
	CREATE TABLE racy_leases (key text, token uuid, expires_at timestamptz);
	CREATE FUNCTION racy_acquire(k text, m int, lease interval) RETURNS uuid
	LANGUAGE plpgsql AS $$
	DECLARE t uuid := gen_random_uuid();
	BEGIN
		IF (SELECT count(*) FROM racy_leases
			 WHERE key = k AND expires_at > clock_timestamp()) < m THEN
			PERFORM pg_sleep(0.001);	-- the window a racy acquire leaves open
			INSERT INTO racy_leases VALUES (k, t, clock_timestamp() + lease);
			RETURN t;
		END IF;
		RETURN NULL;
	END $$;
	CREATE FUNCTION racy_release(k text, t uuid) RETURNS boolean
	LANGUAGE sql AS $$
		WITH d AS (DELETE FROM racy_leases WHERE key = k AND token = t RETURNING 1)
		SELECT count(*) > 0 FROM d $$;});

# The harness: the largest number of rows of held ever counted, and the
# leases granted, for acquire/release functions $acquire, $release.
sub largest_held
{
	my ($name, $acquire, $release) = @_;
	$node->safe_psql('postgres', 'TRUNCATE held, seen');
	my $script = qq{
SELECT (t IS NOT NULL)::int AS got, coalesce(t::text, '') AS token FROM $acquire('hot', 3, '1 minute') t \\gset
\\if :got
INSERT INTO held VALUES (':token');
INSERT INTO seen SELECT count(*) FROM held;
SELECT pg_sleep(0.002);
DELETE FROM held WHERE token = ':token';
SELECT $release('hot', ':token');
\\endif
};
	pklimit_pgbench($node, $name, 16, 100, $SEED, { "$name.sql" => $script });
	return split /\|/, $node->safe_psql('postgres',
		'SELECT coalesce(max(n), 0), count(*) FROM seen');
}

my ($figure, $granted) = largest_held('leases', 'pklimit_acquire', 'pklimit_release');
note("pklimit_acquire: largest number of leases held at once $figure (max_concurrent 3), $granted granted of 1600 tries");
is($figure, 3, 'exact: never more than max_concurrent (3) held at once, and 3 reached');
cmp_ok($granted, '>=', 3, 'leases were granted and released over and over');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pklimit_leases('hot')}), '0',
	'every lease released: none left held');

my ($racy, $racy_granted) = largest_held('racy', 'racy_acquire', 'racy_release');
note("racy_acquire: largest number held at once $racy (max 3), $racy_granted granted");
cmp_ok($racy, '>', 3, 'the same harness catches a racy acquire holding more than 3 at once');

# --- a killed client's lease is held until it ends, then its slot is free
my $client = $node->background_psql('postgres');
my $pid = $client->query_safe('SELECT pg_backend_pid()');
$client->query_safe(q{SELECT pklimit_acquire('killed', 1, '15 seconds')});
my $acquired_at = $node->safe_psql('postgres', q{SELECT acquired_at FROM pklimit_leases('killed')});
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
$node->poll_query_until('postgres',
	"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $pid)")
  or die 'the killed client did not go';
eval { $client->quit };
is($node->safe_psql('postgres', qq{
	SELECT clock_timestamp() < '$acquired_at'::timestamptz + '15 seconds',
		   (SELECT token IS NULL FROM pklimit_acquire_check('killed', 1, '1 minute'))}),
	't|t', 'the killed client still holds its slot until its lease ends');
ok($node->poll_query_until('postgres', q{SELECT NOT EXISTS (SELECT FROM pklimit_leases('killed'))}),
	"then the lease ends by itself");
ok($node->poll_query_until('postgres', q{SELECT pklimit_acquire('killed', 1, '1 minute') IS NOT NULL}),
	'and its slot is free');

# --- a crash and a clean restart keep live leases
$node->safe_psql('postgres', q{SELECT pklimit_acquire('durable', 2, '1 hour') FROM generate_series(1, 2)});
my $tokens = $node->safe_psql('postgres', q{SELECT string_agg(token::text, ',' ORDER BY token) FROM pklimit_leases('durable')});
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', q{SELECT string_agg(token::text, ',' ORDER BY token) FROM pklimit_leases('durable')}),
	$tokens, 'after a crash: the same live leases');
is($node->safe_psql('postgres', q{SELECT token IS NULL, held FROM pklimit_acquire_check('durable', 2, '1 hour')}),
	't|2', 'and the key still full');
$node->restart;
is($node->safe_psql('postgres', q{SELECT count(*) FROM pklimit_leases('durable')}), '2',
	'after a clean restart too');
my ($first) = split /,/, $tokens;
is($node->safe_psql('postgres', qq{SELECT pklimit_release('durable', '$first')}), 't',
	'and a lease from before the crash is released by its token');

# --- the model: a key's live tokens, each with the length it was taken for
# (every lease an hour or more, so none ends during the run)
my %model;
my @keys = ('m1', 'm2', 'm3');
my @known;		# tokens given, some released: each (key, token)
my $session = $node->background_psql('postgres');
my ($agree, $ops) = (0, 300);
for my $i (1 .. $ops)
{
	my $op = int(rand(4));
	my $key = $keys[ int(rand(@keys)) ];
	my ($got, $want, $what);
	if ($op <= 1)
	{
		my $max = int(rand(5));
		my $held = scalar keys %{ $model{$key} // {} };
		my $row = $session->query_safe(
			"SELECT coalesce(token::text, ''), held, max_concurrent FROM pklimit_acquire_check('$key', $max, '2 hours')");
		my ($token, $h, $m) = split /\|/, $row;
		my $grant = $held < $max;
		$want = join '|', ($grant ? 'token' : ''), ($grant ? $held + 1 : $held), $max;
		$got = join '|', ($token ne '' ? 'token' : ''), $h, $m;
		if ($token ne '')
		{
			$model{$key}{$token} = 1;
			push @known, [ $key, $token ];
		}
		$what = "acquire_check('$key', $max)";
	}
	elsif ($op == 2 && @known)
	{
		my ($k, $token) = @{ $known[ int(rand(@known)) ] };
		$k = $key if rand() < 0.2;		# sometimes the wrong key
		$want = exists $model{$k}{$token} ? 't' : 'f';
		delete $model{$k}{$token};
		$got = $session->query_safe("SELECT pklimit_release('$k', '$token')");
		$what = "release('$k', token)";
	}
	elsif (@known)
	{
		my ($k, $token) = @{ $known[ int(rand(@known)) ] };
		$want = exists $model{$k}{$token} ? 't' : 'f';
		$got = $session->query_safe("SELECT pklimit_renew('$k', '$token')");
		$what = "renew('$k', token)";
	}
	else
	{
		$want = scalar keys %{ $model{$key} // {} };
		$got = $session->query_safe("SELECT count(*) FROM pklimit_leases('$key')");
		$what = "leases('$key')";
	}
	if ($got eq $want) { $agree++; next; }
	fail("call $i, $what: the server answered $got, the model $want");
	last;
}
for my $key (@keys)
{
	is($session->query_safe("SELECT coalesce(string_agg(token::text, ',' ORDER BY token), '') FROM pklimit_leases('$key')"),
		join(',', sort keys %{ $model{$key} // {} }), "the live leases of $key are the model's");
}
is($agree, $ops, "$ops calls: every answer the model's");
$session->quit;

done_testing();
