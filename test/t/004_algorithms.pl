# Copyright (c) pklimit contributors
#
# Randomized conformance test of the three algorithms (docs/algorithms.md,
# the contract): replays seeded random sequences of pklimit_check,
# pklimit_allow, pklimit_check_all, pklimit_allow_all, pklimit_count,
# pklimit_decrement and pklimit_forget calls with algorithm 'fixed', 'gcra'
# and 'sliding' against the reference models of PklimitAlgorithms.pm (exact
# integer arithmetic, Math::BigInt where numbers are large), and demands
# that every answer (allowed, count, remaining, reset_at, retry_after,
# status, to the microsecond) is the model's for some moment the server
# could have decided it at, and that platformkit_limits holds the model's
# number of rows.
#
# Each recording call and decrement takes a path at random, durable
# (durable => true, or the default) or memory (durable => false;
# docs/memory.md), against the same models: the two paths promise the same
# answers, so a key's calls go in and out of shared memory (read in by a
# memory call, taken out by a durable one) with its state counting on.  The
# paths are drawn from a stream of their own (SHA-256 of the seed and a
# counter), so a seed gives the same operations as before the memory path,
# each now on a path the seed gives too.  pklimit.flush_interval is short
# (100 ms), so that flushes run among the calls.
#
# Replay a failure with the seed it prints:
#   PKLIMIT_SEED=<seed> prove ... t/004_algorithms.pl
# The operations depend only on the seed (and PKLIMIT_OPS, PKLIMIT_BATCH);
# the moments they are decided at depend on the server clock, so a failure
# that needs a window or a block to end at one exact moment may need a few
# runs to reproduce.  A failure reports the call, its clock bracket, what
# the server answered, the candidate states and the model's answers over
# the bracket, and the key's earlier calls.
#
# Environment:
#   PKLIMIT_SEED        seed (default 20260301)
#   PKLIMIT_OPS         number of random operations (default 3000)
#   PKLIMIT_BATCH       operations per psql session (default 100)
#   PKLIMIT_EXHAUSTIVE  1: evaluate every microsecond of every bracket
#                       instead of searching them (slow; a check of the
#                       search)
#
# The server's clock cannot be set, so every call is bracketed: the
# PL/pgSQL function pkalg_bracket reads clock_timestamp() (in exact integer
# microseconds), runs the call, and reads it again, so the moment the call
# was decided at, now, lies in [t0, t1] (PL/pgSQL runs its statements in
# order).  The model keeps, per key, the set of states the key can be in
# after the answers seen so far: for a call it finds every microsecond of
# the bracket whose answer on a candidate state is exactly the server's
# (the search is described above try_calls), keeps the states after them,
# and fails if none is left.  A call on several keys is decided at one
# moment for all of them, except a peek (reading: see peek_keys).  A
# pklimit_allow or pklimit_allow_all, whose answer does not say when a
# bucket or a block started, is followed by a peek on each of its keys.
# Windows
# of 20 ms to 2 s and blocks of 5 ms to 2 s (with short sleeps between some
# calls) make windows, buckets and blocks end during the run; a few keys
# have windows of an hour or a day.  Keys have a home algorithm, window and
# max_count; some calls bring another algorithm, window or max_count to a
# key whose state is open (one state per key), costs of 0 (peeks), 1, a
# few, more than max_count and near the largest bigint (saturation), and
# max_counts of 0 and 10^18.  Decrements come with costs of 0, 1, a few, more
# than the key holds and near the largest bigint, on keys of every
# algorithm, with or without a row, open, closed or blocked; their answer
# (the count after) must be the model's at some moment of the bracket, and
# some are followed by a peek on the key, whose answer shows the state they
# left.
#
# The sliding window is also measured, not asserted: the calls decided by a
# sliding state are replayed at the same moments on an exact sliding log
# (every recorded event's time kept: allowed iff the events of (now - W,
# now] plus the cost are at most max_count), and the decisions that differ
# are counted, with the worst over-admission (events the sliding window
# admitted in one window of length W beyond max_count, while max_count
# stayed the same).  The figures go to the test's output and to
# tmp_check/sliding_error.txt.  Asserted: every admission of a sliding
# state reports an estimate within max_count.

use strict;
use warnings;

use Time::HiRes ();
use Digest::SHA ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PklimitTest;
use PklimitAlgorithms;

my $SEED = $ENV{PKLIMIT_SEED} // 20260301;
my $NOPS = $ENV{PKLIMIT_OPS} // 3000;
my $BATCH = $ENV{PKLIMIT_BATCH} // 100;

die "PKLIMIT_SEED must be an integer\n" unless $SEED =~ /^\d+$/;
die "PKLIMIT_OPS must be a positive integer\n" unless $NOPS =~ /^[1-9]\d*$/;
die "PKLIMIT_BATCH must be a positive integer\n" unless $BATCH =~ /^[1-9]\d*$/;
srand($SEED);
diag("pklimit algorithms: PKLIMIT_SEED=$SEED PKLIMIT_OPS=$NOPS PKLIMIT_BATCH=$BATCH"
	  . " (Math::BigInt lib " . bigint_lib() . ")");

use constant MS => 1000;

# ---------------------------------------------------------------------------
# The vocabulary.
# ---------------------------------------------------------------------------

# [length in microseconds, spellings...]: windows that end during the run
# (some not a whole number of milliseconds, so that GCRA steps are
# fractions), and two that do not.
my @SHORT = (
	[ 20 * MS, '20 ms', '20 milliseconds', '0.02 s' ],
	[ 37 * MS, '37 ms' ],
	[ 100 * MS, '100 ms', '0.1 seconds', '00:00:00.1' ],
	[ 250 * MS, '250 milliseconds', '0.25 s' ],
	[ 333_333, '333333 microseconds', '333333 us' ],
	[ 1000 * MS, '1 second', '1000 ms' ],
	[ 2000 * MS, '2 s', '00:00:02' ],
);
my @LONG = ([ 3_600_000_000, '1 hour', '60 minutes' ], [ 86_400_000_000, '1 day', '24 hours' ]);

# [microseconds, spelling]: blocks that end during the run, and one that
# does not.
my @BLOCKS = (
	[ 5 * MS, '5 ms' ], [ 20 * MS, '20 milliseconds' ], [ 100 * MS, '0.1 s' ],
	[ 300 * MS, '300 ms' ], [ 1000 * MS, '1 second' ], [ 2000 * MS, '2 s' ],
);
my $LONG_BLOCK = [ 3_600_000_000, '1 hour' ];

my $HUGE_MAX = 1_000_000_000_000_000_000;
my @MAXES = (1, 2, 3, 5, 5, 7, 10, 10, 20, 50, 100, 1000);
my @HUGE_COSTS = (INT64_MAX, INT64_MAX - 1, 4611686018427387904, $HUGE_MAX + 1);
my @ALGS = ('fixed', 'gcra', 'sliding');
my @SLEEPS_MS = (1, 2, 5, 10, 20, 40, 80, 250);

sub pick { return $_[ int(rand(scalar @_)) ]; }

