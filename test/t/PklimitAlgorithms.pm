# PklimitAlgorithms: the reference models of pklimit's three algorithms
# (fixed window, GCRA, sliding window), one model each, with the events
# pklimit_decrement takes back, written from docs/algorithms.md (the
# contract) and nothing else.  004_algorithms.pl compares the server with
# them; PklimitModel.pm (001_conformance.pl, 003_conformance_scenario.pl)
# decides its calls on the fixed window's, around its tenants, rollbacks
# and purges.
#
# A key's row is undef (no row) or a hash
#   {alg, W, ws, count, prev, mc, bu}
# alg and W are the state's algorithm and window (microseconds), ws its
# window_start, count and prev (sliding only) its counts, mc (GCRA only) the
# max_count of the last recording call, bu its blocked_until (0: no
# block).  A GCRA state is kept as the row keeps it: tat = ws + count * W /
# mc, exactly (a fraction), with whole windows moved into ws (count < mc),
# which moves neither tat nor the steps of any max_count (a window is a
# whole number of steps).
#
# Every decision is exact.  A call whose numbers are all small (counts,
# max_count and cost at most 2^20, windows and blocks at most 2^41 us, so
# that every product below fits in 63 bits) is worked in native integers
# ("use integer": no floating point anywhere); any other in Math::BigInt
# (with GMP if Math::BigInt::GMP is installed).  The same code does both:
# Math::BigInt overloads the operators.  Times are never multiplied, only
# their differences from now, which are at most a window or two.
#
# Readings this model takes where docs/algorithms.md leaves room (each is
# marked "reading:" below):
#  - the GCRA state is open while now < its exact tat (before any rounding
#    to the call's max_count);
#  - a call that changes no tat (a peek, a blocked call, an unrecorded
#    refusal) leaves the row's tat and max_count as they were, a block
#    included; its answer is read on the tat rounded to its max_count;
#  - sliding: current + max(cost, 1) is exact, not saturated as the fixed
#    window's sum is (the test gives no max_count near the largest bigint,
#    where the two would differ); count (the estimate) is capped at the
#    largest bigint; reset_at
#    of a state with no event in either window is now;
#  - fixed: a blocked call (or one that blocks) on a closed state counts in
#    no window: reset_at is the block's end, as a blocked key's was before
#    0.3.0 (not the end of the window holding now, which can be later);
#  - on a blocked key, and one the call blocks, reset_at is the greater of
#    the algorithm's and the block's end, and retry_after the greater of the
#    algorithm's and the time to the block's end (when no wait can allow the
#    call: the time to that reset_at);
#  - the rule "block until now + block, or now + retry_after without the
#    block if later" is read with the retry_after that call would answer,
#    so a call no wait allows on a key that holds nothing (retry_after one
#    window) blocks for at least one window.
#  - a sliding decrement takes from the current and previous counts of the
#    window holding now, and the row is left in that window, as a recording
#    leaves it: one that takes events from the row's count in the window
#    after the row's moves the row on (its count becomes previous, its
#    current 0), so the state stays open one window longer; one that takes
#    nothing (both counts 0) changes nothing;
#  - a fixed or sliding state a decrement empties stays open until its
#    window ends (its state is open by time alone), where a GCRA bucket
#    emptied closes (tat = now);
#  - a decrement's T is the row's (the max_count of the last call that
#    changed tat), and tat - c * T is exact: no rounding.
package PklimitAlgorithms;

use strict;
use warnings;
use integer;
use Math::BigInt try => 'GMP';
use Exporter 'import';

our @EXPORT = qw(INT64_MAX bigint_lib row_key show_row model_count settle
  decide apply_decision check_answer is_open uses_big decrement);

# align() is PklimitModel.pm's too, called by its full name.

use constant INT64_MAX => 9223372036854775807;

# Below these every product of the model fits in 63 bits.
my $SMALL = 1 << 20;
my $SMALL_T = 1 << 41;

sub bigint_lib { return Math::BigInt->config('lib'); }

sub big { return ref $_[0] ? $_[0] : Math::BigInt->new("$_[0]"); }

# Back to a native integer when it fits in a bigint.
sub norm
{
	my ($x) = @_;
	return $x unless ref $x;
	return $x if $x > INT64_MAX || $x < -INT64_MAX;
	return 0 + $x->bstr;
}

sub max2 { return $_[0] > $_[1] ? $_[0] : $_[1]; }
sub min2 { return $_[0] < $_[1] ? $_[0] : $_[1]; }

