# Copyright (c) pklimit contributors
#
# Randomized argument fuzz: a few thousand calls of pklimit_allow (1 and 3
# arguments), pklimit_check, pklimit_count, pklimit_forget and pklimit_purge
# with hostile arguments (NULLs, empty, control characters, quotes,
# separators, multibyte text, keys of 254 to 258 bytes and up to 100 kB,
# SQL-looking strings; extreme limits; windows and retentions that are zero,
# negative, huge, in months or oddly spelled) under hostile tenants
# (platformkit.tenant set with set_config: separators, control characters,
# 10,000 characters, multibyte).
#
# Every call must either succeed or fail with the SQLSTATE the README
# documents for its arguments, which the test works out from the arguments
# alone:
#   22004  a NULL argument
#   22023  an empty key, a negative max_count, a window that is zero,
#          negative, longer than 3,650,000 days or has months or years, a
#          negative retention
#   22007, 22008, 22015, 22003
#          PostgreSQL's own errors while reading a literal that is not an
#          interval or a bigint at all (before pklimit is called)
# When several arguments are bad, any of their codes will do (the README
# does not order the checks), but a literal PostgreSQL cannot read always
# wins, because it fails before the function runs.
#
# A set of "exact" keys, under whatever tenant is current, is only ever
# called with one window length (36500 days, in several spellings), so its
# count is predictable: a reference model in Perl predicts every answer of
# pklimit_allow / pklimit_check / pklimit_count / pklimit_forget on them,
# including calls that fail and so must record nothing.  At the end each
# such (tenant, key) is checked through pklimit_count and through its row
# in platformkit_limits, found by the stored key the README documents
# (g:key, t<bytes>:tenant:key, or h:<sha256> beyond 256 bytes) computed
# here in Perl.
#
# Also: no "pklimit store unavailable" warning, no error escaping the
# wrapper, no crash in the server log, and the server still answers.
#
# Each call runs through fz(sql), a PL/pgSQL function that EXECUTEs it and
# returns 'OK <value>' or 'ERR <sqlstate>', so a batch of calls is one psql
# session with one output line per call.  The SQL of each call is built
# with randomly chosen quoting ('...', E'...' or $tag$...$tag$) and passed
# to fz() as one E'...' literal in which every control character is
# escaped.
#
# Replay:  PKLIMIT_FUZZ_SEED=<seed> prove ... t/050_fuzz.pl
# Environment:
#   PKLIMIT_FUZZ_SEED   seed (default 20251201)
#   PKLIMIT_FUZZ_CALLS  number of random calls (default 4000)
#   PKLIMIT_FUZZ_BATCH  calls per psql session (default 250)

use strict;
use warnings;

use Digest::SHA qw(sha256_hex);
use Encode qw(encode_utf8);
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;


my $SEED = $ENV{PKLIMIT_FUZZ_SEED} // 20251201;
my $NCALLS = $ENV{PKLIMIT_FUZZ_CALLS} // 4000;
my $BATCH = $ENV{PKLIMIT_FUZZ_BATCH} // 250;
die "PKLIMIT_FUZZ_SEED must be an integer\n" unless $SEED =~ /^\d+$/;
srand($SEED);
diag("pklimit fuzz: PKLIMIT_FUZZ_SEED=$SEED PKLIMIT_FUZZ_CALLS=$NCALLS "
	  . "PKLIMIT_FUZZ_BATCH=$BATCH");

# Byte strings throughout: multibyte text is written as its UTF-8 bytes.
sub u { return encode_utf8(join '', map { chr } @_) }

my $PARSE = 'parse';    # class of a literal PostgreSQL itself cannot read

# PostgreSQL 17 reads 'infinity' and '-infinity' as intervals: pklimit then
# refuses an infinite window (22023), keeps every row under an infinite
# retention and refuses a negative one (22023).  Earlier majors cannot read
# them at all.
my $INFINITE_INTERVALS = pg_major() >= 17;
my @PARSE_CODES = qw(22007 22008 22015);