# The path of a recording call or a decrement, from a stream of its own
# (rand() draws the operations, as before the memory path): durable (half
# of them, spelled durable => true or left to the default) or memory
# (durable => false).
my $path_draws = 0;

sub path_draw
{
	return unpack('N', Digest::SHA::sha256("pklimit path $SEED " . $path_draws++)) / 4294967296;
}

sub gen_path
{
	my $durable = path_draw() < 0.5 ? 1 : 0;
	return (durable => $durable,
		durable_sql => $durable ? (path_draw() < 0.5 ? undef : 'true') : 'false');
}

# How an operation's path is shown in the history of a key.
sub path_desc
{
	my ($o) = @_;
	return defined $o->{durable} ? ', durable ' . ($o->{durable} ? 'true' : 'false') : '';
}

# Sixteen keys, each with a home algorithm, window and max_count.
my (@KEYS, %HOME);
for my $i (1 .. 16)
{
	my $key = sprintf('k%02d', $i);
	my $alg = $i <= 4 ? 'fixed' : $i <= 10 ? 'gcra' : 'sliding';
	my $r = rand();
	my $M = $r < 0.04 ? 0 : $r < 0.10 ? $HUGE_MAX : pick(@MAXES);
	$HOME{$key} = { alg => $alg, w => (rand() < 0.15 ? pick(@LONG) : pick(@SHORT)), M => $M };
	push @KEYS, $key;
}

# ---------------------------------------------------------------------------
# Operation generator.  An operation is a hash {op => ..., ...}; calls carry
# {alg, W, M, c, rr, block} and how their SQL spells them.  Generation
# consumes the RNG only, never the clock.
# ---------------------------------------------------------------------------

sub gen_cost
{
	my ($M) = @_;
	my $r = rand();
	return 0 if $r < 0.12;
	return 2 + int(rand(4)) if $r < 0.32;
	return 10 + int(rand(91)) if $r < 0.36;
	return $M + 1 + int(rand(3)) if $r < 0.39;
	return pick(@HUGE_COSTS) if $r < 0.41;
	return 1;
}

# The cost of a decrement on $key: more than the key holds now and then.
sub gen_decrement_cost
{
	my ($key) = @_;
	my $r = rand();
	return 0 if $r < 0.12;
	return 2 + int(rand(4)) if $r < 0.32;
	return 10 + int(rand(91)) if $r < 0.38;
	return $HOME{$key}{M} + 1 + int(rand(3)) if $r < 0.45;
	return pick(@HUGE_COSTS) if $r < 0.49;
	return 1;
}

sub gen_max
{
	my ($key) = @_;
	return $HOME{$key}{M} if rand() < 0.9;
	my $r = rand();
	return $r < 0.1 ? 0 : $r < 0.2 ? $HUGE_MAX : pick(@MAXES);
}