# Floor and ceiling of $a / $b, $b > 0.
sub fdiv
{
	my ($a, $b) = @_;
	if (ref $a || ref $b)
	{
		my ($q) = big($a)->copy->bdiv(big($b));    # floored division
		return $q;
	}
	my $q = $a / $b;    # truncates (use integer)
	$q-- if $q * $b != $a && $a < 0;
	return $q;
}

sub cdiv { return -fdiv(-$_[0], $_[1]); }

# The sum of two counts, saturating at the largest bigint.
sub sat_add
{
	my ($a, $b) = @_;
	return $a > INT64_MAX - $b ? INT64_MAX : $a + $b;
}

# The start of the window of length $w holding $t, aligned to the epoch.
sub align
{
	my ($t, $w) = @_;
	return $t - ($t - fdiv($t, $w) * $w);
}

# Does this call need Math::BigInt (some number beyond the small bounds)?
sub uses_big
{
	my ($row, $call) = @_;
	return 1 if $call->{M} > $SMALL || $call->{c} > $SMALL;
	return 1 if $call->{W} > $SMALL_T || $call->{block} > $SMALL_T;
	return 0 unless $row;
	return 1 if $row->{count} > $SMALL || $row->{prev} > $SMALL || $row->{mc} > $SMALL;
	return 1 if $row->{W} > $SMALL_T;
	return 0;
}

sub big_copy
{
	my ($h) = @_;
	return undef unless $h;
	return { map { $_ => ($_ eq 'alg' || !defined $h->{$_} ? $h->{$_} : big($h->{$_})) } keys %$h };
}

sub norm_row
{
	my ($r) = @_;
	return undef unless $r;
	return { map { $_ => ($_ eq 'alg' ? $r->{$_} : norm($r->{$_})) } keys %$r };
}

# A row as a string: equal strings, equal states (for the sets of candidate
# states).  Fields an algorithm does not use are written 0.
sub row_key
{
	my ($r) = @_;
	return '-' unless $r;
	return join(':', $r->{alg}, $r->{W}, $r->{ws}, $r->{count},
		$r->{alg} eq 'sliding' ? $r->{prev} : 0,
		$r->{alg} eq 'gcra' ? $r->{mc} : 0, $r->{bu});
}

sub show_row
{
	my ($r) = @_;
	return 'no row' unless $r;
	return "a closed $r->{alg} state" . ($r->{bu} ? ", blocked_until $r->{bu}" : '')
	  if $r->{ws} == 0;
	my $s = "$r->{alg} window $r->{W} us, window_start $r->{ws}, count $r->{count}";
	$s .= ", previous $r->{prev}" if $r->{alg} eq 'sliding';
	$s .= ", max_count $r->{mc}" if $r->{alg} eq 'gcra';
	$s .= ", blocked_until $r->{bu}" if $r->{bu};
	return $s;
}

# ---------------------------------------------------------------------------
# One state per key.
# ---------------------------------------------------------------------------

# Is the row's state open at $now?
sub is_open
{
	my ($r, $now) = @_;
	return 0 unless $r;
	if (!ref $now && uses_big($r, { M => 0, c => 0, W => 0, block => 0 }))
	{
		($r, $now) = (big_copy($r), big($now));    # a native row with large numbers
	}
	my $alg = $r->{alg};
	return $now < $r->{ws} + $r->{W} if $alg eq 'fixed';
	return $now < $r->{ws} + 2 * $r->{W} if $alg eq 'sliding';
	# gcra: now < tat = ws + count * W / mc, with count < mc (or mc 0 and
	# count 0: tat = ws).  reading: the exact tat, before any rounding.
	return 1 if $r->{ws} > $now;
	return 0 if $r->{mc} == 0 || $r->{count} == 0 || $r->{ws} + $r->{W} <= $now;
	return ($r->{ws} - $now) * $r->{mc} + $r->{count} * $r->{W} > 0;
}

# The row as every later moment sees it: a block that has ended is none, and
# a closed state is the same as any other closed state with the same block
# (it stays closed, and a call starts a new state of its own), so the sets
# of candidate states do not keep states that differ only in what can no
# longer matter.  The row itself still exists.
sub settle
{
	my ($r, $now) = @_;
	return $r unless $r;
	my $ended = $r->{bu} && $r->{bu} <= $now;
	my $closed = !is_open($r, $now);
	return $r unless $ended || $closed;
	return { alg => $r->{alg}, W => 1, ws => 0, count => 0, prev => 0, mc => 0,
		bu => $ended ? 0 : $r->{bu} }
	  if $closed;
	return { %$r, bu => 0 };
}

