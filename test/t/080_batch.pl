# Copyright (c) pklimit contributors
#
# One batch, many keys: the worker is stopped (SIGSTOP) while calls from
# many sessions queue up, then let go, so it takes them all at once and
# records the hits on distinct keys with one statement.  Every caller must
# still get what serial execution in some order gives:
#
#   - the hits on one key get the counts 1..n, each once, whatever the order
#     (and so exactly max_count of them are allowed);
#   - the same key in other tenants, and two long keys stored as digests that
#     share their first 300 bytes, are counted apart;
#   - a key with a count already gets the counts after it; a count near the
#     largest bigint saturates for every event;
#   - hits with two window lengths on one key each start a count of 1;
#   - a forget in the batch deletes the row;
#   - a row locked by another transaction holds up only its own caller: the
#     rest of the batch is answered while the lock is held, and the locked
#     key's event is recorded once the lock is gone.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib $FindBin::RealBin;
use PklimitTest;

my $node = pklimit_node('batch', "max_connections = 60\nlog_statement = none\n");
my $MAX = '9223372036854775807';
my $long = 'L' x 300;

$node->safe_psql(
	'postgres', qq{
	SELECT pklimit_allow('pre', 100, '36500 days') FROM generate_series(1, 3);
	SELECT pklimit_allow('sat', $MAX, '36500 days');
	UPDATE platformkit_limits SET count = $MAX - 1 WHERE key = 'g:sat';
	SELECT pklimit_allow('gone', 100, '36500 days') FROM generate_series(1, 2);
	SELECT pklimit_allow('held', 100, '36500 days');
});

# The calls of the batch: [label, SQL]; each runs in a session of its own.
my $check = sub {
	my ($key, $max, $window, $tenant) = @_;
	my $set = defined $tenant ? "SET platformkit.tenant = '$tenant'; " : '';
	return "${set}SELECT allowed, count, status FROM pklimit_check('$key', $max, '$window')";
};
my @calls;
push @calls, [ 'hot', $check->('hot', 4, '36500 days') ] for 1 .. 6;
push @calls, [ 't1/hot', $check->('hot', 4, '36500 days', 't1') ] for 1 .. 3;
push @calls, [ 't2/hot', $check->('hot', 4, '36500 days', 't2') ] for 1 .. 2;
push @calls, [ 'long-a', $check->("${long}a", 10, '36500 days') ] for 1 .. 2;
push @calls, [ 'long-b', $check->("${long}b", 10, '36500 days') ];
push @calls, [ 'pre', $check->('pre', 100, '36500 days') ] for 1 .. 2;
push @calls, [ 'sat', $check->('sat', $MAX, '36500 days') ] for 1 .. 3;
push @calls, [ 'mixed', $check->('mixed', 10, '1 hour') ];
push @calls, [ 'mixed', $check->('mixed', 10, '2 hours') ];
push @calls, [ 'gone', "SELECT pklimit_forget('gone')" ];
push @calls, [ 'held', $check->('held', 100, '36500 days') ];

my $worker = worker_pid($node);
ok($worker, 'the worker runs');

# Lock one row, stop the worker, and queue every call.
my $locker = $node->background_psql('postgres');
$locker->query_safe("BEGIN; SELECT 1 FROM platformkit_limits WHERE key = 'g:held' FOR UPDATE");
kill 'STOP', $worker or die "cannot stop the worker: $!";
my @runs;
for my $c (@calls)
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
			'-c', "SET pklimit.timeout = '20s'; $c->[1]"
		],
		'>', \$out, '2>', \$err);
	push @runs, [ $c->[0], $h, \$out, \$err ];
}
my $queued = $node->poll_query_until('postgres',
	"SELECT count(*) = " . scalar(@calls)
	  . " FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND backend_type = 'client backend'");
ok($queued, scalar(@calls) . ' calls wait in the queue while the worker is stopped');
kill 'CONT', $worker;

# Every other caller is answered while the row is still locked; the locked
# key's caller only after the commit.
my %got;
for my $r (@runs)
{
	my ($label, $h, $out, $err) = @$r;
	next if $label eq 'held';
	$h->finish;
	chomp $$out;
	push @{ $got{$label} }, $$out;
	is($$err, '', "$label: no warning or error") or diag($$err);
}
$locker->query_safe('COMMIT');
$locker->quit;
for my $r (grep { $_->[0] eq 'held' } @runs)
{
	$r->[1]->finish;
	chomp ${ $r->[2] };
	push @{ $got{held} }, ${ $r->[2] };
}
is(worker_pid($node), $worker, 'one worker served the whole batch');

sub counts
{
	my ($label) = @_;
	return join(',', sort { $a <=> $b } map { (split /\|/)[1] } @{ $got{$label} });
}
sub allowed
{
	my ($label) = @_;
	return scalar grep { /^t\|/ } @{ $got{$label} };
}

is(counts('hot'), '1,2,3,4,5,6', 'six hits on one key: counts 1 to 6, each once');
is(allowed('hot'), 4, 'exactly max_count (4) of them allowed');
is(counts('t1/hot'), '1,2,3', 'the same key in tenant t1: counted apart');
is(counts('t2/hot'), '1,2', 'and in tenant t2');
is(counts('long-a'), '1,2', 'a long key stored as a digest');
is(counts('long-b'), '1', 'and another with the same first 300 bytes, counted apart');
is(counts('pre'), '4,5', 'a key with a count of 3 gets 4 and 5');
is(counts('sat'), "$MAX,$MAX,$MAX", 'a count one below the largest bigint saturates for every event');
is(counts('mixed'), '1,1', 'another window length on one key starts a count of 1 each time');
is(join('', @{ $got{gone} }), 't', 'the forget found its row');
is($got{held}[0], 't|2|ok', 'the locked key: recorded once the lock was gone');

is( $node->safe_psql(
		'postgres', qq{
	SELECT pklimit_count('hot') || ' ' || pklimit_count('pre') || ' ' || pklimit_count('gone')
	  || ' ' || pklimit_count('${long}a') || ' ' || pklimit_count('held')
	  || ' ' || (pklimit_count('sat') = $MAX)}),
	'6 5 0 2 2 true',
	'the counts stored: hot 6, pre 5, gone 0, the long key 2, held 2, sat saturated');
is($node->safe_psql('postgres', "SET platformkit.tenant = 't1'; SELECT pklimit_count('hot')"),
	'3', 'tenant t1 stored 3');

$node->stop;
done_testing();