sub gen_window
{
	my ($key) = @_;
	my $w = rand() < 0.88 ? $HOME{$key}{w} : rand() < 0.9 ? pick(@SHORT) : pick(@LONG);
	return ($w->[0], pick(@{$w}[ 1 .. $#$w ]));
}

# The options a call shares with the others of its operation: cost,
# record_refused and block, and how they are spelled (left to their
# defaults now and then).
sub gen_options
{
	my ($M) = @_;
	my %o = (c => gen_cost($M), rr => rand() < 0.7 ? 1 : 0, block => 0);
	$o{cost_sql} = ($o{c} == 1 && rand() < 0.5) ? undef : $o{c};
	$o{rr_sql} = ($o{rr} && rand() < 0.5) ? undef : $o{rr} ? 'true' : 'false';
	my $r = rand();
	if ($r < 0.06)
	{
		my $b = pick(@BLOCKS);
		($o{block}, $o{block_sql}) = ($b->[0], "'$b->[1]'");
	}
	elsif ($r < 0.063)
	{
		($o{block}, $o{block_sql}) = ($LONG_BLOCK->[0], "'$LONG_BLOCK->[1]'");
	}
	elsif ($r < 0.09)
	{
		$o{block_sql} = 'NULL';
	}
	return \%o;
}

sub gen_alg
{
	my ($key) = @_;
	return rand() < 0.88 ? $HOME{$key}{alg} : pick(@ALGS);
}

# One call on $key with the options $o and the algorithm $alg.
sub gen_call
{
	my ($key, $o, $alg, $M) = @_;
	my ($w, $ws) = gen_window($key);
	return {
		key => $key, ws => $ws,
		call => { alg => $alg, W => $w, M => $M, c => $o->{c}, rr => $o->{rr},
			block => $o->{block} } };
}

# A peek of pklimit_check after a call whose answer is only allowed: the
# moment its state started (a GCRA bucket filling from now, a block ending
# at now + block) is then seen in reset_at, so the model's candidate states
# do not multiply.
sub reveal
{
	my ($o) = @_;
	my %opts = (c => 0, rr => 1, block => 0, cost_sql => 0);
	return { op => 'check', key => $o->{key}, ws => $o->{ws}, opts => \%opts,
		alg_sql => $o->{alg_sql}, gen_path(),
		call => { %{ $o->{call} }, c => 0, rr => 1, block => 0 } };
}

# A peek of pklimit_check on $key with its home max_count, after a
# decrement: the state the decrement left is seen in its answer (with
# another algorithm, $other, whether it is still open).
sub peek_after
{
	my ($key, $other) = @_;
	my %opts = (c => 0, rr => 1, block => 0, cost_sql => 0);
	my $alg = $other ? pick(grep { $_ ne $HOME{$key}{alg} } @ALGS) : $HOME{$key}{alg};
	return { op => 'check', opts => \%opts, alg_sql => $alg, gen_path(),
		%{ gen_call($key, \%opts, $alg, $HOME{$key}{M}) } };
}

sub gen_ops
{
	my ($n) = @_;
	my @ops;
	while (@ops < $n)
	{
		my $r = rand();
		if ($r < 0.075)
		{
			push @ops, { op => 'sleep', ms => pick(@SLEEPS_MS) };
		}
		elsif ($r < 0.155)
		{
			# often on the key of the call before, as a middleware does
			my $last = (@ops && $ops[-1]{op} eq 'check') ? $ops[-1]{key} : undef;
			my $key = ($last && rand() < 0.5) ? $last : pick(@KEYS);
			my $c = gen_decrement_cost($key);
			my $cost_sql = ($c == 1 && rand() < 0.4) ? undef
			  : rand() < 0.3 ? "cost => $c" : $c;
			push @ops, { op => 'decrement', key => $key, c => $c, cost_sql => $cost_sql, gen_path() };
			my $then = rand();
			push @ops, peek_after($key, rand() < 0.3) if $then < 0.3;
			push @ops, { op => 'sleep', ms => pick(10, 20, 40) }, peek_after($key, 1)
			  if $then >= 0.3 && $then < 0.45;
		}
		elsif ($r < 0.75 || ($r >= 0.79 && $r < 0.82))
		{
			my $key = pick(@KEYS);
			my $M = gen_max($key);
			my $o = gen_options($M);
			my $alg = gen_alg($key);
			push @ops, { op => $r < 0.75 ? 'check' : 'allow', opts => $o,
				alg_sql => ($alg eq 'fixed' && rand() < 0.3) ? undef : $alg, gen_path(),
				%{ gen_call($key, $o, $alg, $M) } };
			push @ops, reveal($ops[-1]) if $ops[-1]{op} eq 'allow';
		}
		elsif ($r < 0.79)
		{
			# two or three keys, one algorithm
			my $want = 2 + int(rand(2));
			my (%seen, @keys);
			while (@keys < $want)
			{
				my $k = pick(@KEYS);
				push @keys, $k unless $seen{$k}++;
			}
			my $alg = rand() < 0.8 ? $HOME{ $keys[0] }{alg} : pick(@ALGS);
			my @M = map { gen_max($_) } @keys;
			my $o = gen_options($M[0]);
			my @calls = map { gen_call($keys[$_], $o, $alg, $M[$_]) } 0 .. $#keys;
			push @ops, { op => rand() < 0.8 ? 'check_all' : 'allow_all', opts => $o,
				alg_sql => ($alg eq 'fixed' && rand() < 0.3) ? undef : $alg, gen_path(),
				calls => \@calls };
			push @ops, map { reveal({ %$_, alg_sql => $alg }) } @calls
			  if $ops[-1]{op} eq 'allow_all';
		}
		elsif ($r < 0.97)
		{
			push @ops, { op => 'count', key => pick(@KEYS) };
		}
		else
		{
			push @ops, { op => 'forget', key => pick(@KEYS) };
		}
	}
	return @ops;
}

# ---------------------------------------------------------------------------
# SQL.  Every call runs inside pkalg_bracket, which prints "t0 answer t1".
# ---------------------------------------------------------------------------

my $BRACKET_FN = <<'SQL';
CREATE FUNCTION pkalg_bracket(q pg_catalog.text) RETURNS pg_catalog.text
LANGUAGE plpgsql AS $fn$
DECLARE
	t0 pg_catalog.int8;
	t1 pg_catalog.int8;
	r pg_catalog.text;
BEGIN
	-- extract returns numeric (PostgreSQL 14 and later): exact microseconds
	t0 := (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::pg_catalog.int8;
	EXECUTE q INTO r;
	t1 := (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::pg_catalog.int8;
	RETURN t0 || ' ' || r || ' ' || t1;
END
$fn$;
SQL

# The columns of pklimit_check (of row c), as "t|count|remaining|reset_at
# us|retry_after us|status".
my $COLS = join(" || '|' || ",
	"CASE WHEN c.allowed THEN 't' WHEN NOT c.allowed THEN 'f' ELSE 'null' END",
	"coalesce(c.count::text, 'null')",
	"coalesce(c.remaining::text, 'null')",
	"coalesce(((extract(epoch FROM c.reset_at) * 1000000)::int8)::text, 'null')",
	"coalesce(((extract(epoch FROM c.retry_after) * 1000000)::int8)::text, 'null')",
	"coalesce(c.status, 'null')");

sub named_options
{
	my ($o, $alg_sql, $durable_sql) = @_;
	my $sql = '';
	$sql .= ", cost => $o->{cost_sql}" if defined $o->{cost_sql};
	$sql .= ", record_refused => $o->{rr_sql}" if defined $o->{rr_sql};
	$sql .= ", block => $o->{block_sql}" if defined $o->{block_sql};
	$sql .= ", algorithm => '$alg_sql'" if defined $alg_sql;
	$sql .= ", durable => $durable_sql" if defined $durable_sql;
	return $sql;
}

sub op_query
{
	my ($o) = @_;
	my $op = $o->{op};
	if ($op eq 'check' || $op eq 'allow')
	{
		my $args = "'$o->{key}', $o->{call}{M}, '$o->{ws}'"
		  . named_options($o->{opts}, $o->{alg_sql}, $o->{durable_sql});
		return "SELECT $COLS FROM pklimit_check($args) c" if $op eq 'check';
		return "SELECT CASE WHEN pklimit_allow($args) THEN 't' ELSE 'f' END";
	}
	if ($op eq 'check_all' || $op eq 'allow_all')
	{
		my @c = @{ $o->{calls} };
		my $args = "ARRAY[" . join(', ', map { "'$_->{key}'" } @c) . "], "
		  . "ARRAY[" . join(', ', map { $_->{call}{M} } @c) . "]::pg_catalog.int8[], "
		  . "ARRAY[" . join(', ', map { "'$_->{ws}'" } @c) . "]::pg_catalog.interval[]"
		  . named_options($o->{opts}, $o->{alg_sql}, $o->{durable_sql});
		return "SELECT string_agg($COLS, ',' ORDER BY c.n) FROM pklimit_check_all($args)"
		  . " WITH ORDINALITY c(key, allowed, count, remaining, reset_at, retry_after, status, n)"
		  if $op eq 'check_all';
		return "SELECT CASE WHEN pklimit_allow_all($args) THEN 't' ELSE 'f' END";
	}
	return "SELECT pklimit_count('$o->{key}')::text" if $op eq 'count';
	return "SELECT coalesce(pklimit_decrement('$o->{key}'"
	  . (defined $o->{cost_sql} ? ", $o->{cost_sql}" : '')
	  . (defined $o->{durable_sql} ? ", durable => $o->{durable_sql}" : '') . ")::text, 'null')"
	  if $op eq 'decrement';
	return "SELECT CASE WHEN pklimit_forget('$o->{key}') THEN 't' ELSE 'f' END"
	  if $op eq 'forget';
	die "unknown op $op";
}

sub op_sql
{
	my ($o) = @_;
	return sprintf("SELECT 'z' FROM pg_catalog.pg_sleep(%.3f);", $o->{ms} / 1000)
	  if $o->{op} eq 'sleep';
	return 'SELECT pkalg_bracket($q$' . op_query($o) . '$q$);';
}

# ---------------------------------------------------------------------------
# The model's side: per key, the set of states it can be in (row_key ->
# row), pruned by every answer.
# ---------------------------------------------------------------------------

my %cands = map { $_ => { '-' => undef } } @KEYS;
my %history;    # key -> [ "op: t0..t1 => answer", ... ]
my @trace;      # the calls decided by the model, for the sliding measurement
my %coverage;
my $compared = 0;
my $big_calls = 0;
my $widest = 0;
my $failed = 0;

# The answer of a call as the server prints it.
sub answer_str
{
	my ($a, $allow_only) = @_;
	return $a->[0] if $allow_only;
	return join('|', map { norm($_) } @$a) . '|ok';
}

# Count what a matching transition exercised.
sub cover
{
	my ($row, $call, $v, $ans) = @_;
	my $alg = $v->{alg};
	$coverage{"$alg " . ($v->{allowed} ? 'allowed' : 'refused')}++;
	$coverage{peek}++ if $call->{c} == 0;
	$coverage{blocked}++ if $v->{was_blocked};
	$coverage{block_started}++ if $v->{block_started};
	$coverage{"other algorithm in open $alg state"}++ if $v->{open} && $call->{alg} ne $alg;
	$coverage{"other window in open $alg state"}++ if $v->{open} && $call->{W} != $v->{W};
	$coverage{"closed $row->{alg} state restarted"}++ if $row && !$v->{open} && $v->{recorded};
	$coverage{'gcra rounded to another max_count'}++ if $v->{rounded};
	$coverage{'gcra capped refusal'}++ if $v->{capped};
	$coverage{'sliding window moved on'}++ if $v->{shift};
	$coverage{'no wait allows (cost > max_count)'}++ if $v->{n} > $call->{M};
	$coverage{'max_count 0'}++ if $call->{M} == 0;
	$coverage{'refused, not recorded'}++ if !$v->{allowed} && !$v->{recorded} && !$v->{was_blocked};
	$coverage{'count saturated'}++ if ref $ans && $ans->[1] == INT64_MAX;
	return;
}

# How the moments of a bracket are searched.  An operation's outcome at
# moment now on one combination of candidate states (one per key) is its
# answers and the states after it: a discrete part (each key's algorithm,
# whether its state is open, it is blocked, it allows, its cost is
# recorded, a block starts ..., the start of the window it is decided in,
# the state after's algorithm and window) and numbers (count, remaining,
# reset_at, retry_after; the state after's window_start, counts, max_count,
# blocked_until).  Each discrete fact is a monotone condition on now (a
# window, bucket or block ends once; more time allows more), so on a
# segment whose ends have the same discrete part it is the same throughout,
# and there every number is monotone in now: constant, now + a constant
# (a reset_at or a window_start that starts at now), a constant - now (a
# retry_after), or a count or an estimate draining.  So on such a segment
# the moments at which a number is the server's form an interval: one
# moment if the number moves with now one for one (solved directly),
# otherwise found by halving.  Other segments are halved until their ends
# agree, or tried moment by moment when they are at most $SCAN
# microseconds long.  Every state kept comes from a full evaluation whose
# answers are exactly the server's; if the search finds no moment, every
# moment of the bracket is tried ($EXHAUSTIVE: always).
my $SCAN = 8;
my $EXHAUSTIVE = $ENV{PKLIMIT_EXHAUSTIVE} // 0;
my $exhaustive_rescues = 0;

# $y1 - $y0, exactly (Math::BigInt past 2^62).
sub ndiff
{
	my ($y0, $y1) = @_;
	return $y1 - $y0
	  if !ref $y0 && !ref $y1 && abs($y0) < 4611686018427387904 && abs($y1) < 4611686018427387904;
	return Math::BigInt->new("$y1") - Math::BigInt->new("$y0");
}

# The outcome of the operation at $now on the combination $combo: per key
# the view, the answer (array) and its string, the state after; its
# discrete part (one string) and its numbers, with where each key's four
# answer numbers start among them.
sub outcome
{
	my ($calls, $combo, $now) = @_;
	my (@v, @prep);
	for my $i (0 .. $#$calls)
	{
		my ($r, $c, $t, $big) = prepare($combo->[$i], $calls->[$i]{call}, $now);
		my $v = decide($r, $c, $t);
		$v->{was_blocked} = $v->{blocked};
		push @v, $v;
		push @prep, [ $r, $c, $t, $big ];
	}
	# several keys: recorded if every key allows, or record_refused
	my $all = !grep { !$_->{allowed} } @v;
	my (@after, @ans, @str, @disc, @num, @aidx);
	for my $i (0 .. $#$calls)
	{
		my ($r, $c, $t, $big) = @{ $prep[$i] };
		my $v = $v[$i];
		my $after = apply_decision($r, $c, $t, $v, $all || $c->{rr});
		$after = settle($big ? norm_row($after) : $after, $now);
		my $a = [ map { norm($_) } @{ check_answer($c, $t, $v) } ];
		push @after, $after;
		push @ans, $a;
		push @str, answer_str($a, 0);
		my $window = $v->{alg} eq 'fixed' ? $v->{ws} : $v->{alg} eq 'sliding' ? $v->{s}
		  : $v->{open} ? 'row' : 'new';
		push @disc, join(',', (map { $v->{$_} // '' }
			  qw(alg open was_blocked allowed recorded shift capped block_started rounded)),
			norm($window), $after ? "$after->{alg},$after->{W}" : 'none');
		push @aidx, scalar(@num);
		push @num, @{$a}[ 1 .. 4 ];
		push @num, @{$after}{qw(ws count prev mc bu)} if $after;
	}
	return { now => $now, v => \@v, ans => \@ans, str => \@str, after => \@after,
		disc => join(';', @disc, $all ? 'all' : 'not all'), num => \@num,
		aidx => \@aidx, all => $all ? 't' : 'f' };
}

# Does the outcome $o give the server's answers?  $ctx: {observed (answer
# strings per key), allow_only (only allowed is seen), allow_all (the one
# answer of pklimit_allow_all, or undef)}
sub matches
{
	my ($o, $ctx) = @_;
	return $o->{all} eq $ctx->{allow_all} if defined $ctx->{allow_all};
	my $obs = $ctx->{observed};
	for my $i (0 .. $#$obs)
	{
		my $s = $ctx->{allow_only} ? $o->{ans}[$i][0] : $o->{str}[$i];
		return 0 if $s ne $obs->[$i];
	}
	return 1;
}

# The moments of [a, b] ($oa, $ob the outcomes at its ends; $eval
# evaluates one moment, remembering it) whose outcome gives the server's
# answers, pushed on @$found as outcomes.
sub search_segment
{
	my ($eval, $a, $b, $oa, $ob, $ctx, $found) = @_;
	my $bisect = sub {
		my $mid = $a + (($b - $a) >> 1);
		search_segment($eval, $a, $mid, $oa, $eval->($mid), $ctx, $found);
		search_segment($eval, $mid + 1, $b, $eval->($mid + 1), $ob, $ctx, $found);
	};
	if ($b - $a <= $SCAN)
	{
		for my $now ($a .. $b)
		{
			my $o = $eval->($now);
			push @$found, $o if matches($o, $ctx);
		}
		return;
	}
	return $bisect->() if $oa->{disc} ne $ob->{disc};

	# The discrete part is the same throughout [a, b].
	if (defined $ctx->{allow_all})
	{
		return unless $oa->{all} eq $ctx->{allow_all};
	}
	else
	{
		my ($len, $pinned, $mono) = ($b - $a);
		for my $i (0 .. $#{ $ctx->{observed} })
		{
			my @obs = $ctx->{allow_only} ? ($ctx->{observed}[$i]) : split(/\|/, $ctx->{observed}[$i], -1);
			return if $oa->{ans}[$i][0] ne $obs[0];
			next if $ctx->{allow_only};
			return if @obs != 6 || $obs[5] ne 'ok';
			for my $f (1 .. 4)
			{
				my $j = $oa->{aidx}[$i] + $f - 1;
				my ($x, $y, $o) = ($oa->{num}[$j], $ob->{num}[$j], $obs[$f]);
				next if "$x" eq "$y" && "$x" eq $o;
				return if "$x" eq "$y" || $o !~ /^-?\d+$/;
				my $d = ndiff($x, $y);
				my $now;
				if ($d == $len) { $now = norm(ndiff($x, $o) + $a); }
				elsif ($d == -$len) { $now = norm(ndiff($o, $x) + $a); }
				else { $mono //= [ $j, $o, $d > 0 ? 1 : -1 ]; next; }
				return if $now < $a || $now > $b || (defined $pinned && $pinned != $now);
				$pinned = $now;
			}
		}
		if (defined $pinned)
		{
			my $o = $eval->($pinned);
			push @$found, $o if matches($o, $ctx);
			return;
		}
		if ($mono)
		{
			# the interval where this number is the server's, by halving
			my ($j, $want, $dir) = @$mono;
			my $g = sub { my $d = ndiff($want, $eval->($_[0])->{num}[$j]); return $dir > 0 ? $d : -$d; };
			return if $g->($a) > 0 || $g->($b) < 0;
			my ($lo, $hi) = ($a, $b);
			while ($lo < $hi)
			{
				my $mid = $lo + (($hi - $lo) >> 1);
				if ($g->($mid) >= 0) { $hi = $mid; }
				else { $lo = $mid + 1; }
			}
			return if $g->($lo) != 0;
			my $L = $lo;
			$hi = $b;
			while ($lo < $hi)
			{
				my $mid = $lo + (($hi - $lo + 1) >> 1);
				if ($g->($mid) <= 0) { $lo = $mid; }
				else { $hi = $mid - 1; }
			}
			return search_segment($eval, $L, $lo, $eval->($L), $eval->($lo), $ctx, $found);
		}
	}
	# every moment of [a, b] gives the server's answers: the states after,
	# one if they agree at both ends (monotone), else halving
	my ($na, $nb) = ($oa->{num}, $ob->{num});
	if (!grep { "$na->[$_]" ne "$nb->[$_]" } 0 .. $#$na)
	{
		push @$found, $oa if matches($oa, $ctx);
		return;
	}
	return $bisect->();
}

# Every key call of one operation ($calls: [{key, call}]) on every
# combination of candidate states, at the moments of [t0, t1].  $observed:
# the answer strings per key, or undef for pklimit_allow_all (one answer,
# $allow_all).  Returns the new candidate sets per key, and the first match
# (the earliest moment found) for the trace.
sub try_calls
{
	my ($calls, $t0, $t1, $observed, $allow_only, $allow_all, $exhaustive) = @_;
	my $ctx = { observed => $observed, allow_only => $allow_only, allow_all => $allow_all };
	my @keys = map { $_->{key} } @$calls;
	my @combos = ([]);
	for my $k (@keys)
	{
		my @s = values %{ $cands{$k} };
		@combos = map { my $c = $_; map { [ @$c, $_ ] } @s } @combos;
	}
	my @next = map { {} } @keys;
	my $first;
	for my $combo (@combos)
	{
		my %seen;
		my $eval = sub { $seen{ $_[0] } //= outcome($calls, $combo, $_[0]) };
		my @found;
		if ($exhaustive)
		{
			for my $now ($t0 .. $t1)
			{
				my $o = $eval->($now);
				push @found, $o if matches($o, $ctx);
			}
		}
		else
		{
			search_segment($eval, $t0, $t1, $eval->($t0), $eval->($t1), $ctx, \@found);
		}
		for my $o (@found)
		{
			$next[$_]{ row_key($o->{after}[$_]) } = $o->{after}[$_] for 0 .. $#keys;
			$first = { %$o, rows => $combo } if !$first || $o->{now} < $first->{now};
		}
	}
	return (\@next, $first);
}

# The model's answers for a call on each candidate over [t0, t1], for a
# failure report: distinct answers with the moments that give them.
sub model_answers
{
	my ($key, $call, $t0, $t1, $allow_only) = @_;
	my @lines;
	my @rows = values %{ $cands{$key} };
	for my $row (@rows[ 0 .. ($#rows < 4 ? $#rows : 4) ])
	{
		push @lines, "  candidate: " . show_row($row);
		my @runs;
		for my $now ($t0 .. $t1)
		{
			my ($r, $c, $t) = prepare($row, $call, $now);
			my $v = decide($r, $c, $t);
			apply_decision($r, $c, $t, $v, $v->{allowed} || $c->{rr});
			my $s = answer_str(check_answer($c, $t, $v), $allow_only);
			if (@runs && $runs[-1][0] eq $s) { $runs[-1][2] = $now; }
			else { push @runs, [ $s, $now, $now ]; }
		}
		my @show = @runs > 8 ? (@runs[ 0 .. 3 ], [ '...', 0, 0 ], @runs[ -3 .. -1 ]) : @runs;
		push @lines, map { $_->[0] eq '...' ? "    ... (" . scalar(@runs) . " answers)"
			  : "    model at now $_->[1]..$_->[2]: $_->[0]" } @show;
	}
	push @lines, "  (" . scalar(@rows) . " candidates)" if @rows > 5;
	return @lines;
}

sub call_desc
{
	my ($c) = @_;
	return "$c->{alg}, max_count $c->{M}, window $c->{W} us, cost $c->{c}, record_refused "
	  . ($c->{rr} ? 'true' : 'false') . ", block $c->{block} us";
}

sub fail_op
{
	my ($name, $o, $line, $why, @detail) = @_;
	fail("$name: answers agree with the models");
	my @keys = $o->{calls} ? map { $_->{key} } @{ $o->{calls} } : ($o->{key} // ());
	my @lines = ("$name: $why", "seed $SEED (replay with PKLIMIT_SEED=$SEED PKLIMIT_OPS=$NOPS"
		  . " PKLIMIT_BATCH=$BATCH)", "operation: " . op_sql($o), "server printed: $line", @detail);
	for my $k (@keys)
	{
		my $h = $history{$k} // [];
		my $from = @$h > 12 ? @$h - 12 : 0;
		push @lines, "earlier calls on $k:", map { "  $_" } @{$h}[ $from .. $#$h ];
	}
	diag(join("\n", @lines));
	$failed = 1;
	return;
}

# Is pklimit_count's answer the model's at some moment of [t0, t1]?  The
# count of a state never grows with time (a window's count until it ends, a
# bucket draining, an estimate sliding down): the first moment whose count
# is at most the answer is found by halving, unless $exhaustive.  Returns
# the first moment found, or undef.
sub count_matches
{
	my ($row, $t0, $t1, $answer, $exhaustive) = @_;
	if ($exhaustive)
	{
		for my $now ($t0 .. $t1)
		{
			return $now if model_count($row, $now) eq $answer;
		}
		return undef;
	}
	my $le = sub { my $c = model_count($row, $_[0]); return ndiff($c, $answer) >= 0; };
	my ($lo, $hi) = ($t0, $t1);
	return undef unless $le->($hi);
	while ($lo < $hi)
	{
		my $mid = $lo + (($hi - $lo) >> 1);
		if ($le->($mid)) { $hi = $mid; }
		else { $lo = $mid + 1; }
	}
	return model_count($row, $lo) eq $answer ? $lo : undef;
}

# The moments of [a, b] at which pklimit_decrement (cost $c) on the
# candidate $row answers $answer (the count after, as pklimit_count reads
# it), pushed on @$found as [now, the row after].  The row after changes at
# a few moments (the state closes, a sliding window moves on, a bucket
# empties, a block ends), each once, so where it is the same at both ends of
# a segment it is the same throughout, and its count is found there as
# pklimit_count's is; other segments are halved.
sub decrement_matches
{
	my ($row, $c, $a, $b, $answer, $exhaustive, $found, $seen) = @_;
	$seen //= {};
	my $after = sub { $seen->{ $_[0] } //= settle(decrement($row, $c, $_[0]), $_[0]) };
	if ($exhaustive || $b - $a <= $SCAN)
	{
		for my $now ($a .. $b)
		{
			push @$found, [ $now, $after->($now) ] if model_count($after->($now), $now) eq $answer;
		}
		return;
	}
	if (row_key($after->($a)) eq row_key($after->($b)))
	{
		my $now = count_matches($after->($a), $a, $b, $answer, 0);
		push @$found, [ $now, $after->($a) ] if defined $now;
		return;
	}
	my $mid = $a + (($b - $a) >> 1);
	decrement_matches($row, $c, $a, $mid, $answer, 0, $found, $seen);
	decrement_matches($row, $c, $mid + 1, $b, $answer, 0, $found, $seen);
	return;
}

# The slowest operations to model, for the closing note.
my @slowest;

# Check one operation's output line against the model; prunes the
# candidates.  Returns 1 if it agrees.
sub model_op
{
	my ($name, $o, $line) = @_;
	my $start = Time::HiRes::time();
	my @keys = $o->{calls} ? map { $_->{key} } @{ $o->{calls} } : ($o->{key} // ());
	my $combos = 1;
	$combos *= keys %{ $cands{$_} } for @keys;
	my $ok = model_op1($name, $o, $line);
	my ($t0, $t1) = $line =~ /^(\d+) \S+ (\d+)$/;
	push @slowest, [ Time::HiRes::time() - $start, $o->{op}, join(',', @keys),
		defined $t1 ? $t1 - $t0 : 0, $combos ];
	@slowest = (sort { $b->[0] <=> $a->[0] } @slowest)[ 0 .. ($#slowest < 4 ? $#slowest : 4) ];
	return $ok;
}

sub model_op1
{
	my ($name, $o, $line) = @_;
	my $op = $o->{op};
	if ($op eq 'sleep')
	{
		return 1 if $line eq 'z';
		fail_op($name, $o, $line, 'unexpected output');
		return 0;
	}
	my ($t0, $answer, $t1) = $line =~ /^(\d+) (\S+) (\d+)$/;
	if (!defined $t1 || $t1 < $t0)
	{
		fail_op($name, $o, $line, 'could not read the bracket');
		return 0;
	}
	$widest = $t1 - $t0 if $t1 - $t0 > $widest;
	$compared++;
	$coverage{ $o->{durable} ? "$op, durable" : "$op, memory path" }++ if defined $o->{durable};

	return model_decrement($name, $o, $line, $t0, $answer, $t1) if $op eq 'decrement';

	if ($op eq 'count' || $op eq 'forget')
	{
		my $key = $o->{key};
		my %next;
		for my $row (values %{ $cands{$key} })
		{
			if ($op eq 'forget')
			{
				$next{'-'} = undef if ($row ? 't' : 'f') eq $answer;
				next;
			}
			$next{ row_key($row) } = $row if count_matches($row, $t0, $t1, $answer, $EXHAUSTIVE);
		}
		if (!%next && !$EXHAUSTIVE)
		{
			for my $row (values %{ $cands{$key} })
			{
				$next{ row_key($row) } = $row if count_matches($row, $t0, $t1, $answer, 1);
			}
			$exhaustive_rescues++ if %next;
		}
		if (!%next)
		{
			my @d = map {
				"  candidate: " . show_row($_) . ": model "
				  . ($op eq 'forget' ? ($_ ? 't' : 'f')
					: model_count($_, $t0) . " at $t0, " . model_count($_, $t1) . " at $t1")
			} values %{ $cands{$key} };
			fail_op($name, $o, $line, "the server's answer is no candidate's", @d);
			return 0;
		}
		$cands{$key} = \%next;
		push @{ $history{$key} }, "$op: $t0..$t1 => $answer";
		push @trace, { forget => 1, key => $key } if $op eq 'forget';
		$coverage{"$op"}++;
		return 1;
	}

	my $calls = $o->{calls} // [ { key => $o->{key}, call => $o->{call} } ];
	my ($observed, $allow_only, $allow_all);
	if ($op eq 'check') { $observed = [$answer]; }
	elsif ($op eq 'allow') { ($observed, $allow_only) = ([$answer], 1); }
	elsif ($op eq 'check_all') { $observed = [ split /,/, $answer, -1 ]; }
	else { ($allow_only, $allow_all) = (1, $answer); }
	if ($observed && @$observed != @$calls)
	{
		fail_op($name, $o, $line, 'not one answer per key');
		return 0;
	}
	# reading: the keys of a peek on several keys (cost 0: nothing is
	# recorded, so no key waits for another's decision) may each be decided
	# at their own moment of the bracket, as src/unit.c's apply_peek does
	# (since 0.2.0); a call that records decides all its keys at one moment.
	if (@$calls > 1 && $calls->[0]{call}{c} == 0)
	{
		return peek_keys($name, $o, $line, $calls, $t0, $t1, $observed, $allow_all);
	}
	my ($next, $first) = try_calls($calls, $t0, $t1, $observed, $allow_only, $allow_all,
		$EXHAUSTIVE);
	if (!$first && !$EXHAUSTIVE)
	{
		# the search found no moment: try every moment of the bracket
		($next, $first) = try_calls($calls, $t0, $t1, $observed, $allow_only, $allow_all, 1);
		$exhaustive_rescues++ if $first;
	}
	if (!$first)
	{
		my @d;
		for my $i (0 .. $#$calls)
		{
			push @d, "key $calls->[$i]{key}: call " . call_desc($calls->[$i]{call})
			  . ($observed ? "; server: $observed->[$i]" : '') . "; model:";
			push @d, model_answers($calls->[$i]{key}, $calls->[$i]{call}, $t0, $t1, $allow_only);
		}
		push @d, "(in a call on several keys, the model above takes each key alone)"
		  if @$calls > 1;
		fail_op($name, $o, $line, "the server's answer is the model's at no moment of "
			  . "$t0..$t1 on any candidate state", @d);
		return 0;
	}
	for my $i (0 .. $#$calls)
	{
		my ($key, $call) = ($calls->[$i]{key}, $calls->[$i]{call});
		$cands{$key} = $next->[$i];
		push @{ $history{$key} }, "$op " . call_desc($call) . path_desc($o) . ": $t0..$t1 => "
		  . ($observed ? $observed->[$i] : $answer);
		my ($v, $ans) = ($first->{v}[$i], $first->{ans}[$i]);
		cover($first->{rows}[$i], $call, $v, $allow_only ? undef : $ans);
		$big_calls++ if uses_big($first->{rows}[$i], $call);
		push @trace, {
			key => $key, now => $first->{now}, alg => $v->{alg}, W => $v->{W},
			was_blocked => $v->{was_blocked}, allowed => $v->{allowed}, c => $call->{c},
			n => $v->{n}, M => $call->{M}, rr => $call->{rr},
			count => $allow_only ? undef : $ans->[1] };
		if (keys %{ $cands{$key} } > 20000)
		{
			fail_op($name, $o, $line, "more than 20000 candidate states for $key");
			return 0;
		}
	}
	return 1;
}

# pklimit_decrement: its answer must be the model's at some moment of the
# bracket on some candidate; the candidates become the rows after at those
# moments.
sub model_decrement
{
	my ($name, $o, $line, $t0, $answer, $t1) = @_;
	my ($key, $c) = ($o->{key}, $o->{c});
	my (%next, $first);
	for my $exhaustive ($EXHAUSTIVE, 1)
	{
		for my $row (values %{ $cands{$key} })
		{
			my @found;
			decrement_matches($row, $c, $t0, $t1, $answer, $exhaustive, \@found);
			for my $m (@found)
			{
				$next{ row_key($m->[1]) } = $m->[1];
				$first = [ $row, @$m ] if !$first || $m->[0] < $first->[1];
			}
		}
		if (%next)
		{
			$exhaustive_rescues++ if $exhaustive && !$EXHAUSTIVE;
			last;
		}
		# the search found no moment: try every moment of the bracket
		last if $exhaustive;
	}
	if (!%next)
	{
		my @d = map {
			"  candidate: " . show_row($_) . ": model "
			  . model_count(settle(decrement($_, $c, $t0), $t0), $t0) . " at $t0, "
			  . model_count(settle(decrement($_, $c, $t1), $t1), $t1) . " at $t1"
		} values %{ $cands{$key} };
		fail_op($name, $o, $line, "the server's answer is no candidate's", @d);
		return 0;
	}
	$cands{$key} = \%next;
	push @{ $history{$key} }, "decrement cost $c" . path_desc($o) . ": $t0..$t1 => $answer";

	my ($row, $now, $after) = @$first;
	my $open = is_open($row, $now);
	my $alg = $open ? $row->{alg} : '';
	$coverage{'decrement'}++;
	$coverage{'decrement, no row'}++ if !$row;
	$coverage{'decrement, closed state'}++ if $row && !$open;
	$coverage{"decrement, open $alg state"}++ if $open;
	$coverage{'decrement, cost 0'}++ if $c == 0;
	$coverage{'decrement, blocked key'}++ if $row && $row->{bu} > $now;
	$coverage{'decrement, gcra max_count 0'}++ if $alg eq 'gcra' && $row->{mc} == 0;
	$coverage{'decrement moved a sliding window on'}++
	  if $alg eq 'sliding' && $c > 0 && $after->{ws} && $after->{ws} != $row->{ws};
	$coverage{'decrement emptied the state'}++
	  if $open && $c > 0 && model_count($row, $now) > 0 && $answer eq '0';
	push @trace, { decrement => 1, key => $key, now => $now, c => $c,
		sliding => $alg eq 'sliding' ? 1 : 0 };
	return 1;
}

# A peek on several keys, each key on its own: with pklimit_check_all each
# key's answer must be its model's at some moment of the bracket (its
# candidates pruned by it); with pklimit_allow_all, 't' needs every key to
# allow at some moment (its candidates pruned to those that can), 'f' some
# key to refuse at some moment.  A peek changes no state.
sub peek_keys
{
	my ($name, $o, $line, $calls, $t0, $t1, $observed, $allow_all) = @_;
	my (@next, $some_refuse);
	for my $i (0 .. $#$calls)
	{
		my @one = ($calls->[$i]);
		my $key = $one[0]{key};
		if (defined $allow_all)
		{
			my ($n1, $f1) = try_calls(\@one, $t0, $t1, undef, 1, 't', $EXHAUSTIVE);
			my ($n2, $f2) = try_calls(\@one, $t0, $t1, undef, 1, 'f', $EXHAUSTIVE);
			$some_refuse = 1 if $f2;
			if ($allow_all eq 't' && !$f1)
			{
				fail_op($name, $o, $line, "key $key: its peek allows at no moment of $t0..$t1",
					"key $key: call " . call_desc($one[0]{call}) . "; model:",
					model_answers($key, $one[0]{call}, $t0, $t1, 0));
				return 0;
			}
			push @next, $allow_all eq 't' ? $n1->[0] : $cands{$key};
			next;
		}
		my ($n, $f) = try_calls(\@one, $t0, $t1, [ $observed->[$i] ], 0, undef, $EXHAUSTIVE);
		($n, $f) = try_calls(\@one, $t0, $t1, [ $observed->[$i] ], 0, undef, 1)
		  if !$f && !$EXHAUSTIVE;
		if (!$f)
		{
			fail_op($name, $o, $line, "key $key: the server's answer is the model's"
				  . " at no moment of $t0..$t1 on any candidate state",
				"key $key: call " . call_desc($one[0]{call}) . "; server: $observed->[$i]; model:",
				model_answers($key, $one[0]{call}, $t0, $t1, 0));
			return 0;
		}
		push @next, $n->[0];
	}
	if (defined $allow_all && $allow_all eq 'f' && !$some_refuse)
	{
		fail_op($name, $o, $line, "no key's peek refuses at any moment of $t0..$t1");
		return 0;
	}
	for my $i (0 .. $#$calls)
	{
		my ($key, $call) = ($calls->[$i]{key}, $calls->[$i]{call});
		$cands{$key} = $next[$i];
		push @{ $history{$key} }, "$o->{op} (peek) " . call_desc($call) . path_desc($o) . ": $t0..$t1 => "
		  . ($observed ? $observed->[$i] : $allow_all);
	}
	$coverage{'peek on several keys'}++;
	return 1;
}

# Rows the model has: the keys whose every candidate has a row, and those
# that may.
sub model_rows
{
	my ($min, $max) = (0, 0);
	for my $k (@KEYS)
	{
		my @r = values %{ $cands{$k} };
		my $with = grep { defined $_ } @r;
		$min++ if $with == @r;
		$max++ if $with > 0;
	}
	return ($min, $max);
}

# ---------------------------------------------------------------------------
# The server's side: one psql session per batch.
# ---------------------------------------------------------------------------

my $node = pklimit_node('algorithms', "log_statement = none\npklimit.flush_interval = '100ms'\n");
$node->safe_psql('postgres', $BRACKET_FN);

sub run_batch
{
	my ($name, $ops) = @_;
	my $script = join('', map { op_sql($_) . "\n" } @$ops)
	  . "SELECT count(*) FROM platformkit_limits;\n";    # as superuser
	my ($stdout, $stderr) = ('', '');
	my $ret = $node->psql('postgres', $script, stdout => \$stdout, stderr => \$stderr,
		on_error_stop => 1);
	my @got = split /\n/, $stdout, -1;
	# Any WARNING (the store unavailable, say) fails the batch too: the
	# model expects every call to reach the store.
	if ($ret != 0 || $stderr ne '' || @got != @$ops + 1)
	{
		fail("$name: psql ran cleanly");
		diag("psql exit $ret; seed $SEED; " . scalar(@got) . " lines for "
			  . scalar(@$ops) . " operations; stderr:\n$stderr");
		$failed = 1;
		return 0;
	}
	my $nrows = pop @got;
	for my $i (0 .. $#$ops)
	{
		return 0 unless model_op("$name, operation " . ($i + 1), $ops->[$i], $got[$i]);
	}
	my ($min, $max) = model_rows();
	# a key decided in memory reaches its row with the next flush
	# (pklimit.flush_interval, 100 ms): the rows must agree once it ran
	if (($nrows < $min || $nrows > $max)
		&& $node->poll_query_until('postgres',
			"SELECT count(*) BETWEEN $min AND $max FROM platformkit_limits"))
	{
		note("$name: platformkit_limits had $nrows rows at the end of the batch, the model's after a flush");
		$nrows = $min;
	}
	if ($nrows < $min || $nrows > $max)
	{
		fail("$name: platformkit_limits has the model's rows");
		diag("seed $SEED: platformkit_limits has $nrows rows, the model "
			  . ($min == $max ? $min : "$min to $max")
			  . " (peeks, counts and forgets create no rows; one row per key)");
		$failed = 1;
		return 0;
	}
	pass("$name: " . scalar(@$ops) . " operations agree with the models ($nrows rows)");
	return 1;
}

# ---------------------------------------------------------------------------
# 1. The random replay; 2. every key counted at the end.
# ---------------------------------------------------------------------------

my $start = Time::HiRes::time();
my @all = gen_ops($NOPS);
my $b = 0;
while (@all && !$failed)
{
	my @ops = splice(@all, 0, $BATCH);
	$b++;
	run_batch("batch $b", \@ops);
}
run_batch('every key counted', [ map { { op => 'count', key => $_ } } @KEYS ])
  unless $failed;

note("coverage: " . join(', ', map { "$_=$coverage{$_}" } sort keys %coverage));
note(sprintf("%d operations compared (%d in Math::BigInt), widest clock bracket %d us, "
		  . "%d found only by trying every moment, %.1f s", $compared, $big_calls, $widest,
		$exhaustive_rescues, Time::HiRes::time() - $start));
note("slowest to model: " . join('; ', map { sprintf('%.2f s %s %s (bracket %d us, %d candidates)', @$_) } @slowest));
ok($compared >= $NOPS * 0.9, "the operations were compared ($compared)") unless $failed;
my ($memory_calls, $memory_reads, @memory) = split /\|/, $node->safe_psql('postgres',
	q{SELECT concat_ws('|', memory_calls, memory_reads, memory_fallbacks, memory_evictions, flushes, rows_flushed)
	FROM pklimit_stats WHERE datname = 'postgres'});
note("memory path: $memory_calls calls decided in memory, $memory_reads keys read in, "
	  . sprintf('%d fallbacks, %d evictions, %d flushes writing %d rows', @memory));
ok($memory_calls > 0 && $memory_reads > 0,
	"calls were decided in memory ($memory_calls), their keys read in ($memory_reads)")
  unless $failed;

# ---------------------------------------------------------------------------
# 3. The sliding window against the exact sliding log, on the calls a
#    sliding state decided, at the moments the model accepted.
# ---------------------------------------------------------------------------

if (!$failed)
{
	my (%log, %admitted, %admitted_max);
	my ($n, $differ, $over, $worst, $beyond_formula) = (0, 0, 0, 0, 0);
	my $CAP = 1 << 62;
	my $sum_in = sub {
		my ($events, $now, $W) = @_;
		my $sum = 0;
		for my $e (@$events)
		{
			next unless $e->[0] > $now - $W && $e->[0] <= $now;
			$sum = $sum > $CAP - $e->[1] ? $CAP : $sum + $e->[1];
		}
		return $sum;
	};
	for my $t (@trace)
	{
		my $k = $t->{key};
		if ($t->{decrement})
		{
			# events taken back from an open sliding state: the newest go
			# from the log, and the admitted events start afresh
			next unless $t->{sliding} && $t->{c} > 0;
			my $left = $t->{c};
			my $events = $log{$k} // [];
			while ($left > 0 && @$events)
			{
				my $take = $events->[-1][1] < $left ? $events->[-1][1] : $left;
				$left -= $take;
				$events->[-1][1] -= $take;
				pop @$events if $events->[-1][1] == 0;
			}
			@{ $admitted{$k} } = ();
			next;
		}
		if ($t->{forget} || $t->{alg} ne 'sliding')
		{
			delete $log{$k};
			delete $admitted{$k};
			delete $admitted_max{$k};
			next;
		}
		next if $t->{was_blocked};
		my ($now, $W) = ($t->{now}, $t->{W});
		my $c = $t->{c} > $CAP ? $CAP : $t->{c};
		my $n1 = $t->{n} > $CAP ? $CAP : $t->{n};
		# keep what may still weigh
		@{ $log{$k} } = grep { $_->[0] > $now - 2 * $W } @{ $log{$k} // [] };
		@{ $admitted{$k} } = grep { $_->[0] > $now - 2 * $W } @{ $admitted{$k} // [] };
		my $in = $sum_in->($log{$k}, $now, $W);
		my $log_allows = ($in <= $CAP - $n1 && $in + $n1 <= $t->{M}) ? 1 : 0;
		$n++;
		if ($log_allows != $t->{allowed})
		{
			$differ++;
			$over++ if $t->{allowed};
		}
		push @{ $log{$k} }, [ $now, $c ] if $c > 0 && ($log_allows || $t->{rr});
		# over-admission is measured against one max_count: a change of
		# max_count starts the admitted events afresh
		if (($admitted_max{$k} // $t->{M}) != $t->{M})
		{
			@{ $admitted{$k} } = ();
		}
		$admitted_max{$k} = $t->{M};
		if ($t->{allowed})
		{
			# its own formula: what it reports after an admission is at
			# most max_count
			$beyond_formula++ if defined $t->{count} && $t->{count} > $t->{M};
			if ($c > 0)
			{
				push @{ $admitted{$k} }, [ $now, $c ];
				my $excess = $sum_in->($admitted{$k}, $now, $W) - $t->{M};
				$worst = $excess if $excess > $worst;
			}
		}
	}
	my $line = sprintf("sliding vs exact log: %d decisions, %.2f%% differ, %.2f%% over-admitted,"
		  . " worst over-admission %d events in one window",
		$n, $n ? 100 * $differ / $n : 0, $n ? 100 * $over / $n : 0, $worst);
	diag($line);
	my $file = "$PostgreSQL::Test::Utils::tmp_check/sliding_error.txt";
	open(my $fh, '>', $file) or die "cannot write $file: $!";
	print $fh "$line\n";
	close($fh);
	ok($n > 0, "calls decided by a sliding state were measured ($n)");
	is($beyond_formula, 0,
		'every sliding admission reports an estimate within max_count (its own formula)');
}

$node->stop;
done_testing();
