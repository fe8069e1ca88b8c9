# Copyright (c) pklimit contributors
#
# One batch, many calls: the worker is held (SIGSTOP) while calls from many
# sessions queue up one after another, in a known order, then let go, so it
# takes them all at once, folds the hits on one key into one row update and
# commits once.  Every caller must get exactly what serial execution in that
# order gives:
#
#   - the hits on one key get 1..n in order, and exactly max_count of them
#     are allowed;
#   - the same key in other tenants, and two long keys stored as digests that
#     share their first 300 bytes, are counted apart;
#   - a key with a count already gets the counts after it;
#   - near the largest bigint, folded hits get their own counts, up to the
#     maximum and then the maximum (a folded row update that saturates does
#     not say where it started: the worker applies those events one by one);
#   - a count or a forget between hits on one key sees and does what it
#     would in that order; a hit with another window length counts in the
#     key's open window;
#   - a row locked by another transaction holds up only the writes on it: the
#     rest of the batch, a count of that key included, is answered while the
#     lock is held, and the locked key's two events are recorded in order
#     once the lock is gone.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Math::BigInt;
use FindBin;
use lib $FindBin::RealBin;
use PklimitTest;

my $node = pklimit_node('batch', "max_connections = 60\nlog_statement = none\n");
my $MAX = '9223372036854775807';
my $long = 'L' x 300;

$node->safe_psql(
	'postgres', qq{
	SELECT pklimit_allow('pre', 100, '36500 days') FROM generate_series(1, 3);
	SELECT pklimit_allow(k, $MAX, '36500 days') FROM unnest(ARRAY['sat1', 'sat3', 'sat4']) k;
	UPDATE platformkit_limits SET count = $MAX - 1 WHERE key = 'g:sat1';
	UPDATE platformkit_limits SET count = $MAX - 3 WHERE key = 'g:sat3';
	UPDATE platformkit_limits SET count = $MAX - 4 WHERE key = 'g:sat4';
	SELECT pklimit_allow('held', 100, '36500 days');
});

# The calls, in the order they are queued: [label, SQL, expected answer].
my $check = sub {
	my ($key, $max, $window, $tenant) = @_;
	my $set = defined $tenant ? "SET platformkit.tenant = '$tenant'; " : '';
	return "${set}SELECT allowed, count, status FROM pklimit_check('$key', $max, '$window')";
};
my $D = '36500 days';
my $below = sub { (Math::BigInt->new($MAX) - $_[0])->bstr };
my @calls = (
	[ 'held', $check->('held', 100, $D), 't|2|ok' ],    # recorded after the lock goes
	[ 'held count', "SELECT pklimit_count('held')", '1' ],    # reads: not held up
	(map { [ "hot #$_", $check->('hot', 4, $D), ($_ <= 4 ? 't' : 'f') . "|$_|ok" ] } 1 .. 6),
	(map { [ "t1/hot #$_", $check->('hot', 4, $D, 't1'), "t|$_|ok" ] } 1 .. 3),
	(map { [ "t2/hot #$_", $check->('hot', 4, $D, 't2'), "t|$_|ok" ] } 1 .. 2),
	(map { [ "long key a #$_", $check->("${long}a", 10, $D), "t|$_|ok" ] } 1 .. 2),
	[ 'long key b', $check->("${long}b", 10, $D), 't|1|ok' ],
	(map { [ "pre #$_", $check->('pre', 100, $D), "t|$_|ok" ] } 4 .. 5),
	(map { [ "max-1 #$_", $check->('sat1', $MAX, $D), "t|$MAX|ok" ] } 1 .. 3),
	(map {
		[ "max-3 #$_", $check->('sat3', $below->(1), $D),
			($_ <= 2 ? 't' : 'f') . '|' . $below->(3 - $_ < 0 ? 0 : 3 - $_) . '|ok' ]
	} 1 .. 4),
	(map { [ "max-4 #$_", $check->('sat4', $MAX, $D), 't|' . $below->(4 - $_) . '|ok' ] } 1 .. 4),
	[ 'seq hit', $check->('seq', 10, $D), 't|1|ok' ],
	[ 'seq count', "SELECT pklimit_count('seq')", '1' ],
	[ 'seq hit', $check->('seq', 10, $D), 't|2|ok' ],
	[ 'seq forget', "SELECT pklimit_forget('seq')", 't' ],
	[ 'seq hit after the forget', $check->('seq', 10, $D), 't|1|ok' ],
	[ 'seq hit, another window length', $check->('seq', 10, '1 hour'), 't|2|ok' ],    # counts in the open window
	[ 'seq hit, that length again', $check->('seq', 10, '1 hour'), 't|3|ok' ],
	[ 'seq count', "SELECT pklimit_count('seq')", '3' ],
	[ 'held again', $check->('held', 100, $D), 't|3|ok' ],    # after the first
);

