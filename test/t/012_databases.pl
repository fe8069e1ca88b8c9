# Several databases: separate tables, workers and counts; settings of a
# database or role do not reach its worker; only a database's owner can make
# its worker leave; DROP DATABASE, renaming and CREATE DATABASE ... TEMPLATE
# are not blocked by a worker.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $node = pklimit_node('databases');
my ($out, $err);

# --- two databases: separate tables, separate workers, separate counts
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION pklimit');
$node->safe_psql('other', "SELECT pklimit_allow('shared-name', 10, '36500 days') FROM generate_series(1, 5)");
$node->safe_psql('postgres', "SELECT pklimit_allow('shared-name', 10, '36500 days') FROM generate_series(1, 2)");
is($node->safe_psql('other', "SELECT pklimit_count('shared-name')"), '5', 'database other counts its own');
is($node->safe_psql('postgres', "SELECT pklimit_count('shared-name')"), '2', 'database postgres counts its own');
is($node->safe_psql('postgres',
	"SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_stat_activity WHERE backend_type = 'pklimit worker'"),
	'other,postgres', 'one worker per database');

# --- settings of the database or role do not reach the worker
$node->safe_psql('postgres', "ALTER DATABASE other SET default_transaction_read_only = on");
$node->safe_psql('postgres', "ALTER DATABASE other SET statement_timeout = '1ms'");
$node->safe_psql('postgres', "ALTER DATABASE other SET default_transaction_isolation = 'serializable'");
$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'pklimit worker' AND datname = 'other'");
($out, $err) = timed_psql($node, 'other', "SET statement_timeout = 0; SELECT status FROM pklimit_check('shared-name', 10, '36500 days')");
is($out, 'ok', 'a read-only, 1 ms, serializable database still gets its events recorded');
$node->safe_psql('postgres', "ALTER DATABASE other RESET ALL");
# a lock timeout in the worker under exit_on_error, and a transaction
# timeout, would end the worker (this test's sessions set their own)
$node->safe_psql('postgres', "ALTER DATABASE other SET exit_on_error = on");
if (pg_major() >= 17)
{
	$node->safe_psql('postgres', "ALTER DATABASE other SET transaction_timeout = '1ms'");
	$ENV{PGOPTIONS} = '-c transaction_timeout=0';
}
$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'pklimit worker' AND datname = 'other'");
my $settled = worker_pid($node, 'other');
my $locker = $node->background_psql('other');
$locker->query_safe("BEGIN; SELECT FROM platformkit_limits WHERE key = 'g:shared-name' FOR UPDATE");
($out, $err) = timed_psql($node, 'other', "SET client_min_messages = error; SET pklimit.timeout = '300ms'; "
	  . "SELECT status FROM pklimit_check('shared-name', 10, '36500 days')");
is($out, 'lock_timeout', 'a call on a locked row in a database with exit_on_error answers lock_timeout');
$locker->query_safe('ROLLBACK');
$locker->quit;
is(worker_pid($node, 'other'), $settled, 'and the worker goes on: exit_on_error'
	  . (pg_major() >= 17 ? ' and transaction_timeout do' : ' does') . ' not reach it');
delete $ENV{PGOPTIONS};
$node->safe_psql('postgres', "ALTER DATABASE other RESET ALL");

# --- nobody but the database's owner can make its worker leave
my $worker_other = worker_pid($node, 'other');
$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');
$node->psql('postgres', 'SET ROLE mallory; DROP DATABASE other', stderr => \$err);
like($err, qr/must be owner of database other/, 'an ordinary role cannot drop the database');
is(worker_pid($node, 'other'), $worker_other, 'and its attempt did not stop the worker');
$node->safe_psql('postgres', 'ALTER DATABASE other CONNECTION LIMIT 100');
$node->psql('postgres', 'ALTER DATABASE other SET TABLESPACE nosuch');
is(worker_pid($node, 'other'), $worker_other,
	'nor does ALTER DATABASE by its owner, but to move it to a tablespace that exists');

# --- statements that need the database to themselves are not blocked
is($node->psql('postgres', 'CREATE DATABASE copy TEMPLATE other'), 0,
	'CREATE DATABASE from it as a template succeeds while a worker serves it');
is($node->psql('postgres', 'ALTER DATABASE other RENAME TO other2'), 0, 'so does renaming it');
is($node->psql('postgres', 'DROP DATABASE other2'), 0, 'and DROP DATABASE');
is($node->safe_psql('copy', "SELECT pklimit_count('shared-name')"), '6', 'the copy keeps its counts (5, and the one recorded above)');

# --- the extension's schema renamed: the worker writes the same table under
# its new name, never a table created under the old one
$node->safe_psql('postgres', 'CREATE DATABASE moved');
$node->safe_psql('moved', 'SET client_min_messages = error; CREATE SCHEMA lim; CREATE EXTENSION pklimit SCHEMA lim');
$node->safe_psql('moved', "SELECT lim.pklimit_allow('k', 10, '1 hour') FROM generate_series(1, 2)");
$node->safe_psql('moved', 'ALTER SCHEMA lim RENAME TO lim2');
$node->safe_psql('moved', 'CREATE SCHEMA lim; CREATE TABLE lim.platformkit_limits (LIKE lim2.platformkit_limits)');
is($node->safe_psql('moved', "SELECT allowed || ':' || count || ':' || status FROM lim2.pklimit_check('k', 10, '1 hour')"),
	'true:3:ok', 'after ALTER SCHEMA ... RENAME the calls count on in the same table');
is($node->safe_psql('moved', 'SELECT count(*) FROM lim.platformkit_limits'), '0',
	'and nothing goes to a table made under the old name');

$node->stop;
done_testing();
