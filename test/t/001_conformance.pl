# Copyright (c) pklimit contributors
#
# Randomized conformance test: replays seeded random sequences of
# pklimit_allow / pklimit_check / pklimit_count / pklimit_forget /
# pklimit_purge calls, the same calls naming a policy (with a tenant's
# override, a cost, record_refused => false, a block, shadow mode), and
# tenant switches against a small reference model
# written in Perl, and demands identical answers for every operation
# (the README's semantics and keys and tenants: "both limiters agree").
#
# Replay a failure with the seed it prints:
#   PKLIMIT_SEED=<seed> prove ... t/001_conformance.pl
# The sequence of operations depends only on the seed.  The window an event
# lands in depends on the server clock, so a failure that needs a window to
# roll over at one exact moment may need a few runs to reproduce.
#
# Environment:
#   PKLIMIT_SEED      seed (default 20251130)
#   PKLIMIT_OPS       number of random operations (default 5000)
#   PKLIMIT_BATCH     operations per psql invocation (default 100)
#   PKLIMIT_ROLLBACK  1 (default): some transaction blocks roll back, and the
#                     events recorded inside still count (the README: the
#                     count outlives the caller's transaction); 0: all commit.
#
# Each batch of about 100 operations is one psql session (-At output, one
# line per call), compared line by line with the model; the first difference
# is reported with the operations before it and the model's rows for the
#
# The model, the runner and how the server clock is handled are in
# PklimitModel.pm.  Windows of 1.5 to 3 seconds, with pauses every 10
# batches, make windows close during the run; the rest last 15 minutes to
# 10000 years.  The scenario whose answers are written by hand is
# 003_conformance_scenario.pl.

use strict;
use warnings;

use Time::HiRes ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PklimitTest;
use PklimitModel;

my $SEED = $ENV{PKLIMIT_SEED} // 20251130;
my $NOPS = $ENV{PKLIMIT_OPS} // 5000;
my $BATCH = $ENV{PKLIMIT_BATCH} // 100;
my $ROLLBACK = $ENV{PKLIMIT_ROLLBACK} // 1;

die "PKLIMIT_SEED must be an integer\n" unless $SEED =~ /^\d+$/;
srand($SEED);
diag("pklimit conformance: PKLIMIT_SEED=$SEED PKLIMIT_OPS=$NOPS "
	  . "PKLIMIT_BATCH=$BATCH PKLIMIT_ROLLBACK=$ROLLBACK");


# ---------------------------------------------------------------------------
# The vocabulary: window lengths (several spellings each), limits, tenants
# and keys.  Byte strings throughout (no "use utf8"): multibyte text goes to
# the server as UTF-8 bytes and is compared as bytes.
# ---------------------------------------------------------------------------

# [length in microseconds, spellings...].  Months and years are refused by
# pklimit (no fixed length), so the century is spelled in days or hours.
my @WINDOWS = (
	[ 1_500_000, '1.5 seconds', '1500 milliseconds' ],
	[ 2 * USEC, '2 seconds', '00:00:02' ],
	[ 3 * USEC, '3 secs', '00:00:03' ],
	[ 900 * USEC, '15 minutes', '900 seconds', '00:15:00' ],
	[ 3600 * USEC, '1 hour', '60 minutes', '3600 seconds' ],
	[ 7200 * USEC, '2 hours', '120 minutes' ],
	[ 86400 * USEC, '1 day', '24 hours', '86400 seconds' ],
	[ 7 * 86400 * USEC, '7 days', '1 week', '168 hours' ],
	# The next three all start at the Unix epoch today but end at different
	# moments: a call with one of them counts in the key's open window,
	# whichever of them started it.
	[ 30000 * 86400 * USEC, '30000 days' ],
	[ 36500 * 86400 * USEC, '36500 days', '876000 hours' ],
	[ 3650000 * 86400 * USEC, '3650000 days' ],    # the longest accepted
);
my @SHORT = grep { $_->[0] < 900 * USEC } @WINDOWS;
my @LONG = grep { $_->[0] >= 900 * USEC } @WINDOWS;