my $worker = worker_pid($node);
ok($worker, 'the worker runs');

# Lock one row; hold the worker while it waits for work, not while it holds
# the queue's lock.
my $locker = $node->background_psql('postgres');
is($locker->query_safe("BEGIN; SELECT 1 FROM platformkit_limits WHERE key = 'g:held' FOR UPDATE"),
	'1', 'a row is locked by another transaction');
ok( $node->poll_query_until(
		'postgres',
		"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $worker"),
	'the worker waits for work');
kill 'STOP', $worker or die "cannot stop the worker: $!";

sub waiting
{
	return "SELECT count(*) FROM pg_stat_activity"
	  . " WHERE wait_event_type = 'Extension' AND backend_type = 'client backend'";
}
my @runs;
my $n = 0;
for my $c (@calls)
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
			'-c', "SET pklimit.timeout = '60s'; $c->[1]"
		],
		'>', \$out, '2>', \$err);
	push @runs, [ $c, $h, \$out, \$err ];
	$n++;
	# the next call arrives only once this one is queued
	$node->poll_query_until('postgres', waiting(), $n)
	  or die "call $n did not queue";
}
pass("$n calls queued one after another while the worker is held");
is($node->safe_psql('postgres', "SELECT queue_depth FROM pklimit_stats WHERE datname = 'postgres'"),
	$n, "pklimit_stats shows the $n requests waiting");
kill 'CONT', $worker;

# Every caller but the locked key's writers is answered while the row is
# locked.
my @writers = grep { $_->[0][0] =~ /^held(?! count)/ } @runs;
for my $r (grep { $_->[0][0] !~ /^held(?! count)/ } @runs)
{
	my ($c, $h, $out, $err) = @$r;
	$h->finish;
	chomp $$out;
	is($$out, $c->[2], "$c->[0]: $c->[2]");
	is($$err, '', "$c->[0]: no warning or error") or diag($$err);
}
is($node->safe_psql('postgres', waiting()), '2',
	'meanwhile the locked key\'s two writers still wait');
$locker->query_safe('COMMIT');
$locker->quit;
for my $r (@writers)
{
	my ($c, $h, $out, $err) = @$r;
	$h->finish;
	chomp $$out;
	is($$out, $c->[2], "$c->[0]: its event recorded once the lock was gone, in order");
}
is(worker_pid($node), $worker, 'the worker survived the batch');

is( $node->safe_psql(
		'postgres', qq{
	SELECT pklimit_count('hot') || ' ' || pklimit_count('pre') || ' ' || pklimit_count('seq')
	  || ' ' || pklimit_count('${long}a') || ' ' || pklimit_count('held')
	  || ' ' || (pklimit_count('sat3') = $MAX) || ' ' || (pklimit_count('sat4') = $MAX)}),
	'6 5 3 2 3 true true',
	'the counts stored');
is($node->safe_psql('postgres', "SET platformkit.tenant = 't1'; SELECT pklimit_count('hot')"),
	'3', 'tenant t1 stored 3');

$node->stop;
done_testing();
