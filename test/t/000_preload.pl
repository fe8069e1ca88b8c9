# Preload: the extension loaded through shared_preload_libraries installs and
# answers, and its settings are registered.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('preload');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pklimit'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pklimit');

is($node->safe_psql('postgres', 'SHOW pklimit.default_max'), '10', 'default_max is registered at preload');
is($node->safe_psql('postgres', "SELECT pklimit_allow('k', 1, '36500 days')"), 't', 'first call allowed');
is($node->safe_psql('postgres', "SELECT pklimit_allow('k', 1, '36500 days')"), 'f', 'second call refused');

# counts survive a restart: the row is a logged table row
$node->restart;
is($node->safe_psql('postgres', "SELECT pklimit_count('k')"), '2', 'count survives a restart');

$node->stop;
done_testing();