sub pick { return $_[ int(rand(@_)) ] }

# ---------------------------------------------------------------------------
# Argument vocabulary.  Each entry: [literal text or undef for NULL,
# expected class: 'ok', an SQLSTATE, or [$PARSE, codes...]].
# ---------------------------------------------------------------------------

my @WINDOWS = (
	# accepted
	[ '1 microsecond', 'ok' ],
	[ '00:00:00.000001', 'ok' ],
	[ '1 second', 'ok' ],
	[ '1.5 seconds', 'ok' ],
	[ '500 ms', 'ok' ],
	[ '15 minutes', 'ok' ],
	[ '  15   MINUTES  ', 'ok' ],
	[ '15 min', 'ok' ],
	[ '1 HoUr', 'ok' ],
	[ '1 hr', 'ok' ],
	[ '@ 2 hours', 'ok' ],
	[ '+1 hour', 'ok' ],
	[ '1 hour +1 minute', 'ok' ],
	[ 'PT15M', 'ok' ],
	[ 'PT1H30M', 'ok' ],
	[ 'P1D', 'ok' ],
	[ '1:30', 'ok' ],
	[ '1:30:00.5', 'ok' ],
	[ '1 day', 'ok' ],
	[ '1 d', 'ok' ],
	[ '1 week', 'ok' ],
	[ '1 day 2 hours 3 minutes 4.5 seconds', 'ok' ],
	[ '1 day 00:00:01', 'ok' ],
	[ '36500 days', 'ok' ],
	[ '3650000 days', 'ok' ],
	[ '87600000 hours', 'ok' ],
	[ '-1 day 25 hours', 'ok' ],                      # = 1 hour
	[ '1 day -86399.999999 seconds', 'ok' ],          # = 1 microsecond
	[ '3649999 days 24:00:00', 'ok' ],                # = 3650000 days
	# refused by pklimit: zero, negative, too long, months or years
	[ '0', '22023' ],
	[ '00:00:00', '22023' ],
	[ '0 seconds', '22023' ],
	[ '0.4 microseconds', '22023' ],                  # rounds to 0
	[ '-1 second', '22023' ],
	[ '-1 microsecond', '22023' ],
	[ '-00:00:01', '22023' ],
	[ '@ 1 hour ago', '22023' ],
	[ '-1 day', '22023' ],
	[ '1 day -86400 seconds', '22023' ],
	[ '-1 day 24 hours', '22023' ],
	[ '3650001 days', '22023' ],
	[ '3650000 days 00:00:00.000001', '22023' ],
	[ '87600000:00:00.000001', '22023' ],
	[ '36500000 days', '22023' ],
	[ '106751992 days', '22023' ],     # days * 86400e6 > int64
	[ '213503990 days', '22023' ],     # ... and wraps to about 7.7 days
	[ '217153982 days', '22023' ],     # ... and wraps to about 10000 years
	[ '2147483647 days', '22023' ],
	[ '-2147483648 days', '22023' ],
	[ '2562047788:00:54.775807', '22023' ],
	[ '-2562047788:00:54.775807', '22023' ],
	[ '-2147483648 days 2562047788:00:54.775807', '22023' ],
	[ '1 month', '22023' ],
	[ '1 mon', '22023' ],
	[ '1 year', '22023' ],
	[ 'P1Y', '22023' ],
	[ '1 decade', '22023' ],
	[ '1 month -30 days', '22023' ],
	[ '1 year -365 days', '22023' ],
	[ '-1 month 40 days', '22023' ],
	[ '178956970 years', '22023' ],
	# not an interval at all
	[ '', [$PARSE] ],
	[ 'abc', [$PARSE] ],
	[ 'infinity', $INFINITE_INTERVALS ? '22023' : [$PARSE] ],
	[ '-infinity', $INFINITE_INTERVALS ? '22023' : [$PARSE] ],
	[ 'NaN', [$PARSE] ],
	[ '1e3 seconds', [$PARSE] ],
	[ '1 fortnight', [$PARSE] ],
	[ '2147483648 days', [$PARSE] ],
	[ '2562047788:00:54.775808', [$PARSE] ],
	[ "1 day'; DROP TABLE platformkit_limits; --", [$PARSE] ],
	[ "15 minutes\x01", [$PARSE] ],
	[ undef, '22004' ],
);