# ---------------------------------------------------------------------------
# A call: {alg, W, M, c, rr, block} (block 0: none), at time $now.
#
# decide() gives the view the call is decided on and whether the key's own
# limit allows it.  The view is the state's algorithm and window if its
# state is open, else the call's (an empty state); with
#   fixed:   ws (start of the window it counts in), count
#   gcra:    tat as now + X / D (D = M if M > 0), gws, gk: the row's ws and
#            the steps of M from it (for recording)
#   sliding: s, e, cur, prev
# ---------------------------------------------------------------------------

sub decide
{
	my ($row, $call, $now) = @_;
	my $M = $call->{M};
	my $n = $call->{c} > 0 ? $call->{c} : 1;
	my $open = is_open($row, $now);
	my %v = (
		open => $open,
		blocked => ($row && $row->{bu} > $now) ? 1 : 0,
		alg => $open ? $row->{alg} : $call->{alg},
		W => $open ? $row->{W} : $call->{W},
		n => $n,
		bu => $row ? $row->{bu} : 0);
	my $W = $v{W};
	my $ok;
	if ($v{alg} eq 'fixed')
	{
		$v{ws} = $open ? $row->{ws} : align($now, $W);
		$v{count} = $open ? $row->{count} : 0;
		$ok = sat_add($v{count}, $n) <= $M;
	}
	elsif ($v{alg} eq 'gcra')
	{
		if (!$open)
		{
			# an empty bucket: tat = now
			($v{gws}, $v{gk}, $v{X}, $v{D}) = ($now, 0, 0, $M > 0 ? $M : 1);
		}
		elsif ($M == 0)
		{
			# nothing to round: the row's tat, exactly
			my ($mc, $rel) = ($row->{mc}, $row->{ws} - $now);
			($v{X}, $v{D}) = $mc == 0 ? ($rel, 1) : ($rel * $mc + $row->{count} * $W, $mc);
		}
		else
		{
			# tat rounded up to a whole number of the call's steps T = W / M
			# from window_start
			my $mc = $row->{mc};
			my $k = $mc == 0 ? 0 : $mc == $M ? $row->{count} : cdiv($row->{count} * $M, $mc);
			$v{rounded} = 1 if $mc != 0 && $mc != $M && $row->{count} > 0;
			($v{gws}, $v{gk}) = ($row->{ws}, $k);
			($v{X}, $v{D}) = (($row->{ws} - $now) * $M + $k * $W, $M);
		}
		# (max(tat, now) - now) * M + max(c, 1) * W <= W * M
		$ok = $M > 0 && max2($v{X}, 0) + $n * $W <= $W * $M;
	}
	else
	{
		my $s = align($now, $W);
		($v{s}, $v{e}) = ($s, $now - $s);
		if (!$open) { ($v{cur}, $v{prev}) = (0, 0); }
		elsif ($s == $row->{ws}) { ($v{cur}, $v{prev}) = ($row->{count}, $row->{prev}); }
		else { ($v{cur}, $v{prev}) = (0, $row->{count}); $v{shift} = 1; }    # s = ws + W
		# previous * (W - e) + (current + max(c, 1)) * W <= M * W
		$ok = $v{prev} * ($W - $v{e}) + ($v{cur} + $n) * $W <= $M * $W;
	}
	$v{allowed} = !$v{blocked} && $ok ? 1 : 0;
	return \%v;
}

# The empty state of the call's algorithm and window at $now, for a block.
sub empty_state
{
	my ($call, $now) = @_;
	my %r = (alg => $call->{alg}, W => $call->{W}, count => 0, prev => 0,
		mc => 0, bu => 0);
	$r{ws} = $call->{alg} eq 'gcra' ? $now : align($now, $call->{W});
	$r{mc} = $call->{M} if $call->{alg} eq 'gcra';
	return \%r;
}

# Whole windows moved into a GCRA row's window_start.
sub gcra_row
{
	my ($W, $ws, $count, $mc, $bu) = @_;
	if ($mc > 0 && $count >= $mc)
	{
		my $q = $count / $mc;
		($ws, $count) = ($ws + $q * $W, $count - $q * $mc);
	}
	return { alg => 'gcra', W => $W, ws => $ws, count => $count, prev => 0,
		mc => $mc, bu => $bu };
}

