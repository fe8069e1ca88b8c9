# Copyright (c) pklimit contributors
#
# Conformance, a fixed scenario whose answers are also written out by hand,
# so the model of PklimitModel.pm is itself checked: windows that close,
# restart after closing, a call with another length counting in the key's
# open window, one length spelled two ways, default limit and window, global
# namespace versus tenants.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PklimitTest;
use PklimitModel;

my $node = conformance_node('scenario', 'a fixed scenario');
my $failed = 0;

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
		# the 36500-day calls count in the open 30000-day window of 'epoch'
		my @want = ('t', 't', 'f', '3', 't', 't', 'f', 'f|4|0', '4', '0',
			't', '1', 'f', '2');
		my @g = @{$got}[ 0 .. $#want ];
		$g[7] =~ s/^([tf]\|\d+\|\d+)\|.*$/$1/;
		is_deeply(\@g, \@want, 'fixed scenario, part 1: answers written by hand');
	}
	else { $failed = 1; }

	# Let the 1.5-second window close, by the server's clock.
	if (!$failed)
	{
		my $t = server_clock();
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
			{ op => 'count', key => 'epoch' },       # long window: still 4
		);
		$got = run_batch('fixed scenario, part 2', \@s2);
		if ($got)
		{
			is_deeply($got, [ '0', 't', '1', 't', 'f', '0', '4' ],
				'fixed scenario, part 2: answers written by hand');
		}
		else { $failed = 1; }
	}
}

$node->stop;
done_testing();