my @RETENTIONS = (
	[ '1 day', 'ok' ],
	[ '0', 'ok' ],
	[ '0 seconds', 'ok' ],
	[ '1 microsecond', 'ok' ],
	[ '1 hour', 'ok' ],
	[ '30 days', 'ok' ],
	[ '1 month', 'ok' ],
	[ '1 year', 'ok' ],
	[ '100 years', 'ok' ],
	[ 'P1Y2M', 'ok' ],
	[ '1 month -27 days', 'ok' ],       # a month is at least 28 days
	[ '-1 day 25 hours', 'ok' ],        # one hour
	[ '1 day -86400 seconds', 'ok' ],   # zero
	# huge but not negative: documented as valid
	[ '3650000 days', 'ok' ],
	[ '8000 years', 'ok' ],                # now - 8000 years is before 4713 BC
	[ '6000 years 1000000 days', 'ok' ],
	[ '70000000 hours', 'ok' ],
	[ '1000000 years', 'ok' ],
	[ '178000000 years', 'ok' ],
	[ '2147483647 days', 'ok' ],
	[ '2562047788:00:54.775807', 'ok' ],
	# negative
	[ '-1 microsecond', '22023' ],
	[ '-1 day', '22023' ],
	[ '-1 month', '22023' ],
	[ '-1 year', '22023' ],
	[ '@ 1 day ago', '22023' ],
	[ '-1 day 23 hours', '22023' ],
	[ '-1000000 years', '22023' ],
	[ '-178000000 years', '22023' ],
	[ '-2147483648 days', '22023' ],
	[ '-2562047788:00:54.775807', '22023' ],
	# not an interval
	[ '', [$PARSE] ],
	[ 'forever', [$PARSE] ],
	[ 'infinity', $INFINITE_INTERVALS ? 'ok' : [$PARSE] ],
	[ '-infinity', $INFINITE_INTERVALS ? '22023' : [$PARSE] ],
	[ '2147483648 days', [$PARSE] ],
	[ undef, '22004' ],
);

use constant INT64_MAX => 9223372036854775807;

# [SQL text, class, value]
my @MAXES = (
	[ 'NULL', '22004' ],
	[ 'NULL::bigint', '22004' ],
	[ '-1', '22023' ],
	[ "'-1'", '22023' ],
	[ '-2147483648', '22023' ],
	[ '-9223372036854775807', '22023' ],
	[ "'-9223372036854775808'", '22023' ],
	[ "'-9223372036854775808'::bigint", '22023' ],
	[ '0', 'ok', 0 ],
	[ '1', 'ok', 1 ],
	[ '2', 'ok', 2 ],
	[ '3', 'ok', 3 ],
	[ '5', 'ok', 5 ],
	[ '10', 'ok', 10 ],
	[ '1::integer', 'ok', 1 ],
	[ '4::smallint', 'ok', 4 ],
	[ "' 7 '", 'ok', 7 ],
	[ '2147483647', 'ok', 2147483647 ],
	[ '2147483648', 'ok', 2147483648 ],
	[ '9223372036854775807', 'ok', INT64_MAX ],
	[ "'9223372036854775807'", 'ok', INT64_MAX ],
	[ "'9223372036854775808'", [ $PARSE, '22003' ] ],
	[ "'99999999999999999999'", [ $PARSE, '22003' ] ],
);
my @GOOD_MAXES = grep { $_->[1] eq 'ok' } @MAXES;

