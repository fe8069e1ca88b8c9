# PklimitModel: the reference model of pklimit's calls that the conformance
# tests (001_conformance.pl, 003_conformance_scenario.pl) compare the server
# with ("both limiters agree"), and the runner that replays a batch of
# operations in one psql session and compares every answer.
#
# An operation is a hash {op => ..., args}; op_sql() gives its SQL and the
# model its expected output line.  This model keeps what a session and its
# keys are: the tenants (the connection's, SET, set_config, SET LOCAL in a
# block that commits or rolls back), the default limit, count, forget and
# the purge.  The rules of a call on a key are the fixed window's of
# PklimitAlgorithms.pm, the one model of each algorithm: a key's row here is
# that model's fixed window row (alg, W, ws, count, bu), keyed
# "tenant\0key" (tenant '' is the global namespace), with bu_hi, the latest
# moment a block it holds can end.  It never uses now() and never reads the
# table to decide.
#
# How the clock is handled: every batch's first and last statements read
# clock_timestamp(), the server clock pklimit itself uses, so every event of
# the batch is recorded between those two readings.  If no window boundary
# of a length that matters to the batch (one its calls use, one a row of the
# model has) falls inside that interval, every operation of the batch sees
# the same current window, and the model decides each call at the first
# reading; a block it starts ends between the block after the first reading
# and the block after the last (bu .. bu_hi), and pklimit_check's reset_at
# and retry_after are compared with the range those give.  If a boundary
# does fall inside, the batch's outcome is not predictable: the table and
# the model are both emptied and the batch is replayed, at most
# $MAX_ATTEMPTS times, after which the test fails.
#
# A batch fails at the first answer that differs (reported with the
# operations before it and the model's rows for the key), if psql prints
# anything on stderr (a WARNING that the store was unavailable, say), or if
# the number of rows in platformkit_limits differs from the model's
# (count/forget creating rows, two keys sharing a row).
package PklimitModel;

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Exporter 'import';
use PklimitAlgorithms ();

our @EXPORT = qw(USEC INT64_MAX $DEFAULT_MAX $DEFAULT_WINDOW %coverage
  %POLICIES conformance_node create_policies run_batch window_of q_lit show
  server_clock operations_compared replays);

use constant USEC => 1_000_000;
use constant INT64_MAX => 9223372036854775807;

# What pklimit.default_max and pklimit.default_window are at the start.
our $DEFAULT_MAX = 10;
our $DEFAULT_WINDOW = 900 * USEC;

# The policies the runs may name (create_policies makes them): each a
# default row and overrides by tenant, every row {max, w (microseconds), ws
# (its spelling), cost, rr, block (microseconds, 0: none), bs, shadow}.
our %POLICIES;

my $MAX_ATTEMPTS = 10;
my $SEED = '';    # for the failure report: how to replay
my $node;

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
# SQL of each operation.
# ---------------------------------------------------------------------------

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
	return "SELECT pklimit_allow($k, $o->{max}, " . q_lit($o->{ws}) . options_sql($o) . ");"
	  if $op eq 'allow';
	return "SELECT pklimit_allow($k);" if $op eq 'allow1';
	return
	    "SELECT allowed, count, remaining,"
	  . " (extract(epoch FROM reset_at) * 1000000)::bigint,"
	  . " (extract(epoch FROM retry_after) * 1000000)::bigint, status"
	  . " FROM pklimit_check($k, $o->{max}, "
	  . q_lit($o->{ws}) . options_sql($o) . ");"
	  if $op eq 'check';
	return
	    "SELECT string_agg(CASE WHEN c.allowed THEN 't' ELSE 'f' END"
	  . " || '|' || c.count || '|' || c.remaining || '|' || c.status, ',' ORDER BY c.n)"
	  . " FROM pklimit_check_all(ARRAY[" . join(', ', map { q_lit($_) } @{ $o->{keys} }) . "],"
	  . " ARRAY[" . join(', ', @{ $o->{maxes} }) . "]::pg_catalog.int8[],"
	  . " ARRAY[" . join(', ', map { q_lit($_) } @{ $o->{wss} }) . "]::pg_catalog.interval[]"
	  . options_sql($o) . ") WITH ORDINALITY"
	  . " c(key, allowed, count, remaining, reset_at, retry_after, status, n);"
	  if $op eq 'check_all';
	return "SELECT pklimit_count($k);" if $op eq 'count';
	return "SELECT pklimit_forget($k);" if $op eq 'forget';
	my $p = defined $o->{policy} ? q_lit($o->{policy}) : undef;
	my $cost = defined $o->{cost} ? ", $o->{cost}" : '';
	return "SELECT pklimit_allow($k, $p$cost);" if $op eq 'allow_p';
	return
	    "SELECT allowed, count, remaining,"
	  . " (extract(epoch FROM reset_at) * 1000000)::bigint,"
	  . " (extract(epoch FROM retry_after) * 1000000)::bigint, status"
	  . " FROM pklimit_check($k, $p$cost);"
	  if $op eq 'check_p';
	return "SELECT pklimit_count($k, $p);" if $op eq 'count_p';
	return "SELECT pklimit_forget($k, $p);" if $op eq 'forget_p';
	die "unknown op $op";
}