# pklimit.default_window settings (GUC in seconds) and their lengths.
my @DEFAULT_WINDOWS = (
	[ '2s', 2 * USEC ],
	[ '3', 3 * USEC ],
	[ '15min', 900 * USEC ],
	[ '1h', 3600 * USEC ],
	[ '86400', 86400 * USEC ],
);

my @MAXES = (0, 1, 1, 2, 2, 3, 3, 5, 8, 20, 100, INT64_MAX);

# Blocks [microseconds, spelling]: longer than every short window.
my @BLOCKS = ([ 3600 * USEC, '1 hour' ], [ 86400 * USEC, '1 day' ]);

# Purge retentions [spelling, microseconds].
my @RETENTIONS = ([ '0 seconds', 0 ], [ '1 day', 86400 * USEC ]);

my $LONG_T = 'T' x 200;
my @TENANTS = (
	'a', 'a:b', 'b', '1', '12', '2', 'g', 'h', 't1', 't1:a',
	"it's", ' ', "\xc3\xbc",    # u-umlaut, 2 bytes
	"\xe6\x97\xa5\xe6\x9c\xac", # "Japan" in kanji, 6 bytes
	$LONG_T, $LONG_T . 'x',
);
# Tenants that can be given as a connection option (-c platformkit.tenant=).
my @OPTION_TENANTS = ('a', 'a:b', '1', '12', 't1');

my $P300 = 'p' x 300;
my @KEYS = (
	# tenant 'a' + 'b:c' vs tenant 'a:b' + 'c'; tenant '1' + '21' vs
	# tenant '12' + '1'; keys that look like stored keys.
	'b:c', 'c', '21', '1', 'b', 'a:b:c', ':', '::', 'g:x', 'x', 't1:a:b',
	't2:12:1', 'h:00', 'k', 'K', 'k ', "o'k", 'a\\b', "line\nbreak",
	"caf\xc3\xa9",      # NFC e-acute
	"cafe\xcc\x81",     # NFD: e + combining acute, other bytes
	"\xf0\x9f\x94\x91", # key emoji, 4 bytes
	# Long keys sharing a 300-byte prefix (stored as digests).
	$P300 . 'a', $P300 . 'b', $P300, $P300 . "\xc3\xa9",
	# Around the 256-byte readable limit of the stored key.
	('q' x 253), ('q' x 254), ('q' x 255), ('q' x 256), ('q' x 257),
);
# A few hot keys get most of the traffic so counts climb past the limits.
my @HOT = ('b:c', 'c', '21', '1', "caf\xc3\xa9", $P300 . 'a', $P300 . 'b',
	('q' x 254), ('q' x 255));

sub pick { return $_[ int(rand(scalar @_)) ]; }

