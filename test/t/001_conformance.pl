# Copyright (c) pklimit contributors
#
# Randomized conformance test: replays seeded random sequences of
# pklimit_allow / pklimit_check / pklimit_count / pklimit_forget /
# pklimit_purge calls and tenant switches against a small reference model
# written in Perl, and demands identical answers for every operation
# (SPEC.md sections 2, 3 and 10: "both limiters agree").
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
#                     events recorded inside still count (SPEC section 1: the
#                     count outlives the caller's transaction); 0: all commit.
#
# Each batch of about 100 operations is one psql session (-At output, one
# line per call), compared line by line with the model; the first difference
# is reported with the operations before it and the model's rows for the
# key.  A batch also fails if psql prints anything on stderr (a WARNING that
# the store was unavailable, say), or if the number of rows in
# platformkit_limits differs from the model's (count/forget creating rows,
# two keys sharing a row).
#
# How the clock is handled: every batch's first and last statements read
# clock_timestamp(), the server clock pklimit itself uses, so every event of
# the batch is recorded between those two readings.  If no window boundary
# of a length that matters to the batch (one its calls use, one a row of the
# model has) falls inside that interval, every operation of the batch sees
# the same current window, and the model computes it from the first reading.
# If a boundary does fall inside (only likely for the second-long windows),
# the batch's outcome is not predictable: the table and the model are both
# emptied and the batch is replayed, at most 10 times, after which the test
# fails.  The model never uses now() and never reads the table to decide an
# answer.  Windows of 1.5 to 3 seconds, with pauses every 10 batches, make
# windows close during the run; the rest last 15 minutes to 10000 years.

use strict;
use warnings;

use Time::HiRes ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PklimitTest;


my $SEED = $ENV{PKLIMIT_SEED} // 20251130;
my $NOPS = $ENV{PKLIMIT_OPS} // 5000;
my $BATCH = $ENV{PKLIMIT_BATCH} // 100;
my $ROLLBACK = $ENV{PKLIMIT_ROLLBACK} // 1;
my $MAX_ATTEMPTS = 10;

die "PKLIMIT_SEED must be an integer\n" unless $SEED =~ /^\d+$/;
srand($SEED);
diag("pklimit conformance: PKLIMIT_SEED=$SEED PKLIMIT_OPS=$NOPS "
	  . "PKLIMIT_BATCH=$BATCH PKLIMIT_ROLLBACK=$ROLLBACK");

use constant USEC => 1_000_000;
use constant INT64_MAX => 9223372036854775807;

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
	# moments: same window_start, different length, so no shared count.
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
my $DEFAULT_MAX = 10;
my $DEFAULT_WINDOW = 900 * USEC;

my @MAXES = (0, 1, 1, 2, 2, 3, 3, 5, 8, 20, 100, INT64_MAX);

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

sub q_lit
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