# Characters keys and tenants are made of: ASCII, control characters (no
# NUL: text cannot hold it), and multibyte UTF-8 of 2, 3 and 4 bytes.
my @CHARS = (
	(map { chr } 0x20 .. 0x7e),
	(map { chr } 0x01 .. 0x1f, 0x7f),
	"'", "'", '\\', '\\', '$', ':', ':', ';', '"', '%',
	u(0xe9), u(0x3b1), u(0x301), u(0x20ac), u(0x65e5), u(0x200d), u(0x202e),
	u(0xfeff), u(0x1f600), u(0x1f469), u(0x10ffff - 2),
);

# A random string of exactly $bytes bytes.
sub rand_str
{
	my ($bytes) = @_;
	my $s = '';
	while (length($s) < $bytes)
	{
		my $c = pick(@CHARS);
		$c = chr(0x61 + int(rand(26))) if length($s) + length($c) > $bytes;
		$s .= $c;
	}
	return $s;
}

my $EMOJI = u(0x1f469, 0x200d, 0x1f469, 0x200d, 0x1f467);
my @NASTY_KEYS = (
	'k', 'a', "\t", "\n", "\r\n", "\x01", "\x7f", "a\tb\nc\x01d", ' ', '  ',
	"'", "''", '"', '\\', "\\'", '\\\\', '$', '$$', '$q$', '$fz$', '%s%n',
	':', '::', 'g:', 'g:k', 't1:', 't1:a:k', 't0:', 'h:', 'h:' . ('0' x 64),
	'b:c', 'a:b:c', "'; DROP TABLE platformkit_limits; --",
	"Robert'); DROP TABLE students;--", "1' OR '1'='1", "\\x00", '\\0',
	'$$; SELECT pg_sleep(10); --', "E'\\\\'", "k' || 'k", '/* */', '--',
	u(0xe9), u(0x65e5, 0x672c, 0x8a9e), u(0x1f600), $EMOJI, u(0x202e) . 'abc',
	u(0x301) . 'e', u(0xfeff) . 'k', 'login:alice@example.com',
);

my @TENANTS = (
	'', '', 'acme', 'a', 'a:b', 'b', ':', '::', 'g:', 't1:', 't1:a', 'h:', 't',
	"\t", "\n", "\x01x", "'", '\\', "'; DROP TABLE platformkit_limits; --",
	u(0xe9), $EMOJI, 'x' x 10000, u(0xe9) x 5000, u(0x1f600) x 2500,
	'T' x 250, 'T' x 251,
);

# Exact keys: called only with a 36500-day window, so the model predicts
# their counts.  Around the 256-byte readable limit: 'g:' + 254 = 256 bytes
# stays readable, 'g:' + 255 is digested; under tenant 'a' ('t1:a:') the
# limit falls 3 bytes earlier.
my @EXACT = (
	'b:c', 'c', 'x', "q'\t\n\x01\\" . u(0x1f600),
	'E' x 249, 'E' x 251, 'E' x 254, 'E' x 255, 'E' x 256, 'E' x 257,
	('E' x 253) . u(0xe9), ('E' x 253) . u(0x1f600),
	'L' x 100_000,
);
my %IS_EXACT = map { $_ => 1 } @EXACT;
my @EXACT_WINDOWS = ('36500 days', '876000 hours', '52560000 minutes',
	'P36500D', '36500 days 00:00:00', '36499 days 24:00:00');

# A pool of random keys reused across calls, so that count and forget meet
# existing rows.
my @POOL = map { rand_str(1 + int(rand(30))) } 1 .. 40;
push @POOL, map { rand_str(254 + $_) } 0 .. 4;

sub rand_key
{
	while (1)
	{
		my $r = rand();
		my $k;
		if    ($r < 0.04) { return undef }
		elsif ($r < 0.08) { $k = '' }
		elsif ($r < 0.38) { $k = pick(@NASTY_KEYS) }
		elsif ($r < 0.62) { $k = pick(@POOL) }
		elsif ($r < 0.67) { $k = rand_str(1) }
		elsif ($r < 0.82) { $k = rand_str(254 + int(rand(5))) }
		elsif ($r < 0.83) { $k = rand_str(1000 + int(rand(99_001))) }
		else              { $k = rand_str(1 + int(rand(60))) }
		return $k unless $IS_EXACT{$k};
	}
}