# The policies, made on the node before the run (PklimitModel.pm's
# create_policies): a short window, a cost, a quota with a block, shadow
# mode, and overrides for tenants of the vocabulary.
sub policy_row
{
	my ($max, $w, %o) = @_;
	my $b = $o{block} ? pick(@BLOCKS) : [ 0, undef ];
	return { max => $max, w => $w->[0], ws => $w->[1], cost => $o{cost} // 1,
		rr => $o{rr} // 1, block => $b->[0], bs => $b->[1], shadow => $o{shadow} // 0 };
}
%POLICIES = (
	short => { default => policy_row(3, $WINDOWS[1]) },
	costly => { default => policy_row(10, $WINDOWS[4], cost => 3) },
	quota => { default => policy_row(4, $WINDOWS[9], rr => 0, block => 1) },
	shadow => { default => policy_row(2, $WINDOWS[4], shadow => 1) },
	plan => {
		default => policy_row(3, $WINDOWS[3]),
		tenants => {
			'a' => policy_row(1, $WINDOWS[3]),
			'1' => policy_row(6, $WINDOWS[6], cost => 2),
			"\xc3\xbc" => policy_row(2, $WINDOWS[0], shadow => 1),
		} },
);
my @POLICY_NAMES = sort keys %POLICIES;

# The window lengths of a policy's rows, for the model's boundary check.
sub policy_windows
{
	my $p = $POLICIES{ $_[0] };
	return [ map { $_->{w} } $p->{default}, values %{ $p->{tenants} // {} } ];
}

# ---------------------------------------------------------------------------
# Operation generator.  An operation is a hash: {op => ..., args}; the SQL
# and the expected output are derived from it.  Generation consumes the RNG
# only, never the clock, so a seed always gives the same operations.
# ---------------------------------------------------------------------------

sub gen_key
{
	return rand() < 0.6 ? pick(@HOT) : pick(@KEYS);
}

# Each key has a home window (and limit) used by most of its calls, so
# counts climb past limits; the other calls use any window, which restarts
# the count.
my (%HOME_WINDOW, %HOME_MAX);

sub gen_window
{
	my ($key) = @_;
	my $w;
	if (rand() < 0.8)
	{
		$HOME_WINDOW{$key} //= rand() < 0.2 ? pick(@SHORT) : pick(@LONG);
		$w = $HOME_WINDOW{$key};
	}
	else
	{
		$w = rand() < 0.15 ? pick(@SHORT) : pick(@LONG);
	}
	my @spellings = @{$w}[ 1 .. $#$w ];
	return ($w->[0], pick(@spellings));
}

sub gen_max
{
	my ($key) = @_;
	return pick(@MAXES) if rand() < 0.3;
	$HOME_MAX{$key} //= pick(@MAXES);
	return $HOME_MAX{$key};
}

# One operation that produces a line of output (usable inside a transaction).
# The options of a call, now and then: a cost (0 is a peek), quota
# semantics (record_refused => false), a block longer than any short window
# (an hour or a day, so no block ends during a run).
sub gen_options
{
	my %o;
	return %o if rand() < 0.5;
	$o{cost} = pick(0, 1, 1, 2, 3, 5) if rand() < 0.6;
	$o{rr} = rand() < 0.5 ? 0 : 1 if rand() < 0.4;
	if (rand() < 0.25)
	{
		my $b = pick(@BLOCKS);
		($o{block}, $o{bs}) = @$b;
	}
	return %o;
}

sub gen_call
{
	my (%opt) = @_;
	my $r = rand();
	if ($r < 0.36)
	{
		my $key = gen_key();
		my ($w, $ws) = gen_window($key);
		return { op => 'allow', key => $key, max => gen_max($key),
			w => $w, ws => $ws, gen_options() };
	}
	if ($r < 0.43)
	{
		return { op => 'allow1', key => gen_key() };
	}
	if ($r < 0.59)
	{
		my $key = gen_key();
		my ($w, $ws) = gen_window($key);
		return { op => 'check', key => $key, max => gen_max($key),
			w => $w, ws => $ws, gen_options() };
	}
	if ($r < 0.67)
	{
		# several limits in one call: 2 or 3 different keys
		my %seen;
		my @keys = grep { !$seen{$_}++ } map { gen_key() } 1 .. 2 + int(rand(2));
		my @windows = map { [ gen_window($_) ] } @keys;
		return { op => 'check_all', keys => \@keys,
			maxes => [ map { gen_max($_) } @keys ],
			wus => [ map { $_->[0] } @windows ], wss => [ map { $_->[1] } @windows ],
			gen_options() };
	}
	if ($r < 0.78)
	{
		# a call naming a policy: its own count of the key, now and then
		# with the call's cost
		# (mostly three hot keys, so that policies refuse now and then)
		my $policy = pick(@POLICY_NAMES);
		my %o = (key => rand() < 0.8 ? pick(@HOT[ 0 .. 2 ]) : gen_key(),
			policy => $policy, wus => policy_windows($policy));
		$o{cost} = pick(0, 1, 2) if rand() < 0.2;
		return { op => rand() < 0.5 ? 'allow_p' : 'check_p', %o };
	}
	if ($r < 0.82)
	{
		my $policy = pick(@POLICY_NAMES);
		my $op = rand() < 0.8 || $opt{no_forget} ? 'count_p' : 'forget_p';
		return { op => $op, key => gen_key(), policy => $policy,
			wus => policy_windows($policy) };
	}
	if ($r < 0.94 || $opt{no_forget})
	{
		return { op => 'count', key => gen_key() };
	}
	return { op => 'forget', key => gen_key() };
}

sub gen_ops
{
	my ($n) = @_;
	my @ops;
	while (@ops < $n)
	{
		my $r = rand();
		if ($r < 0.06)
		{
			my $t = rand() < 0.15 ? '' : pick(@TENANTS);
			push @ops, { op => rand() < 0.5 ? 'set' : 'set_config', tenant => $t };
		}
		elsif ($r < 0.08)
		{
			push @ops, { op => 'reset' };
		}
		elsif ($r < 0.09)
		{
			push @ops, { op => 'set_max', value => pick(0, 1, 3, 10, 50) };
		}
		elsif ($r < 0.10)
		{
			my $d = pick(@DEFAULT_WINDOWS);
			push @ops, { op => 'set_window', value => $d->[0], w => $d->[1] };
		}
		elsif ($r < 0.102)
		{
			my $ret = pick(@RETENTIONS);
			push @ops, { op => 'purge', rs => $ret->[0], r => $ret->[1] };
		}
		elsif ($r < 0.12)
		{
			# SET LOCAL inside a transaction: the tenant reverts at its end.
			# Blocks that roll back hold only allow/check/count: what a
			# rolled-back forget should do is not specified.
			my $t = rand() < 0.15 ? '' : pick(@TENANTS);
			my $rollback = $ROLLBACK && rand() < 0.4;
			push @ops, { op => 'begin', tenant => $t };
			push @ops, gen_call(no_forget => $rollback)
			  for 1 .. 1 + int(rand(5));
			push @ops, { op => $rollback ? 'rollback' : 'commit' };
		}
		else
		{
			push @ops, gen_call();
		}
	}
	return @ops;
}

# ---------------------------------------------------------------------------
# 1. The random replay.
# ---------------------------------------------------------------------------

my $node = conformance_node('conformance', "seed $SEED (replay with PKLIMIT_SEED=$SEED)");
create_policies($node);
my $failed = 0;
my $start = time();
my @all = gen_ops($NOPS);
my @conn_tenants =
  map { rand() < 0.3 ? pick(@OPTION_TENANTS) : undef } 0 .. int($NOPS / $BATCH) + 1;
my $b = 0;
while (@all && !$failed)
{
	my @ops = splice(@all, 0, $BATCH);
	# Never split a transaction block across sessions.
	while (@all && grep({ $_->{op} eq 'begin' } @ops) >
		grep({ $_->{op} eq 'commit' || $_->{op} eq 'rollback' } @ops))
	{
		push @ops, shift @all;
	}
	$b++;
	$failed = 1
	  unless run_batch("random batch $b", \@ops,
		conn_tenant => $conn_tenants[$b]);
	# Now and then let the second-long windows close between batches.
	Time::HiRes::sleep(1.6) if $b % 10 == 0 && @all;
}

# ---------------------------------------------------------------------------
# 2. Every (tenant, key) of the vocabulary, counted: nothing leaked between
#    tenants or keys that the random batches happened not to ask about.
# ---------------------------------------------------------------------------

if (!$failed)
{
	my @ops;
	for my $t ('', @TENANTS)
	{
		push @ops, { op => 'set', tenant => $t };
		push @ops, map { { op => 'count', key => $_ } } @KEYS;
	}
	$failed = 1 unless run_batch('count of every tenant and key', \@ops);
}

note("coverage: " . join(', ', map { "$_=$coverage{$_}" } sort keys %coverage));
note(operations_compared() . " operations compared, " . replays()
	  . " replays after a window boundary, " . (time() - $start) . " s");
ok(operations_compared() >= $NOPS, "at least $NOPS operations compared (" . operations_compared() . ")")
  unless $failed;

$node->stop;
done_testing();