# The row after the call, given its decision $v and whether its cost is
# recorded ($record: its own or its group's decision allowed, or
# record_refused); updates $v to the state after the call.
sub apply_decision
{
	my ($row, $call, $now, $v, $record) = @_;
	my ($M, $c, $W) = ($call->{M}, $call->{c}, $v->{W});
	return $row if $v->{blocked} || $c == 0;    # nothing changes
	my $after = $row;
	my $bu = ($row && $row->{bu} > $now) ? $row->{bu} : 0;
	if ($record)
	{
		$v->{recorded} = 1;
		if ($v->{alg} eq 'fixed')
		{
			$v->{count} = sat_add($v->{count}, $c);
			$after = { alg => 'fixed', W => $W, ws => $v->{ws}, count => $v->{count},
				prev => 0, mc => 0, bu => $bu };
		}
		elsif ($v->{alg} eq 'gcra')
		{
			if ($v->{allowed})
			{
				# tat = max(tat, now) + c * T
				$v->{X} = max2($v->{X}, 0) + $c * $W;
				$after = gcra_row($W, $v->{gws}, $v->{gk} + $c, $M, $bu);
			}
			else
			{
				# tat = min(max(tat, now) + c * T, now + W): always now + W,
				# as a refusal of c >= 1 events passes now + W
				($v->{X}, $v->{D}) = $M > 0 ? ($W * $M, $M) : ($W, 1);
				$after = gcra_row($W, $now + $W, 0, $M, $bu);
				$v->{capped} = 1;
			}
		}
		else
		{
			$v->{cur} = sat_add($v->{cur}, $c);
			$after = { alg => 'sliding', W => $W, ws => $v->{s}, count => $v->{cur},
				prev => $v->{prev}, mc => 0, bu => $bu };
		}
	}
	if (!$v->{allowed} && $call->{block} > 0)
	{
		if (!is_open($after, $now))
		{
			# a block needs a row: an empty state of the call's algorithm
			# and window ($v is that state's view already: the state was
			# closed and nothing was recorded)
			$after = empty_state($call, $now);
		}
		else
		{
			$after = { %$after };
		}
		# until now + block, or now + retry_after without the block
		my ($reset, $retry) = reset_retry($call, $now, $v);
		$after->{bu} = $now + max2($call->{block}, $retry);
		$v->{bu} = $after->{bu};
		$v->{blocked} = 1;
		$v->{block_started} = 1;
	}
	return $after;
}

# reset_at and retry_after of the call from the view after it (without the
# block, which check_answer adds).
sub reset_retry
{
	my ($call, $now, $v) = @_;
	my ($M, $W, $n, $alg) = ($call->{M}, $v->{W}, $v->{n}, $v->{alg});
	my ($reset, $retry);
	if ($alg eq 'fixed')
	{
		# reading: a blocked call on a closed state counts in no window
		# (its reset_at is then the block's end, as before 0.3.0)
		$reset = ($v->{open} || !$v->{blocked}) ? $v->{ws} + $W : $now;
		$retry = $reset - $now;
	}
	elsif ($alg eq 'gcra')
	{
		# when the bucket is empty: tat, rounded up, never before now
		$reset = $now + max2(cdiv($v->{X}, $v->{D}), 0);
		# max(tat, now) + max(c, 1) * T - W - now, rounded up
		$retry = $M > 0 ? cdiv(max2($v->{X}, 0) + $n * $W - $W * $M, $M) : 0;
	}
	else
	{
		# when both counts stop weighing: the end of the window after the
		# one holding the last recorded event.  reading: now if neither
		# window holds one.
		my $s = $v->{s};
		$reset = $v->{cur} > 0 ? $s + 2 * $W : $v->{prev} > 0 ? $s + $W : $now;
		# the first moment a call of max(c, 1) events would be allowed
		my $K = $M - $v->{cur} - $n;
		my $t;
		if ($n > $M) { $t = $now; }
		elsif ($K >= 0)
		{
			# in this window: prev * (W - e) <= K * W
			$t = $v->{prev} == 0 ? $now
			  : max2($now, $s + max2($W - fdiv($K * $W, $v->{prev}), 0));
		}
		else
		{
			# in the next: cur * (W - e) + n * W <= M * W
			$t = $s + $W + max2($W - fdiv(($M - $n) * $W, $v->{cur}), 0);
		}
		$retry = $t - $now;
	}
	# when no wait can allow the call: until reset_at, or one window if the
	# key holds nothing (a refusal never has a retry_after of 0)
	$retry = $reset > $now ? $reset - $now : $W if $n > $M;
	$retry = 0 if $retry < 0;
	return ($reset, $retry);
}