# ---------------------------------------------------------------------------
# Quoting.
# ---------------------------------------------------------------------------

# E'...' with backslashes, quotes and every control character escaped, so
# the text psql reads holds no control character at all.
sub e_lit
{
	my ($s) = @_;
	$s =~ s/([\\'])/\\$1/g;
	$s =~ s/([\x00-\x1f\x7f])/sprintf('\\x%02x', ord($1))/ge;
	return "E'$s'";
}

# A string literal in one of three quotings.
sub lit
{
	my ($s) = @_;
	my $r = rand();
	if ($r < 0.33)
	{
		(my $q = $s) =~ s/'/''/g;
		return "'$q'";
	}
	elsif ($r < 0.66)
	{
		return e_lit($s);
	}
	while (1)
	{
		my $tag = join '', map { pick('a' .. 'z', '_') } 1 .. (1 + int(rand(6)));
		$tag .= int(rand(1000)) if rand() < 0.5;
		my $d = "\$$tag\$";
		# the first $tag$ after the opening one must be the closing one
		return "$d$s$d" if index("$s$d", $d) == length($s);
	}
}

sub text_arg
{
	my ($s) = @_;
	return pick('NULL', 'NULL::text') unless defined $s;
	my $l = lit($s);
	return rand() < 0.2 ? "$l\::text" : $l;
}

sub interval_arg
{
	my ($s) = @_;
	return pick('NULL', 'NULL::interval') unless defined $s;
	my $l = lit($s);
	return rand() < 0.3 ? "$l\::interval" : $l;
}

# Printable form of a call for diagnostics.
sub show
{
	my ($sql) = @_;
	$sql =~ s/(.)\1{40,}/sprintf("%s<x%d>", $1, length($&))/ge;
	$sql =~ s/([\x00-\x1f\x7f])/sprintf('\\x%02x', ord($1))/ge;
	return length($sql) > 500
	  ? substr($sql, 0, 200) . '<...>' . substr($sql, -250)
	  : $sql;
}

# ---------------------------------------------------------------------------
# Model of the exact keys: counts per (tenant, key), the empty tenant being
# the global namespace.
# ---------------------------------------------------------------------------

my %model;
my %tainted;
sub mkey { return "$_[0]\0$_[1]" }

sub stored_key
{
	my ($tenant, $key) = @_;
	my $s = $tenant eq '' ? "g:$key" : 't' . length($tenant) . ":$tenant:$key";
	return length($s) > 256 ? 'h:' . sha256_hex($s) : $s;
}

# Combine the classes of a call's arguments into what the call must give:
# ['ok'] or ['err', codes...].
sub expect
{
	my @classes = @_;
	my (@parse, @err);
	for my $c (@classes)
	{
		if (ref $c)
		{
			my @codes = @$c[ 1 .. $#$c ];
			push @parse, @codes ? @codes : @PARSE_CODES;
		}
		elsif ($c ne 'ok') { push @err, $c }
	}
	return [ 'err', @parse ] if @parse;
	return [ 'err', @err ] if @err;
	return ['ok'];
}

# ---------------------------------------------------------------------------
# Call generation.  Each call: { sql, expect, kind, and optionally:
#   after   run when the call is generated (a tenant switch, which the
#           following calls of the batch are generated under),
#   exact   the (tenant, key) of an exact key,
#   check   run, in order, on the value of an expected success: updates
#           the model and returns an error string or undef,
#   untaint a success makes the model exact again for this pair (forget) }.
# An exact pair whose answer was wrong (a call that should have failed but
# recorded, a count that differs) is "tainted": its later answers cannot
# be predicted, so they are not checked, until a pklimit_forget.
# ---------------------------------------------------------------------------

my $tenant;    # current tenant of the batch's session
my %tally;

sub gen_call
{
	my $r = rand();
	my $exact = rand() < 0.3;

	if ($r < 0.08)    # switch tenant
	{
		my $t = pick(@TENANTS);
		return {
			sql => "SELECT length(set_config('platformkit.tenant', "
			  . text_arg($t) . ", false))::text",
			expect => ['ok'],
			kind => 'tenant',
			after => sub { $tenant = $t },
		};
	}
	if ($r < 0.53)    # allow (3) or check
	{
		my $is_check = $r >= 0.33;
		my $fn = $is_check ? 'pklimit_check' : 'pklimit_allow';
		my ($key, $kc, $max, $win, $wc);
		if ($exact)
		{
			$key = pick(@EXACT);
			$kc = 'ok';
			$max = rand() < 0.85 ? pick(@GOOD_MAXES) : pick(@MAXES);
			($win, $wc) = rand() < 0.85
			  ? (pick(@EXACT_WINDOWS), 'ok')
			  : @{ pick(grep { $_->[1] ne 'ok' } @WINDOWS) };
		}
		else
		{
			$key = rand_key();
			$kc = !defined $key ? '22004' : $key eq '' ? '22023' : 'ok';
			$max = rand() < 0.6 ? pick(@GOOD_MAXES) : pick(@MAXES);
			($win, $wc) = rand() < 0.4
			  ? ('15 minutes', 'ok')
			  : @{ pick(@WINDOWS) };
		}
		my $warg = interval_arg($win);
		my $args = join ', ', text_arg($key), $max->[0], $warg;
		# a max and a window both untyped (a string literal or NULL): the
		# call matches the policy form too, which PostgreSQL refuses as
		# ambiguous (the README's overloads)
		my $ambiguous = $max->[0] =~ /^(NULL|'[^']*')$/ && $warg !~ /::interval$/;
		my $sql = $is_check
		  ? "SELECT format('%s %s %s %s %s %s', allowed, count, remaining, "
		  . "extract(epoch FROM reset_at)::bigint, retry_after > '0', status) "
		  . "FROM $fn($args)"
		  : "SELECT $fn($args)::text";
		my $call = {
			sql => $sql,
			expect => $ambiguous ? [ 'err', '42725' ] : expect($kc, $max->[1], $wc),
			kind => ($ambiguous ? 'ambiguous' : $is_check ? 'check' : 'allow3'),
		};
		if ($exact)
		{
			my $mk = mkey($tenant, $key);
			$call->{exact} = $mk;
			$call->{check} = sub {
				my $n = ($model{$mk} // 0) + 1;
				my $allowed = $n <= $max->[2];
				# format() writes a boolean as t or f, ::text as true or false
				# a 36500-day window aligned to the epoch closes at
				# 36500 * 86400 s (in 2069), and nothing is refused for
				# longer than the window
				my $want = $is_check
				  ? sprintf('%s %d %d %d %s ok', $allowed ? 't' : 'f', $n,
					$allowed ? $max->[2] - $n : 0, 36500 * 86400,
					$allowed ? 'f' : 't')
				  : ($allowed ? 'true' : 'false');
				$model{$mk} = $n;
				return $_[0] eq $want ? undef : "expected '$want'";
			};
			$call->{kind} .= ' exact';
		}
		return $call;
	}
	if ($r < 0.63)    # allow (1): default limit and window
	{
		my $key = rand_key();
		return {
			sql => 'SELECT pklimit_allow(' . text_arg($key) . ')::text',
			expect => expect(!defined $key ? '22004' : $key eq '' ? '22023' : 'ok'),
			kind => 'allow1',
		};
	}
	if ($r < 0.93)    # count or forget
	{
		my $is_forget = $r >= 0.80;
		my $fn = $is_forget ? 'pklimit_forget' : 'pklimit_count';
		my $key = $exact ? pick(@EXACT) : rand_key();
		my $call = {
			sql => "SELECT $fn(" . text_arg($key) . ')::text',
			expect => expect(!defined $key ? '22004' : $key eq '' ? '22023' : 'ok'),
			kind => ($is_forget ? 'forget' : 'count'),
		};
		if ($exact)
		{
			my $mk = mkey($tenant, $key);
			$call->{exact} = $mk;
			$call->{check} = sub {
				my $n = $model{$mk} // 0;
				my $want = $is_forget ? ($n > 0 ? 'true' : 'false') : "$n";
				$model{$mk} = 0 if $is_forget;
				return $_[0] eq $want ? undef : "expected '$want'";
			};
			# the row is gone, whatever was wrong with it before
			$call->{untaint} = 1 if $is_forget;
			$call->{kind} .= ' exact';
		}
		return $call;
	}
	# purge
	if (rand() < 0.15)
	{
		return { sql => 'SELECT pklimit_purge()::text', expect => ['ok'], kind => 'purge' };
	}
	my ($ret, $rc) = @{ pick(@RETENTIONS) };
	return {
		sql => 'SELECT pklimit_purge(' . interval_arg($ret) . ')::text',
		expect => expect($rc),
		kind => 'purge',
	};
}

# ---------------------------------------------------------------------------
# Run.
# ---------------------------------------------------------------------------

my $node = pklimit_node('fuzz');
$node->safe_psql('postgres', <<'SQL');
CREATE FUNCTION fz(q text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
	r text;
BEGIN
	EXECUTE q INTO r;
	RETURN 'OK ' || coalesce(r, 'NULL');
EXCEPTION WHEN OTHERS THEN
	RETURN 'ERR ' || SQLSTATE;
END
$f$;
SQL

my $ncalls = 0;
my $nbad = 0;
my @failures;
my $batchno = 0;
while ($ncalls < $NCALLS)
{
	$batchno++;
	$tenant = '';
	my $n = $NCALLS - $ncalls < $BATCH ? $NCALLS - $ncalls : $BATCH;
	my @calls;
	my $sql = "SET TimeZone = 'UTC';\n";
	for (1 .. $n)
	{
		my $c = gen_call();
		push @calls, $c;
		$sql .= 'SELECT fz(' . e_lit($c->{sql}) . ");\n";
		$c->{after}->() if $c->{after};
	}
	my ($out, $err) = ('', '');
	$node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		on_error_stop => 0, extra_params => [ '-q' ]);
	my @lines = split /\n/, $out;
	is(scalar(@lines), $n, "batch $batchno: one answer per call");
	my @bad;
	for my $i (0 .. $#calls)
	{
		my $c = $calls[$i];
		my $line = $lines[$i] // '<no answer>';
		my $e = $c->{expect};
		my $why;
		if ($line =~ /^OK (.*)$/s)
		{
			my $v = $1;
			my $mk = $c->{exact};
			if ($e->[0] ne 'ok')
			{
				$why = 'expected ERROR ' . join('|', @$e[ 1 .. $#$e ]);
				$tainted{$mk} = 1 if defined $mk;
			}
			elsif ($c->{check})
			{
				my $w = $c->{check}->($v);
				if (defined $mk && $tainted{$mk})
				{
					$tainted{$mk} = 0 if $c->{untaint};
				}
				elsif (defined $w)
				{
					$why = $w;
					$tainted{$mk} = 1;
				}
			}
			$tally{"$c->{kind}: ok"}++;
		}
		elsif ($line =~ /^ERR (\w{5})$/)
		{
			my $code = $1;
			if ($e->[0] eq 'ok') { $why = 'expected success' }
			elsif (!grep { $_ eq $code } @$e[ 1 .. $#$e ])
			{
				$why = 'expected ERROR ' . join('|', @$e[ 1 .. $#$e ]);
			}
			$tally{"$c->{kind}: $code"}++;
		}
		else { $why = 'unexpected output' }
		if (defined $why)
		{
			push @bad, sprintf("call %d: %s\n    got: %s; %s", $i + 1,
				show($c->{sql}), show($line), $why);
		}
	}
	$ncalls += $n;
	$nbad += @bad;
	ok(!@bad, "batch $batchno: every call gives its documented outcome")
	  or diag(join("\n", @bad[ 0 .. ($#bad < 9 ? $#bad : 9) ]),
		@bad > 10 ? "\n... and " . (@bad - 10) . ' more' : '');
	push @failures, @bad;
	unlike($err, qr/pklimit store unavailable/,
		"batch $batchno: no 'store unavailable' warning");
	unlike($err, qr/\b(ERROR|FATAL|PANIC)\b/,
		"batch $batchno: no error escaped the wrapper")
	  or diag(substr($err, 0, 2000));
}
diag("$ncalls calls, $nbad with the wrong outcome; outcomes:\n"
	  . join("\n", map { "  $_: $tally{$_}" } sort keys %tally));

# The exact keys, through pklimit_count and through their rows.
my @mks = grep { !$tainted{$_} } sort keys %model;
diag(scalar(grep { $_ } values %tainted)
	  . ' exact pairs are left out of the final check after a wrong answer')
  if grep { $_ } values %tainted;
my ($sql, @want) = ("SET TimeZone = 'UTC';\n");
for my $mk (@mks)
{
	my ($t, $k) = split /\0/, $mk, 2;
	$sql .= "SELECT set_config('platformkit.tenant', " . e_lit($t) . ", false) IS NULL;\n";
	$sql .= 'SELECT pklimit_count(' . e_lit($k) . ");\n";
	$sql .= 'SELECT coalesce((SELECT count FROM platformkit_limits WHERE key = '
	  . e_lit(stored_key($t, $k)) . "), 0);\n";
	push @want, 'f', $model{$mk}, $model{$mk};
}
my ($out, $err) = ('', '');
$node->psql('postgres', $sql, stdout => \$out, stderr => \$err, on_error_stop => 0,
	extra_params => [ '-q' ]);
my @got = split /\n/, $out;
my @wrong;
for my $i (0 .. $#mks)
{
	my ($t, $k) = split /\0/, $mks[$i], 2;
	my @g = map { $_ // '<none>' } @got[ 3 * $i .. 3 * $i + 2 ];
	push @wrong, sprintf("tenant %s key %s: count %s, row %s, model %d",
		show(e_lit($t)), show(e_lit($k)), $g[1], $g[2], $model{ $mks[$i] })
	  if "@g" ne "@want[3 * $i .. 3 * $i + 2]";
}
ok(@mks > 20, scalar(@mks) . ' exact (tenant, key) pairs were used');
ok(!@wrong, 'every exact key: pklimit_count and its stored row equal the model')
  or diag(join("\n", @wrong[ 0 .. ($#wrong < 19 ? $#wrong : 19) ]));
is($err, '', 'final check: nothing on stderr');

# The server survived.
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server still answers');
is($node->safe_psql('postgres', "SELECT pklimit_allow('fuzz-after', 1, '1 hour')"),
	't', 'pklimit still records');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal/, 'no process terminated by a signal');
unlike($log, qr/server process .* (exited with exit code|was terminated)/,
	'no server process crashed');
unlike($log, qr/\bPANIC:  |^TRAP: /m, 'no PANIC or assertion failure');

if (@failures || @wrong)
{
	my $file = "$PostgreSQL::Test::Utils::tmp_check/fuzz_failures.txt";
	open my $fh, '>', $file or die "$file: $!";
	print $fh "PKLIMIT_FUZZ_SEED=$SEED\n", map { "$_\n" } @failures, @wrong;
	close $fh;
	diag("replay: PKLIMIT_FUZZ_SEED=$SEED; every failure is in $file");
}
$node->stop;
done_testing();
