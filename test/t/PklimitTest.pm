# PklimitTest: helpers shared by pklimit's TAP tests.
package PklimitTest;

use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use Test::More;
use Time::HiRes qw(time);
use Exporter 'import';
use File::Basename qw(dirname);

# Running prove by hand outside "make installcheck": find pg_regress, which
# Cluster->init needs, in the PGXS tree.
if (!defined $ENV{PG_REGRESS})
{
	my $pgxs = `pg_config --pgxs`;
	chomp $pgxs;
	$ENV{PG_REGRESS} = dirname($pgxs) . '/../test/regress/pg_regress';
}

our @EXPORT = qw(pklimit_node worker_pid timed_psql);

# A started node with pklimit preloaded and created in database postgres;
# %init goes to PostgreSQL::Test::Cluster::init.
sub pklimit_node
{
	my ($name, $conf, %init) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%init);
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'pklimit'\n" . ($conf // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION pklimit');
	return $node;
}

# The pid of the pklimit worker serving a database, once it runs.
sub worker_pid
{
	my ($node, $db) = @_;
	$db //= 'postgres';
	$node->safe_psql($db, "SELECT pklimit_count('wake-up')");
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker' AND datname = '$db'"
	);
}

# Run SQL with psql; returns (stdout, stderr, seconds taken).
sub timed_psql
{
	my ($node, $db, $sql) = @_;
	my ($out, $err) = ('', '');
	my $start = time();
	$node->psql($db, $sql, stdout => \$out, stderr => \$err, on_error_stop => 0);
	return ($out, $err, time() - $start);
}

1;
