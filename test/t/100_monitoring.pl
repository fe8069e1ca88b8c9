# The postgres_exporter queries in monitoring/: each runs against a real
# server as a pg_monitor member (the exporter's usual role), returns every
# column its metrics name, each with a usage the exporter knows and a
# numeric value, under the metric names listed here (and in
# docs/monitoring.md, "Prometheus"), with the values pklimit_stats holds.  Then the reset
# of one database and of all, and DROP DATABASE taking its row.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use CPAN::Meta::YAML;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $file = "$FindBin::RealBin/../../monitoring/postgres_exporter.yaml";
my $yaml = CPAN::Meta::YAML->read($file) or die CPAN::Meta::YAML->errstr;
my $queries = $yaml->[0];
is_deeply([ sort keys %$queries ], ['pklimit', 'pklimit_purge'], 'two queries, namespaces pklimit and pklimit_purge');

my $node = pklimit_node('monitoring');
$node->safe_psql('postgres', 'CREATE ROLE exporter LOGIN IN ROLE pg_monitor');
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION pklimit');
# a known mix: 3 allowed and 2 refused in postgres, one allowed in other
$node->safe_psql('postgres', "SELECT pklimit_allow('m', 3, '1 day') FROM generate_series(1, 5)");
$node->safe_psql('other', "SELECT pklimit_allow('m', 3, '1 day', cost => 2)");

# a row whose window closed two days ago: it has outlived the retention of
# 1 day by a day; one whose window closed five days ago is blocked for
# another day, so no purge may delete it yet; one whose block ended a day
# and three hours ago has been deletable for three hours: the first decides
$node->safe_psql('postgres', q{INSERT INTO platformkit_limits VALUES
	('g:old', now() - interval '3 days', now() - interval '2 days', 1, now() - interval '2 days', NULL),
	('g:blocked', now() - interval '6 days', now() - interval '5 days', 1, now() - interval '5 days',
	 now() + interval '1 day'),
	('g:unblocked', now() - interval '5 days', now() - interval '4 days', 1, now() - interval '4 days',
	 now() - interval '27 hours')});

my %usages = map { $_ => 1 } qw(LABEL COUNTER GAUGE);
my %names = (
	pklimit => [qw(calls allowed refused unavailable failed_open timeouts queue_full no_worker
	  lock_timeouts read_only no_table errors shadow_refused events batches worker_starts
	  queue_depth worker_running wait_seconds max_wait_seconds memory_calls memory_reads
	  memory_fallbacks memory_evictions flushes rows_flushed memory_keys flush_lag_seconds)],
	pklimit_purge => [qw(running failed overdue_seconds)]);