# The columns of pklimit_check after the call: [allowed, count, remaining,
# reset_at, retry_after] (times in microseconds since the epoch).
sub check_answer
{
	my ($call, $now, $v) = @_;
	my ($M, $W) = ($call->{M}, $v->{W});
	my $count;
	if ($v->{alg} eq 'fixed') { $count = $v->{count}; }
	elsif ($v->{alg} eq 'gcra')
	{
		# (tat - now) * M / W, rounded up: tat - now = X / M
		$count = $M > 0 && $v->{X} > 0 ? cdiv($v->{X}, $W) : 0;
	}
	else
	{
		$count = min2($v->{cur} + cdiv($v->{prev} * ($W - $v->{e}), $W), INT64_MAX);
	}
	my ($reset, $retry) = reset_retry($call, $now, $v);
	$retry = 0 if $v->{allowed};
	if ($v->{bu} > $now)
	{
		# at least the block's end
		$reset = max2($reset, $v->{bu});
		$retry = $v->{n} > $M ? $reset - $now : max2($retry, $v->{bu} - $now);    # $reset > now
	}
	return [ $v->{allowed} ? 't' : 'f', $count, $v->{allowed} ? $M - $count : 0,
		$reset, $retry ];
}

# pklimit_count(key) at $now: the open state's count, a GCRA bucket's events
# (rounded up, with the row's max_count), a sliding window's estimate
# (rounded up); 0 if the state is closed or there is no row.
sub model_count
{
	my ($row, $now) = @_;
	return 0 unless $row;
	my $r = uses_big($row, { M => 0, c => 0, W => 0, block => 0 }) ? big_copy($row) : $row;
	$now = big($now) if ref $r->{W};
	return 0 unless is_open($r, $now);
	my $W = $r->{W};
	return norm($r->{count}) if $r->{alg} eq 'fixed';
	if ($r->{alg} eq 'gcra')
	{
		return 0 if $r->{mc} == 0;
		return norm(cdiv(($r->{ws} - $now) * $r->{mc} + $r->{count} * $W, $W));
	}
	my $s = align($now, $W);
	my ($cur, $prev) = $s == $r->{ws} ? ($r->{count}, $r->{prev}) : (0, $r->{count});
	return norm(min2($cur + cdiv($prev * ($W - ($now - $s)), $W), INT64_MAX));
}

# pklimit_decrement(key, cost $c) at $now: the row after (its answer is
# model_count of that row at $now).  Nothing changes without a row, on a
# closed state or with cost 0; a block stays.
sub decrement
{
	my ($row, $c, $now) = @_;
	return $row if !$row || $c == 0 || !is_open($row, $now);
	my ($r, $call, $t, $big) = prepare($row, { M => 0, c => $c, W => 0, block => 0 }, $now);
	($c, $now) = ($call->{c}, $t);
	my %a = %$r;
	my $W = $r->{W};
	if ($r->{alg} eq 'fixed')
	{
		# count = max(count - c, 0)
		$a{count} = $r->{count} > $c ? $r->{count} - $c : 0;
	}
	elsif ($r->{alg} eq 'sliding')
	{
		if (align($now, $W) == $r->{ws})
		{
			# current first, then previous, each never below 0
			my $rest = $c > $r->{count} ? $c - $r->{count} : 0;
			$a{count} = $r->{count} > $c ? $r->{count} - $c : 0;
			$a{prev} = $r->{prev} > $rest ? $r->{prev} - $rest : 0;
		}
		elsif ($r->{count} > 0)
		{
			# the window moved on (now in ws + W): current holds nothing, the
			# row's count is previous.  reading: the row moves on with it.
			%a = (%a, ws => $r->{ws} + $W, count => 0,
				prev => $r->{count} > $c ? $r->{count} - $c : 0);
		}
		# else nothing to take: nothing changes
	}
	else
	{
		# tat = max(tat - c * T, now), T = W / mc (the row's): tat - c * T
		# = ws + (count - c) * W / mc, exactly.  A bucket of max_count 0 is
		# emptied by any decrement.  An empty bucket (tat = now) is closed.
		my ($mc, $k) = ($r->{mc}, $r->{count} - $c);
		if ($mc == 0 || ($r->{ws} - $now) * $mc + $k * $W <= 0)
		{
			%a = (%a, ws => $now, count => 0);
		}
		elsif ($k < 0)
		{
			# whole windows moved out of window_start (0 <= count < mc)
			my $q = cdiv(-$k, $mc);
			%a = (%a, ws => $r->{ws} - $q * $W, count => $k + $q * $mc);
		}
		else
		{
			$a{count} = $k;
		}
	}
	return $big ? norm_row(\%a) : \%a;
}

# Convert a call and a row for the Math::BigInt path if needed: returns
# ($row, $call, $now, $big).
sub prepare
{
	my ($row, $call, $now) = @_;
	return ($row, $call, $now, 0) unless uses_big($row, $call);
	return (big_copy($row), big_copy($call), big($now), 1);
}

# Exported for the runner: norm a row or a list of numbers after the
# Math::BigInt path.
push @EXPORT, qw(prepare norm_row norm);

1;
