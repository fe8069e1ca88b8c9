# A purge never holds up the calls: 300,000 expired rows behind statistics
# that say none has expired (analyzed while their windows were open, as
# after a crash or before autovacuum's next ANALYZE) are purged in batches
# whose plan does not depend on the statistics and whose time is bounded,
# and calls made meanwhile are all answered by the store.  A million rows
# blocked for years (as any role can make them) do not slow a purge down.
# The worker also leaves mid-purge when the postmaster dies.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use PklimitTest;

my $node = pklimit_node('purge_bounded', "autovacuum = off\n");

# Rows analyzed while their windows were open, expired since.
sub expired_rows
{
	my ($prefix) = @_;
	$node->safe_psql('postgres', qq{
		INSERT INTO platformkit_limits
		SELECT 'g:$prefix-' || i, now(), now() + interval '1 day', 1, now()
		  FROM generate_series(1, 300000) i;
		ANALYZE platformkit_limits;
		UPDATE platformkit_limits
		   SET window_start = clock_timestamp() - interval '3 days',
		       window_end = clock_timestamp() - interval '2 days'
		 WHERE key LIKE 'g:$prefix-%';
	});
}
expired_rows('stale');
my ($estimate) = $node->safe_psql('postgres',
	'EXPLAIN SELECT * FROM platformkit_limits WHERE window_end < now()') =~ /rows=(\d+)/;
cmp_ok($estimate, '<', 1000, "the statistics say almost no window has closed (estimate: $estimate rows)");

my $purge = $node->background_psql('postgres', on_error_stop => 0);
$purge->query_until(qr/go/, "\\echo go\nSET statement_timeout = 0; SELECT pklimit_purge();\n");
ok($node->poll_query_until('postgres', 'SELECT running FROM pklimit_purge_status'),
	'the purge runs');
my $statuses = $node->safe_psql('postgres',
	"SELECT string_agg(c.status, ',') FROM generate_series(1, 20) i,"
	  . " LATERAL pklimit_check('during-' || i, 10, '36500 days') c");
is($statuses, join(',', ('ok') x 20), '20 calls made during the purge are all answered by the store');
is($node->safe_psql('postgres', 'SELECT running FROM pklimit_purge_status'), 't',
	'while the purge still ran');
ok($node->poll_query_until('postgres', 'SELECT NOT running AND NOT failed FROM pklimit_purge_status'),
	'the purge ends');
is($node->safe_psql('postgres', "SELECT count(*) FROM platformkit_limits WHERE key LIKE 'g:stale-%'"),
	'0', 'it deleted every expired row');

# A million keys blocked for 10,000 years, their windows closed two days
# ago, among 5,000 expired rows: a purge walks none of the blocked rows.
$node->safe_psql('postgres', q{
	INSERT INTO platformkit_limits
	SELECT 'g:blocked-' || i, now() - interval '3 days', now() - interval '2 days', 1,
	       now() - interval '2 days', now() + interval '3650000 days'
	  FROM generate_series(1, 1000000) i;
	INSERT INTO platformkit_limits
	SELECT 'g:expired-' || i, now() - interval '3 days', now() - interval '2 days', 1,
	       now() - interval '2 days', NULL
	  FROM generate_series(1, 5000) i;
});
is($node->safe_psql('postgres', "SET statement_timeout = 0; SELECT pklimit_purge()"), '5000',
	'a purge among a million rows blocked for years deletes the 5,000 expired ones');
is($node->safe_psql('postgres', 'SELECT concat_ws(\'|\', failed, overdue) FROM pklimit_purge_status'),
	'f|00:00:00', 'without failing, and no row is left to delete');
$node->safe_psql('postgres', "DELETE FROM platformkit_limits WHERE key LIKE 'g:blocked-%'");

# The postmaster dies mid-purge: the worker leaves between two batches.
expired_rows('orphan');
$purge->query_until(qr/again/, "\\echo again\nSELECT pklimit_purge();\n");
ok($node->poll_query_until('postgres', 'SELECT running AND deleted > 0 FROM pklimit_purge_status'),
	'a second purge runs');
my $worker = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker'");
$node->kill9;
my $gone = 0;
for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
{
	last if ($gone = !kill(0, $worker));
	usleep(100_000);
}
ok($gone, 'the worker leaves after the postmaster died');
$purge->{run}->kill_kill;
# the server starts again once the dead postmaster's children have all gone
my $started = 0;
for (1 .. $PostgreSQL::Test::Utils::timeout_default)
{
	last if ($started = $node->start(fail_ok => 1));
	$node->{_pid} = undef;    # a failed start read the dead postmaster's pid file
	sleep 1;
}
ok($started, 'the server starts again');
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM platformkit_limits WHERE key LIKE 'g:orphan-%'"),
	'>', 0, 'before the purge was done: it did not go on without the postmaster');

$node->stop;
done_testing();