# The options of a call, as named arguments: cost, record_refused, block.
sub options_sql
{
	my ($o) = @_;
	my $sql = '';
	$sql .= ", cost => $o->{cost}" if defined $o->{cost};
	$sql .= ", record_refused => " . ($o->{rr} ? 'true' : 'false') if defined $o->{rr};
	$sql .= ", block => " . q_lit($o->{bs}) if defined $o->{bs};
	return $sql;
}

# The operation in short, for the failure report.
sub op_desc
{
	my ($o) = @_;
	my $op = $o->{op};
	return "pklimit_allow(" . show($o->{key}) . ", $o->{max}, '$o->{ws}'" . options_sql($o) . ")"
	  if $op eq 'allow';
	return "pklimit_check(" . show($o->{key}) . ", $o->{max}, '$o->{ws}'" . options_sql($o) . ")"
	  if $op eq 'check';
	return "pklimit_check_all([" . join(', ', map { show($_) } @{ $o->{keys} }) . "], ["
	  . join(', ', @{ $o->{maxes} }) . "], [" . join(', ', @{ $o->{wss} }) . "]" . options_sql($o) . ")"
	  if $op eq 'check_all';
	return "pklimit_$op(" . show($o->{key}) . ")"
	  if $op eq 'count' || $op eq 'forget';
	return "pklimit_allow(" . show($o->{key}) . ")" if $op eq 'allow1';
	return "pklimit_" . ($op =~ s/_p$//r) . "(" . show($o->{key}) . ", '$o->{policy}'"
	  . (defined $o->{cost} ? ", $o->{cost}" : '') . ")"
	  if $op =~ /_p$/;
	return "set_config('platformkit.tenant', " . show($o->{tenant}) . ")"
	  if $op eq 'set_config';
	return "SET platformkit.tenant = " . show($o->{tenant}) if $op eq 'set';
	return "BEGIN; SET LOCAL platformkit.tenant = " . show($o->{tenant})
	  if $op eq 'begin';
	return op_sql($o);
}

# ---------------------------------------------------------------------------
# The reference model.  State: "tenant\0key" -> a fixed window row of
# PklimitAlgorithms.pm, plus per-session settings.  $t is the server time
# (microseconds since the epoch) of the batch; the caller guarantees no
# window boundary of any length in use lies between that time and the
# events, so every event of the batch is in the window containing $t.
# ---------------------------------------------------------------------------

our %coverage;
my %model;    # the model's table

# The window of length $w holding $t, aligned to the epoch: [start, end).
sub window_of
{
	my ($t, $w) = @_;
	my $ws = PklimitAlgorithms::align($t, $w);
	return ($ws, $ws + $w);
}

sub max2 { return $_[0] > $_[1] ? $_[0] : $_[1]; }

# A call of max $max, window $w, cost $cost (0: a peek), record_refused $rr
# and block $block (0: none), as PklimitAlgorithms.pm takes it: a fixed
# window's.
sub fixed_call
{
	my ($c) = @_;
	return { alg => 'fixed', W => $c->{w}, M => $c->{max}, c => $c->{cost},
		rr => $c->{rr}, block => $c->{block} };
}

# The key's own decision at $t on its row (PklimitAlgorithms::decide): the
# view the call is decided on, with what apply_call() and the answers need.
sub decide
{
	my ($row, $t, $c) = @_;
	my ($r, $call, $now, $big) =
	  PklimitAlgorithms::prepare($row, fixed_call($c), $t);
	my $v = PklimitAlgorithms::decide($r, $call, $now);
	$v->{prep} = [ $r, $call, $now, $big ];
	$v->{was_blocked} = $v->{blocked};
	if ($v->{blocked}) { $coverage{blocked}++; }
	elsif ($c->{cost} == 0) { $coverage{peek}++; }
	return $v;
}

# Record the call decided in $v on the row of key $id, if $record (its own,
# or its group's, decision allowed, or record_refused): the row after it
# (PklimitAlgorithms::apply_decision), with bu_hi if it starts a block.
sub apply_call
{
	my ($rows, $id, $t, $c, $v, $record, $t1) = @_;
	my $row = $rows->{$id};
	my ($r, $call, $now, $big) = @{ $v->{prep} };
	my $after = PklimitAlgorithms::apply_decision($r, $call, $now, $v, $record);
	return $row if $v->{was_blocked} || $c->{cost} == 0 || !$after;
	$after = PklimitAlgorithms::norm_row($after) if $big;
	if ($v->{recorded})
	{
		$coverage{recorded}++;
		$coverage{restart_closed}++ if $row && !$v->{open};
		$coverage{other_length_counts_in_open_window}++
		  if $v->{open} && $v->{W} != $c->{w};
	}
	else { $coverage{not_recorded}++; }
	if ($v->{block_started})
	{
		# a block after the event's time (an instant in [t, t1]), or to its
		# window's end if later
		$after->{bu_hi} = max2($t1 + $c->{block}, $after->{ws} + $after->{W});
		$coverage{block_started}++;
	}
	$rows->{$id} = $after;
	return $after;
}

# The columns of pklimit_check after the call decided in $v (on a key
# whose row is now $after): allowed, count, remaining, reset_at,
# retry_after, status.  Each is the model's for the earliest end of a block
# read at $t1 and the latest read at $t, or the range between the two where
# they differ: the event's time, and so the block's end, is an instant of
# [$t, $t1].
sub check_columns
{
	my ($v, $after, $t, $t1) = @_;
	my ($r, $call) = @{ $v->{prep} };
	my %hi = %$v;
	$hi{bu} = $after->{bu_hi} if $v->{bu} && $after && $after->{bu_hi};
	my @lo = map { PklimitAlgorithms::norm($_) }
	  @{ PklimitAlgorithms::check_answer($call, $t1, {%$v}) };
	my @hi = map { PklimitAlgorithms::norm($_) }
	  @{ PklimitAlgorithms::check_answer($call, $t, \%hi) };
	my @cols = map {
		$lo[$_] eq $hi[$_] ? $lo[$_]
		  : $lo[$_] < $hi[$_] ? [ $lo[$_], $hi[$_] ] : [ $hi[$_], $lo[$_] ]
	} 0 .. $#lo;
	return [ @cols, 'ok' ];
}

# The call of operation $o (allow, check) with the session's defaults.
sub call_of
{
	my ($o, %s) = @_;
	my ($max, $w) = $o->{op} eq 'allow1' ? ($s{max}, $s{window}) : ($o->{max}, $o->{w});
	return { max => $max, w => $w, cost => $o->{cost} // 1, rr => $o->{rr} // 1,
		block => $o->{block} // 0 };
}

# Apply the batch's operations to the model; returns the expected output
# lines, each as [expected string, op index, matcher].
sub model_run
{
	my ($rows, $ops, $t, $conn_tenant, $t1) = @_;
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
		if ($op eq 'allow' || $op eq 'allow1' || $op eq 'check')
		{
			my $c = call_of($o, %s);
			my $v = decide($rows->{$id}, $t, $c);
			my $row = apply_call($rows, $id, $t, $c, $v, $v->{allowed} || $c->{rr}, $t1);
			$coverage{refused}++ unless $v->{allowed};
			push @expect, [ $op eq 'check' ? check_columns($v, $row, $t, $t1)
				: $v->{allowed} ? 't' : 'f', $i ];
			next;
		}
		if ($op eq 'check_all')
		{
			my @ids = map { "$tenant\0$_" } @{ $o->{keys} };
			my @calls = map {
				{ max => $o->{maxes}[$_], w => $o->{wus}[$_], cost => $o->{cost} // 1,
					rr => $o->{rr} // 1, block => $o->{block} // 0 }
			} 0 .. $#ids;
			my @v = map { decide($rows->{ $ids[$_] }, $t, $calls[$_]) } 0 .. $#ids;
			my $all = !grep { !$_->{allowed} } @v;
			$coverage{group_refused}++ unless $all;
			my @after = map {
				apply_call($rows, $ids[$_], $t, $calls[$_], $v[$_], $all || $calls[$_]{rr}, $t1)
			} 0 .. $#ids;
			push @expect, [
				join(',', map {
					my $cols = check_columns($v[$_], $after[$_], $t, $t1);
					join('|', @{$cols}[ 0 .. 2 ], 'ok')
				} 0 .. $#ids),
				$i ];
			next;
		}
		if ($op eq 'allow_p' || $op eq 'check_p')
		{
			# the tenant's row of the policy, else its default; a key
			# counted apart under each policy
			my $p = $POLICIES{ $o->{policy} };
			$p = $p->{tenants}{$tenant} // $p->{default};
			my $pid = "$tenant\0$o->{key}\0$o->{policy}";
			my $c = { max => $p->{max}, w => $p->{w}, cost => $o->{cost} // $p->{cost},
				rr => $p->{rr}, block => $p->{block} };
			my $v = decide($rows->{$pid}, $t, $c);
			my $row = apply_call($rows, $pid, $t, $c, $v, $v->{allowed} || $c->{rr}, $t1);
			my $shadowed = !$v->{allowed} && $p->{shadow};
			$coverage{policy_call}++;
			$coverage{policy_refused}++ unless $v->{allowed} || $shadowed;
			$coverage{policy_shadowed}++ if $shadowed;
			if ($op eq 'check_p')
			{
				my $cols = check_columns($v, $row, $t, $t1);
				($cols->[0], $cols->[5]) = ('t', 'shadow') if $shadowed;
				push @expect, [ $cols, $i ];
			}
			else { push @expect, [ $v->{allowed} || $shadowed ? 't' : 'f', $i ]; }
			next;
		}
		if ($op eq 'count_p' || $op eq 'forget_p')
		{
			my $pid = "$tenant\0$o->{key}\0$o->{policy}";
			if ($op eq 'count_p')
			{
				push @expect, [ PklimitAlgorithms::model_count($rows->{$pid}, $t), $i ];
				next;
			}
			push @expect, [ exists $rows->{$pid} ? 't' : 'f', $i ];
			delete $rows->{$pid};
			next;
		}
		if ($op eq 'count')
		{
			my $row = $rows->{$id};
			$coverage{count_closed}++
			  if $row && !PklimitAlgorithms::is_open($row, $t);
			push @expect, [ PklimitAlgorithms::model_count($row, $t), $i ];
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
				my $r = $rows->{$k};
				my $bu = $r->{bu} ? $r->{bu_hi} : 0;
				if ($r->{ws} + $r->{W} + $o->{r} < $t && (!$bu || $bu + $o->{r} < $t))
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
	$lengths{ $_->{W} } = 1 for values %model;
	for my $o (@$ops)
	{
		$lengths{ $o->{w} } = 1 if defined $o->{w};
		$lengths{$_} = 1 for @{ $o->{wus} // [] };
		$retentions{ $o->{r} } = 1 if defined $o->{r};
	}
	# a block that ends during the batch, or its purge cutoff
	for my $row (values %model)
	{
		next unless $row->{bu};
		for my $r (keys %retentions)
		{
			return 'block' if $row->{bu_hi} + $r >= $t0 && $row->{bu} + $r <= $t1;
		}
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

# A started node with pklimit preloaded and created, in UTF8 with the C
# locale; $seed is what the failure report says to replay with.
sub conformance_node
{
	(my $name, $SEED) = @_;
	$node = PostgreSQL::Test::Cluster->new($name);
	$node->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'pklimit'\nlog_statement = none\n");
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION pklimit');
	return $node;
}

my $CLOCK =
  "SELECT (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::bigint;\n";
my $ROWS = "SELECT count(*) FROM platformkit_limits;\n";    # as superuser

my $total_ops = 0;
my $wipes = 0;

# Make the policies of %POLICIES on the node (as its superuser).
sub create_policies
{
	my ($node) = @_;
	my $sql = '';
	for my $name (sort keys %POLICIES)
	{
		my $p = $POLICIES{$name};
		for my $tenant (undef, sort keys %{ $p->{tenants} // {} })
		{
			my $r = defined $tenant ? $p->{tenants}{$tenant} : $p->{default};
			$sql .= "SELECT pklimit_policy_set(" . q_lit($name) . ", $r->{max}, "
			  . q_lit($r->{ws}) . ", cost => $r->{cost}, record_refused => "
			  . ($r->{rr} ? 'true' : 'false')
			  . ($r->{block} ? ", block => " . q_lit($r->{bs}) : '')
			  . ", mode => '" . ($r->{shadow} ? 'shadow' : 'enforce') . "'"
			  . (defined $tenant ? ", tenant => " . q_lit($tenant) : '') . ");\n";
		}
	}
	$node->safe_psql('postgres', $sql);
}

# The server clock, in microseconds since the epoch.
sub server_clock
{
	return $node->safe_psql('postgres', $CLOCK);
}

sub operations_compared { return $total_ops; }
sub replays { return $wipes; }

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
			diag("psql exit $ret; $SEED; stderr:\n$stderr");
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
		my @expect = model_run(\%model, $ops, $t0, $conn_tenant, $t1);
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

# Does field $f of a pklimit_check line match the model's $e, exact or
# [lo, hi]?
sub field_matches
{
	my ($f, $e) = @_;
	return $f eq $e unless ref $e;
	return $f =~ /^-?\d+$/ && $f >= $e->[0] && $f <= $e->[1];
}

# The model's pklimit_check line in short, for a failure report.
sub show_fields
{
	my ($e) = @_;
	return join('|', map { ref $_ ? '[' . join(',', @$_) . ']' : $_ } @$e);
}

# Returns undef if all lines match, else a description of the first mismatch
# (and sets $_->[3] = 1 on the offending expectation).
sub compare
{
	my ($expect, $got, $t0, $t1) = @_;
	for my $n (0 .. $#$expect)
	{
		my ($exp, $i) = @{ $expect->[$n] };
		my $g = $got->[$n];
		my $ok;
		if (!defined $g)
		{
			$expect->[$n][3] = 1;
			return "output line " . ($n + 1) . " missing";
		}
		if (ref $exp)
		{
			# pklimit_check: allowed, count, remaining, reset_at,
			# retry_after (microseconds), status
			my @f = split /\|/, $g, -1;
			$ok = @f == @$exp;
			for my $c (0 .. $#f)
			{
				last unless $ok;
				$ok = field_matches($f[$c], $exp->[$c]);
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
			  . show(ref $exp ? show_fields($exp) : $exp) . ", got " . show($g);
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
		"$SEED, server clock $t0..$t1 us,"
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
		  ? "  => got " . show($got->[$l]) . ", model "
		  . show(ref $expect->[$l][0] ? show_fields($expect->[$l][0]) : $expect->[$l][0])
		  : '';
		push @lines, sprintf("  %4d %s%s", $i + 1, $sql, $res);
	}
	my $o = $ops->[$bad_op];
	if (defined $o->{key})
	{
		# Replay the model up to just before the failing operation.
		my %rows = map { $_ => {%{ $before->{$_} }} } keys %$before;
		model_run(\%rows, [ @{$ops}[ 0 .. $bad_op - 1 ] ], $t0, $conn_tenant, $t1)
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
			push @lines, "  " . show($t) . " $r->{ws} " . ($r->{ws} + $r->{W}) . " $r->{count}"
			  . ($r->{bu} ? " blocked until $r->{bu}..$r->{bu_hi}" : '');
		}
	}
	diag(join("\n", @lines));
	return;
}

1;
