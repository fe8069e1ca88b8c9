# Preload: without shared_preload_libraries the extension installs but its
# functions refuse with SQLSTATE 55000 and a hint; with it, the settings are
# registered and a worker serves the database.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $bare = PostgreSQL::Test::Cluster->new('no_preload');
$bare->init;
$bare->start;
is($bare->psql('postgres', 'CREATE EXTENSION pklimit'), 0,
	'CREATE EXTENSION works without preload');
my ($out, $err) = ('', '');
$bare->psql('postgres', "\\set VERBOSITY verbose\nSELECT pklimit_allow('k', 1, '1 hour')",
	stdout => \$out, stderr => \$err);
like($err, qr/ERROR:  55000: pklimit is not loaded/, 'allow without preload is 55000');
like($err, qr/HINT:  .*shared_preload_libraries/, 'the hint names shared_preload_libraries');
for my $call ("pklimit_count('k')", "pklimit_forget('k')", "pklimit_check('k', 1, '1 hour')",
	"pklimit_allow('k')")
{
	$bare->psql('postgres', "\\set VERBOSITY verbose\nSELECT $call", stderr => \$err);
	like($err, qr/55000/, "$call without preload is 55000");
}
$bare->psql('postgres', "SELECT pklimit_allow('', 1, '1 hour')", stderr => \$err);
like($err, qr/key must not be empty/, 'bad input is still reported first');
$bare->stop;

my $node = pklimit_node('preload');
is($node->safe_psql('postgres', 'SHOW pklimit.default_max'), '10', 'settings registered at preload');
is($node->safe_psql('postgres', "SELECT pklimit_allow('k', 1, '36500 days')"), 't', 'first call allowed');
is($node->safe_psql('postgres', "SELECT pklimit_allow('k', 1, '36500 days')"), 'f', 'second call refused');
is($node->safe_psql('postgres',
	"SELECT backend_type || ' ' || application_name FROM pg_stat_activity WHERE backend_type LIKE 'pklimit%'"),
	'pklimit worker pklimit worker', 'one worker, visible in pg_stat_activity');

# The worker goes away when idle and comes back on demand.
$node->safe_psql('postgres', "ALTER SYSTEM SET pklimit.worker_idle_timeout = '1s'; SELECT pg_reload_conf()");
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'pklimit worker'"),
	'an idle worker exits');
is($node->safe_psql('postgres', "SELECT pklimit_count('k')"), '2', 'a new worker starts on demand');

$node->stop;
done_testing();