my %master = (pklimit => 'true', pklimit_purge => 'false');
my (%by_db, %metric);
for my $namespace (sort keys %$queries)
{
	my $q = $queries->{$namespace};
	is($q->{master}, $master{$namespace}, "$namespace: master $master{$namespace}");
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT json_agg(row_to_json(q)) FROM ($q->{query}) q",
		extra_params => [ '-U', 'exporter' ]);
	is($ret, 0, "$namespace: the query runs as a pg_monitor member") or diag($err);
	my $rows = decode_json($out);
	$by_db{$namespace} = { map { $_->{datname} => $_ } @$rows };
	my (@labels, @metrics);
	for my $m (@{ $q->{metrics} })
	{
		my ($column, $spec) = %$m;
		ok($usages{ $spec->{usage} }, "$namespace: $column has a known usage ($spec->{usage})");
		ok(length($spec->{description} // '') > 0, "$namespace: $column is described");
		ok(exists $rows->[0]{$column}, "$namespace: the query returns $column");
		ok(!grep({ !defined $_->{$column} || ($spec->{usage} ne 'LABEL' && $_->{$column} !~ /^-?[0-9.]+(?:e[-+]?[0-9]+)?$/i) } @$rows),
			"$namespace: $column is " . ($spec->{usage} eq 'LABEL' ? 'never NULL' : 'a number') . " in every row");
		if ($spec->{usage} eq 'LABEL') { push @labels, $column }
		else { push @metrics, "${namespace}_$column"; $metric{"${namespace}_$column"} = $spec->{usage} }
	}
	is_deeply(\@labels, ['datname'], "$namespace: labelled by datname");
	is_deeply([ sort @metrics ], [ sort map { "${namespace}_$_" } @{ $names{$namespace} } ],
		"$namespace: the metric names, as listed");
}
my $stats = $by_db{pklimit};
is(join('|', map { $stats->{postgres}{$_} } qw(calls allowed refused unavailable events batches worker_running)),
	'5|3|2|0|5|5|1', "pklimit: postgres's values, as pklimit_stats counted them");
is(join('|', map { $stats->{other}{$_} } qw(calls allowed refused events)),
	'1|1|0|2', "pklimit: other's values");
cmp_ok($stats->{postgres}{wait_seconds}, '>', 0, "pklimit: wait_seconds sums the waits");
cmp_ok($stats->{postgres}{max_wait_seconds}, '<=', $stats->{postgres}{wait_seconds},
	"pklimit: no wait is longer than all of them");
is($metric{pklimit_unavailable}, 'COUNTER', 'pklimit_unavailable is a counter, for increase()');
is($metric{pklimit_queue_depth}, 'GAUGE', 'pklimit_queue_depth is a gauge');
my $purge = $by_db{pklimit_purge}{postgres};
is(join('|', $purge->{running}, $purge->{failed}), '0|0', 'pklimit_purge: no purge ran');
cmp_ok($purge->{overdue_seconds}, '>', 86400 - 3600, 'pklimit_purge: overdue_seconds says the oldest row outlived its retention by about a day');
cmp_ok($purge->{overdue_seconds}, '<', 86400 + 3600, 'pklimit_purge: and not more');
is($node->safe_psql('postgres', q{SELECT now() - oldest_end BETWEEN interval '47 hours' AND interval '49 hours'
	FROM pklimit_purge_status}), 't', "oldest_end is that of the row whose window ended two days ago");
is($node->safe_psql('postgres', 'SELECT pklimit_purge()'), '2', 'a purge deletes the two deletable rows');
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT json_agg(row_to_json(q)) FROM ($queries->{pklimit_purge}{query}) q", extra_params => [ '-U', 'exporter' ]);
is(decode_json($out)->[0]{overdue_seconds}, 0, 'pklimit_purge: none after a purge, the blocked row kept');

# The reset of one database leaves the other's counts; a reset of all does
# not; DROP DATABASE takes the database's row.
my $counts = "SELECT string_agg(datname || '=' || calls, ' ' ORDER BY datname) FROM pklimit_stats WHERE datname IN ('postgres', 'other')";
$node->safe_psql('postgres', "SELECT pklimit_stats_reset(oid) FROM pg_database WHERE datname = 'other'");
is($node->safe_psql('postgres', $counts), 'other=0 postgres=5', 'a reset of one database leaves the others');
$node->safe_psql('postgres', 'SELECT pklimit_stats_reset()');
is($node->safe_psql('postgres', $counts), 'other=0 postgres=0', 'a reset of all resets all');
$node->safe_psql('other', "SELECT pklimit_allow('m', 3, '1 day')");
my $other_oid = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'other'");
$node->safe_psql('postgres', 'DROP DATABASE other');
is($node->safe_psql('postgres', "SELECT count(*) FROM pklimit_stats WHERE dbid = $other_oid"), '0',
	'a dropped database leaves no row');

# A role that is not in pg_monitor cannot read it.
$node->safe_psql('postgres', 'CREATE ROLE nobody LOGIN');
($ret, $out, $err) = $node->psql('postgres', $queries->{pklimit}{query}, extra_params => [ '-U', 'nobody' ]);
like($err, qr/permission denied for view pklimit_stats/, 'a role outside pg_monitor reads nothing');
($ret, $out, $err) = $node->psql('postgres', $queries->{pklimit_purge}{query}, extra_params => [ '-U', 'nobody' ]);
like($err, qr/permission denied for view pklimit_purge_status/, 'nor the purge status');

$node->stop;
done_testing();
