#!/usr/bin/perl
# test/progress.pl LOG: the TAP layer's progress, for test/run.sh.
#
# Reads the output of prove -v --merge on stdin and copies it to LOG; prints
# one line per test file as it ends ("   NAME: N passed, N failed (T s)",
# or "   NAME: not run: why" for a file skipped as a whole), and, for every
# check that failed, its line and its diagnostics (got, expected), each
# prefixed "   ! ", which test/run.sh gathers at the end of the run.
use strict;
use warnings;
use Time::HiRes qw(time);

my $log = shift or die "usage: progress.pl LOG\n";
open(my $out, '>', $log) or die "$log: $!\n";
$| = 1;

my ($name, $passed, $failed, $started, $dubious);
# files run one after another: each starts when the one before ended (its
# header line comes whole only with its first output)
my $last_end = time();
my (@failures, $in_failure, @other);

sub finish_file
{
	my ($how) = @_;
	return unless defined $name;
	$last_end = time();
	printf "   %s: %d passed, %d failed (%d s)%s\n", $name, $passed, $failed, $last_end - $started,
	  $how ? " - $how" : '';
	undef $name;
}

while (my $line = <STDIN>)
{
	print $out $line;
	chomp $line;
	if ($line =~ m{^test/t/([0-9a-z_]+)\.pl \.+ ?(.*)$})
	{
		my ($file, $rest) = ($1, $2);
		finish_file('');
		if ($rest =~ /^skipped: (.*)$/)
		{
			print "   $file: not run: $1\n";
			$last_end = time();
			next;
		}
		($name, $passed, $failed, $started, $dubious) = ($file, 0, 0, $last_end, undef);
		@other = ();
		next;
	}
	next unless defined $name;
	if ($line =~ /^skipped: (.*)$/)
	{
		# a file skipped as a whole (the console formatter says it so)
		print "   $name: not run: $1\n";
		undef $name;
		$last_end = time();
	}
	elsif ($line =~ /^ok \d+/)
	{
		$in_failure = 0;
		$passed++ unless $line =~ /# skip/i;
	}
	elsif ($line =~ /^not ok \d+/)
	{
		$failed++;
		$in_failure = 1;
		push @failures, "$name: $line";
	}
	elsif ($in_failure && $line =~ /^#/)
	{
		push @failures, "$name:   $line";
	}
	elsif ($line eq 'ok')
	{
		finish_file('');
	}
	elsif ($line =~ /^Dubious, /)
	{
		# the file exited badly (died, no plan), after the lines that say why
		$in_failure = 0;
		$dubious = $line;
		push @failures, map({ "$name:   $_" } @other), "$name: $line";
	}
	elsif ($line =~ /^(All \d+ subtests passed|Failed \d+\/\d+ subtests|No subtests run)/)
	{
		my $end = $1;
		push @failures, "$name: $end" unless $end =~ /^All/;
		finish_file($dubious // $end);
	}
	elsif ($line !~ /^(?:1\.\.\d+|#.*|\s*)$/)
	{
		# not TAP: what a test printed, or why it died
		push @other, $line;
		shift @other while @other > 5;
	}
}
finish_file('');
print "   ! $_\n" for @failures;