# Printable form of a byte string for diagnostics.
sub show
{
	my ($s) = @_;
	return 'undef' unless defined $s;
	my $out = $s;
	$out =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord($1))/ge;
	$out = substr($out, 0, 24) . '...(' . length($s) . ' bytes)'
	  if length($out) > 40;
	return "'$out'";
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
sub gen_call
{
	my (%opt) = @_;
	my $r = rand();
	if ($r < 0.40)
	{
		my $key = gen_key();
		my ($w, $ws) = gen_window($key);
		return { op => 'allow', key => $key, max => gen_max($key),
			w => $w, ws => $ws };
	}
	if ($r < 0.47)
	{
		return { op => 'allow1', key => gen_key() };
	}
	if ($r < 0.67)
	{
		my $key = gen_key();
		my ($w, $ws) = gen_window($key);
		return { op => 'check', key => $key, max => gen_max($key),
			w => $w, ws => $ws };
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

sub op_sql
{
	my ($o) = @_;
	my $op = $o->{op};
	my $k = defined $o->{key} ? q_lit($o->{key}) : undef;
	return "SET platformkit.tenant = " . q_lit($o->{tenant}) . ";"
	  if $op eq 'set';
	return "SELECT pg_catalog.set_config('platformkit.tenant', "
	  . q_lit($o->{tenant}) . ", false);"
	  if $op eq 'set_config';
	return "RESET platformkit.tenant;" if $op eq 'reset';
	return "SET pklimit.default_max = $o->{value};" if $op eq 'set_max';
	return "SET pklimit.default_window = " . q_lit($o->{value}) . ";"
	  if $op eq 'set_window';
	return "BEGIN; SET LOCAL platformkit.tenant = " . q_lit($o->{tenant}) . ";"
	  if $op eq 'begin';
	return "COMMIT;" if $op eq 'commit';
	return "ROLLBACK;" if $op eq 'rollback';
	return "SELECT pklimit_purge(" . q_lit($o->{rs}) . ");" if $op eq 'purge';
	return "SELECT pklimit_allow($k, $o->{max}, " . q_lit($o->{ws}) . ");"
	  if $op eq 'allow';
	return "SELECT pklimit_allow($k);" if $op eq 'allow1';
	return
	    "SELECT allowed, count, remaining,"
	  . " (extract(epoch FROM reset_at) * 1000000)::bigint,"
	  . " (extract(epoch FROM retry_after) * 1000000)::bigint, status"
	  . " FROM pklimit_check($k, $o->{max}, "
	  . q_lit($o->{ws}) . ");"
	  if $op eq 'check';
	return "SELECT pklimit_count($k);" if $op eq 'count';
	return "SELECT pklimit_forget($k);" if $op eq 'forget';
	die "unknown op $op";
}

# The operation in short, for the failure report.
sub op_desc
{
	my ($o) = @_;
	my $op = $o->{op};
	return "pklimit_allow(" . show($o->{key}) . ", $o->{max}, '$o->{ws}')"
	  if $op eq 'allow';
	return "pklimit_check(" . show($o->{key}) . ", $o->{max}, '$o->{ws}')"
	  if $op eq 'check';
	return "pklimit_$op(" . show($o->{key}) . ")"
	  if $op eq 'count' || $op eq 'forget';
	return "pklimit_allow(" . show($o->{key}) . ")" if $op eq 'allow1';
	return "set_config('platformkit.tenant', " . show($o->{tenant}) . ")"
	  if $op eq 'set_config';
	return "SET platformkit.tenant = " . show($o->{tenant}) if $op eq 'set';
	return "BEGIN; SET LOCAL platformkit.tenant = " . show($o->{tenant})
	  if $op eq 'begin';
	return op_sql($o);
}

# Does the operation print a line?
sub op_prints
{
	my ($o) = @_;
	return $o->{op} !~ /^(set|reset|set_max|set_window|begin|commit|rollback)$/;
}

# ---------------------------------------------------------------------------
# The reference model.  State: "tenant\0key" -> {ws, we, count} (tenant ''
# is the global namespace), plus per-session settings.  $t is the server
# time (microseconds since the epoch) of the batch; the caller guarantees no
# window boundary of any length in use lies between that time and the
# events, so every event of the batch is in the window containing $t.
# ---------------------------------------------------------------------------

our %coverage;
my %model;    # the model's table

sub window_of
{
	my ($t, $w) = @_;
	use integer;
	my $ws = ($t / $w) * $w;    # $t > 0: truncation is floor
	return ($ws, $ws + $w);
}

sub model_hit
{
	my ($rows, $id, $t, $w) = @_;
	my ($ws, $we) = window_of($t, $w);
	my $row = $rows->{$id};
	if ($row && $row->{ws} == $ws && $row->{we} == $we)
	{
		$row->{count}++ if $row->{count} < INT64_MAX;    # saturates
		$coverage{increment}++;
	}
	else
	{
		if ($row)
		{
			if ($row->{ws} == $ws) { $coverage{restart_same_start}++; }
			elsif ($row->{we} <= $t) { $coverage{restart_closed}++; }
			else { $coverage{restart_other_window}++; }
		}
		$row = $rows->{$id} = { ws => $ws, we => $we, count => 1 };
	}
	return $row;
}

# Apply the batch's operations to the model; returns the expected output
# lines, each as [expected string, op index, matcher].
sub model_run
{
	my ($rows, $ops, $t, $conn_tenant) = @_;
	my %s = (
		tenant => $conn_tenant // '',
		local_tenant => undef,
		max => $DEFAULT_MAX,
		window => $DEFAULT_WINDOW,
		in_txn => 0);
	my @expect;
	for my $i (0 .. $#$ops)
	{
		my $o = $ops->[$i];
		my $op = $o->{op};
		my $tenant = $s{local_tenant} // $s{tenant};
		my $id = defined $o->{key} ? "$tenant\0$o->{key}" : undef;
		$o->{_tenant} = $tenant;    # for the failure report

		if ($op eq 'set') { $s{tenant} = $o->{tenant}; next; }
		if ($op eq 'set_config')
		{
			$s{tenant} = $o->{tenant};
			push @expect, [ $o->{tenant}, $i ];
			next;
		}
		if ($op eq 'reset') { $s{tenant} = $conn_tenant // ''; next; }
		if ($op eq 'set_max') { $s{max} = $o->{value}; next; }
		if ($op eq 'set_window') { $s{window} = $o->{w}; next; }
		if ($op eq 'begin') { $s{local_tenant} = $o->{tenant}; next; }
		if ($op eq 'commit' || $op eq 'rollback')
		{
			$s{local_tenant} = undef;
			next;
		}
		if ($op eq 'allow' || $op eq 'allow1')
		{
			my ($max, $w) =
			  $op eq 'allow' ? ($o->{max}, $o->{w}) : ($s{max}, $s{window});
			my $row = model_hit($rows, $id, $t, $w);
			push @expect, [ $row->{count} <= $max ? 't' : 'f', $i ];
			$coverage{refused}++ if $row->{count} > $max;
			next;
		}
		if ($op eq 'check')
		{
			my $row = model_hit($rows, $id, $t, $o->{w});
			my $allowed = $row->{count} <= $o->{max};
			my $remaining = $allowed ? $o->{max} - $row->{count} : 0;
			push @expect,
			  [
				join('|',
					$allowed ? 't' : 'f', $row->{count}, $remaining,
					$row->{we}, $allowed ? 0 : '<retry_after>', 'ok'),
				$i,
				{ retry_for_we => $allowed ? undef : $row->{we} }
			  ];
			next;
		}
		if ($op eq 'count')
		{
			my $row = $rows->{$id};
			my $c = 0;
			if ($row)
			{
				if ($row->{we} > $t) { $c = $row->{count}; }
				else { $coverage{count_closed}++; }
			}
			push @expect, [ $c, $i ];
			next;
		}
		if ($op eq 'forget')
		{
			my $existed = exists $rows->{$id};
			delete $rows->{$id};
			$coverage{forget_existing}++ if $existed;
			push @expect, [ $existed ? 't' : 'f', $i ];
			next;
		}
		if ($op eq 'purge')
		{
			my $n = 0;
			for my $k (keys %$rows)
			{
				if ($rows->{$k}{we} + $o->{r} < $t)
				{
					delete $rows->{$k};
					$n++;
				}
			}
			$coverage{purged} += $n;
			push @expect, [ $n, $i ];
			next;
		}
		die "unknown op $op";
	}
	return @expect;
}

# Is there a window boundary (or a purge cutoff boundary) in [$t0, $t1] for
# a window length that matters to this batch (one its operations use or one
# a row of the model has)?  Then the batch's events may have landed in
# different windows and the model cannot say which.
sub boundary_crossed
{
	my ($t0, $t1, $ops) = @_;
	my %lengths = ($DEFAULT_WINDOW => 1);
	my %retentions = (0 => 1);
	$lengths{ $_->{we} - $_->{ws} } = 1 for values %model;
	for my $o (@$ops)
	{
		$lengths{ $o->{w} } = 1 if defined $o->{w};
		$retentions{ $o->{r} } = 1 if defined $o->{r};
	}
	use integer;
	for my $w (sort { $a <=> $b } keys %lengths)
	{
		for my $r (keys %retentions)
		{
			# boundaries are at k*w + r; is one in [t0, t1]?
			return $w if ($t0 - $r - 1) / $w != ($t1 - $r) / $w;
		}
	}
	return 0;
}

# ---------------------------------------------------------------------------
# The server.
# ---------------------------------------------------------------------------

my $node = PostgreSQL::Test::Cluster->new('conformance');
$node->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pklimit'\nlog_statement = none\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pklimit');

my $CLOCK =
  "SELECT (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::bigint;\n";
my $ROWS = "SELECT count(*) FROM platformkit_limits;\n";    # as superuser

my $total_ops = 0;
my $wipes = 0;
my $failed = 0;

# Run one batch of operations in one psql session, compare every line.
# Returns the raw output lines of the operations (after the clock line) on
# success, undef after reporting a failure.
sub run_batch
{
	my ($name, $ops, %opt) = @_;
	my $conn_tenant = $opt{conn_tenant};
	my $connstr = $node->connstr('postgres');
	$connstr .= " options='-c platformkit.tenant=$conn_tenant'"
	  if defined $conn_tenant;
	my $script = $CLOCK . join('', map { op_sql($_) . "\n" } @$ops)
	  . $ROWS . $CLOCK;

	for my $attempt (1 .. $MAX_ATTEMPTS)
	{
		my ($stdout, $stderr);
		my $ret = $node->psql(
			'postgres', $script,
			connstr => $connstr,
			stdout => \$stdout,
			stderr => \$stderr);
		# Any WARNING (the store "unavailable", say) fails the batch too: the
		# model expects every call to reach the store.
		if ($ret != 0 || $stderr ne '')
		{
			fail("$name: psql ran cleanly");
			diag("psql exit $ret; seed $SEED; stderr:\n$stderr");
			return undef;
		}
		my @got = split /\n/, $stdout, -1;
		my $t0 = shift @got;
		my $t1 = pop @got;
		my $nrows = pop @got;
		if (!defined $t1 || $t0 !~ /^\d+$/ || $t1 !~ /^\d+$/)
		{
			fail("$name: could not read the server clock");
			diag("output:\n$stdout");
			return undef;
		}
		if (my $w = boundary_crossed($t0, $t1, $ops))
		{
			# Not predictable: empty both sides and replay.
			note("$name: a boundary of the ${w}us window passed during the "
				  . "batch ($t0..$t1), emptying table and model, replaying");
			$node->safe_psql('postgres', 'DELETE FROM platformkit_limits');
			%model = ();
			$wipes++;
			next;
		}

		my %before = map { $_ => {%{ $model{$_} }} } keys %model;
		my @expect = model_run(\%model, $ops, $t0, $conn_tenant);
		my $mismatch = compare(\@expect, \@got, $t0, $t1);
		if (!defined $mismatch && $nrows ne scalar(keys %model))
		{
			$mismatch = "platformkit_limits has $nrows rows, the model "
			  . scalar(keys %model)
			  . " (count/forget created rows, or two keys share a row)";
		}
		if (defined $mismatch)
		{
			fail("$name: answers agree with the model");
			report($name, $ops, \@expect, \@got, $mismatch, $t0, $t1,
				\%before, $conn_tenant);
			return undef;
		}
		pass("$name: " . scalar(@$ops) . " operations agree with the model");
		$total_ops += @$ops;
		return \@got;
	}
	fail("$name: a window boundary passed in each of $MAX_ATTEMPTS attempts");
	return undef;
}

# Returns undef if all lines match, else a description of the first mismatch
# (and sets $_->[3] = 1 on the offending expectation).
sub compare
{
	my ($expect, $got, $t0, $t1) = @_;
	for my $n (0 .. $#$expect)
	{
		my ($exp, $i, $m) = @{ $expect->[$n] };
		my $g = $got->[$n];
		if (!defined $g)
		{
			$expect->[$n][3] = 1;
			return "output line " . ($n + 1) . " missing";
		}
		my $ok;
		if ($m && exists $m->{retry_for_we})
		{
			# pklimit_check: all fields exact except retry_after, which must
			# be reset_at minus the event's time, an instant in [t0, t1].
			my @e = split /\|/, $exp, -1;
			my @f = split /\|/, $g, -1;
			$ok = @f == @e;
			for my $c (0 .. $#e)
			{
				last unless $ok;
				if ($e[$c] eq '<retry_after>')
				{
					my $we = $m->{retry_for_we};
					$ok = $f[$c] =~ /^\d+$/
					  && $f[$c] >= $we - $t1
					  && $f[$c] <= $we - $t0;
				}
				else
				{
					$ok = $f[$c] eq $e[$c];
				}
			}
		}
		else
		{
			$ok = $g eq $exp;
		}
		if (!$ok)
		{
			$expect->[$n][3] = 1;
			return "operation " . ($i + 1) . ": expected "
			  . show($exp) . ", got " . show($g);
		}
	}
	return "output has " . scalar(@$got) . " lines, expected "
	  . scalar(@$expect)
	  if @$got != @$expect;
	return undef;
}

sub report
{
	my ($name, $ops, $expect, $got, $mismatch, $t0, $t1, $before, $conn_tenant) = @_;
	my @lines = ("$name: first difference: $mismatch",
		"seed $SEED (replay with PKLIMIT_SEED=$SEED), server clock $t0..$t1 us,"
		  . " connection tenant " . show($conn_tenant));
	my ($bad) = grep { $expect->[$_][3] } 0 .. $#$expect;
	my %line_of = map { $expect->[$_][1] => $_ } 0 .. $#$expect;
	my $bad_op = defined $bad ? $expect->[$bad][1] : $#$ops;
	my $from = $bad_op - 12 < 0 ? 0 : $bad_op - 12;
	push @lines, "operations " . ($from + 1) . ".." . ($bad_op + 1) . " of the batch:";
	for my $i ($from .. $bad_op)
	{
		my $sql = op_desc($ops->[$i]);
		my $l = $line_of{$i};
		my $res = defined $l
		  ? "  => got " . show($got->[$l]) . ", model " . show($expect->[$l][0])
		  : '';
		push @lines, sprintf("  %4d %s%s", $i + 1, $sql, $res);
	}
	my $o = $ops->[$bad_op];
	if (defined $o->{key})
	{
		# Replay the model up to just before the failing operation.
		my %rows = map { $_ => {%{ $before->{$_} }} } keys %$before;
		model_run(\%rows, [ @{$ops}[ 0 .. $bad_op - 1 ] ], $t0, $conn_tenant)
		  if $bad_op > 0;
		push @lines, "tenant in effect: " . show($o->{_tenant});
		push @lines, "model rows for key " . show($o->{key})
		  . " just before operation " . ($bad_op + 1)
		  . " (tenant, window start, window end, count; times in us):";
		for my $id (sort keys %rows)
		{
			my ($t, $k) = split /\0/, $id, 2;
			next unless $k eq $o->{key};
			my $r = $rows{$id};
			push @lines, "  " . show($t) . " $r->{ws} $r->{we} $r->{count}";
		}
	}
	diag(join("\n", @lines));
	return;
}

# ---------------------------------------------------------------------------
# 1. The random replay.
# ---------------------------------------------------------------------------

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

# ---------------------------------------------------------------------------
# 3. A fixed scenario whose answers are also written out by hand, so the
#    model itself is checked: windows that close, restart after closing,
#    same start but different length, one length spelled two ways, default
#    limit and window, global namespace versus tenants.
# ---------------------------------------------------------------------------

if (!$failed)
{
	my $A = { op => 'set', tenant => 'a' };
	my @s1 = (
		$A,
		(map { { op => 'allow', key => 'closing', max => 2, w => 1_500_000,
			ws => '1.5 seconds' } } 1 .. 3),
		{ op => 'count', key => 'closing' },
		(map { { op => 'allow', key => 'epoch', max => 5,
			w => 30000 * 86400 * USEC, ws => '30000 days' } } 1 .. 2),
		{ op => 'allow', key => 'epoch', max => 1,
			w => 36500 * 86400 * USEC, ws => '36500 days' },
		{ op => 'check', key => 'epoch', max => 1,
			w => 36500 * 86400 * USEC, ws => '876000 hours' },
		{ op => 'count', key => 'epoch' },
		{ op => 'reset' },
		{ op => 'count', key => 'epoch' },
		{ op => 'allow1', key => 'epoch' },
		{ op => 'set', tenant => '' },
		{ op => 'count', key => 'epoch' },
		{ op => 'set_max', value => 0 },
		{ op => 'allow1', key => 'epoch' },
		{ op => 'count', key => 'epoch' },
	);
	my $got = run_batch('fixed scenario, part 1', \@s1);
	if ($got)
	{
		my @want = ('t', 't', 'f', '3', 't', 't', 't', 'f|2|0', '2', '0',
			't', '1', 'f', '2');
		my @g = @{$got}[ 0 .. $#want ];
		$g[7] =~ s/^([tf]\|\d+\|\d+)\|.*$/$1/;
		is_deeply(\@g, \@want, 'fixed scenario, part 1: answers written by hand');
	}
	else { $failed = 1; }

	# Let the 1.5-second window close, by the server's clock.
	if (!$failed)
	{
		my ($t) = split /\n/, $node->safe_psql('postgres', $CLOCK);
		my (undef, $we) = window_of($t, 1_500_000);
		$node->safe_psql('postgres',
			sprintf("SELECT pg_sleep(%.3f);", ($we - $t) / USEC + 0.05));
		my @s2 = (
			$A,
			{ op => 'count', key => 'closing' },     # window closed: 0
			{ op => 'allow', key => 'closing', max => 2, w => 1_500_000,
				ws => '1500 milliseconds' },         # restarts at 1
			{ op => 'count', key => 'closing' },
			{ op => 'forget', key => 'closing' },
			{ op => 'forget', key => 'closing' },
			{ op => 'count', key => 'closing' },
			{ op => 'count', key => 'epoch' },       # long window: still 2
		);
		$got = run_batch('fixed scenario, part 2', \@s2);
		if ($got)
		{
			is_deeply($got, [ '0', 't', '1', 't', 'f', '0', '2' ],
				'fixed scenario, part 2: answers written by hand');
		}
		else { $failed = 1; }
	}
}

note("coverage: " . join(', ', map { "$_=$coverage{$_}" } sort keys %coverage));
note("$total_ops operations compared, $wipes replays after a window boundary, "
	  . (time() - $start) . " s");
ok($total_ops >= $NOPS, "at least $NOPS operations compared ($total_ops)")
  unless $failed;

$node->stop;
done_testing();
