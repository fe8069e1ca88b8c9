# Copyright (c) pklimit contributors
#
# The memory path (docs/memory.md) across everything but a crash: a fast and
# a smart shutdown, and a terminated worker, lose nothing (with
# pklimit.flush_interval at 60s only the worker's final flush can write the
# calls); memory calls while no worker serves take the durable path, exactly,
# until a new worker's flush opens memory again; DROP EXTENSION and DROP
# DATABASE discard the entries they drop, and no other database's; a memory
# call in a rolled-back or a read-only transaction is counted.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

# 40 entries, a share of 20 for each of 2 databases (the DROP DATABASE case)
my $node = pklimit_node('memory_restart',
	"pklimit.flush_interval = 60s\npklimit.memory_keys = 40\npklimit.max_workers = 2\n");

sub sql { return $node->safe_psql($_[1] // 'postgres', $_[0]); }

# columns of the database's row of pklimit_stats (0 for no row)
sub mem_stat
{
	my ($columns, $db) = @_;
	my $got = sql("SELECT $columns FROM pklimit_stats WHERE datname = '" . ($db // 'postgres') . "'");
	return $got eq '' ? 0 : $got;
}

sub row { return sql("SELECT count FROM platformkit_limits WHERE key = 'g:$_[0]'", $_[1]); }

# $n memory calls on $key, one session; returns the memory_calls they added.
sub memory_calls
{
	my ($key, $n, $db) = @_;
	my $before = mem_stat('memory_calls', $db);
	sql("SELECT pklimit_allow('$key', 1000, '36500 days', durable => false) FROM generate_series(1, $n)", $db);
	return mem_stat('memory_calls', $db) - $before;
}

# Memory opens at the worker's first flush: wait for it, so that the first
# call on a key reads it in and is decided in memory too (before, it takes
# the durable path).
sub memory_open
{
	my ($db) = @_;
	sql("SELECT pklimit_count('wake-up')", $db);
	return $node->poll_query_until($db // 'postgres',
		'SELECT flush_lag_ms IS NOT NULL FROM pklimit_stats WHERE datname = current_database()');
}

sub worker_gone
{
	my ($pid) = @_;
	return $node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid");
}

# --- a fast and a smart shutdown write what memory holds
for my $mode (qw(fast smart))
{
	ok(memory_open(), "$mode: memory is open");
	is(memory_calls($mode, 50), 50, "$mode: 50 of 50 calls decided in memory (the first read the key in)");
	is(row($mode), '', "$mode: no row: reading the key in wrote nothing, and no flush wrote the calls");
	$node->stop($mode);
	$node->start;
	is(row($mode), '50', "$mode: after the $mode shutdown, the row holds all 50");
	is(sql("SELECT pklimit_count('$mode')"), '50', "$mode: pklimit_count is 50");
}

# --- a terminated worker writes memory as it exits; without a worker memory
# calls take the durable path, and a new worker opens memory again
my $pid = worker_pid($node);
ok(memory_open(), 'terminate: memory is open');
is(memory_calls('term', 50), 50, 'terminate: 50 of 50 calls decided in memory');
sql("SELECT pg_terminate_backend($pid)");
ok(worker_gone($pid), 'terminate: the worker is gone');
is(row('term'), '50', 'terminate: the worker wrote all 50 as it exited');
is(mem_stat('flush_lag_ms IS NULL'), 't', 'terminate: memory is closed while no worker serves');
my $fallbacks = mem_stat('memory_fallbacks');
sql("SELECT pklimit_allow('term', 1000, '36500 days', durable => false) FROM generate_series(1, 20)");
cmp_ok(mem_stat('memory_fallbacks'), '>', $fallbacks, 'terminate: a memory call without a worker took the durable path');
isnt(worker_pid($node), $pid, 'terminate: a new worker serves');
ok($node->poll_query_until('postgres', 'SELECT flush_lag_ms IS NOT NULL FROM pklimit_stats WHERE datname = current_database()'),
	"terminate: the new worker's flush opens memory again");
is(memory_calls('term', 10), 10, 'terminate: then memory calls are decided in memory again');
is(sql("SELECT pklimit_count('term')"), '80', 'terminate: the key counts exactly 80');

# --- DROP EXTENSION discards the entries of its table
is(memory_calls('dropped', 30), 30, 'drop extension: 30 of 30 calls in memory');
sql('DROP EXTENSION pklimit');
sql('CREATE EXTENSION pklimit');
is(sql("SELECT pklimit_count('dropped')"), '0', 'drop extension: after DROP and CREATE EXTENSION the key counts 0');
is(sql("SELECT count FROM pklimit_check('dropped', 1000, '36500 days', durable => false)"), '1',
	'drop extension: a memory call counts 1, not on from the old memory');
is(memory_calls('dropped', 2), 2, 'drop extension: the key is in memory again');
$pid = worker_pid($node);
sql("SELECT pg_terminate_backend($pid)");
ok(worker_gone($pid), 'drop extension: the worker is gone');
is(row('dropped'), '3', 'drop extension: its final flush wrote 3, nothing of the old memory');

# --- DROP DATABASE discards its entries, and no other database's
sql('CREATE DATABASE other');
sql('CREATE EXTENSION pklimit', 'other');
sql("SELECT pklimit_allow('o' || i, 1000, '36500 days', durable => false) FROM generate_series(1, 10) i", 'other');
is(mem_stat('memory_keys', 'other'), '10', 'drop database: the other database holds 10 keys in memory');
ok(memory_open(), "drop database: postgres's memory is open");
is(memory_calls('kept', 5), 5, 'drop database: a key of postgres in memory');
my $held = mem_stat('memory_keys');
sql('DROP DATABASE other');
is(mem_stat('memory_keys'), $held, "drop database: postgres still holds its $held keys");
is(memory_calls('kept', 5), 5, "drop database: postgres's key is still decided in memory");
is(sql("SELECT pklimit_count('kept')"), '10', "drop database: and counts exactly 10");
# if the dropped database's 10 entries stayed, postgres could not take all
# 40 without giving back entries of its own
my $free = 40 - $held;
my ($evictions, $fallbacks_before) = split /\|/, mem_stat('memory_evictions, memory_fallbacks');
sql("SELECT pklimit_allow('fill' || i, 1000, '36500 days', durable => false) FROM generate_series(1, $free) i");
is(mem_stat('memory_keys'), '40', "drop database: postgres took the $free entries left, the dropped database's among them");
is(mem_stat('memory_evictions, memory_fallbacks'), "$evictions|$fallbacks_before",
	'drop database: without giving any back, and no call fell back');

# --- a memory call outlives its transaction and works read-only
sql("SELECT pklimit_allow('xact', 1000, '36500 days', durable => false)");
my $calls = mem_stat('memory_calls');
sql("BEGIN; SELECT pklimit_allow('xact', 1000, '36500 days', durable => false); ROLLBACK");
sql("BEGIN READ ONLY; SELECT pklimit_allow('xact', 1000, '36500 days', durable => false); COMMIT");
sql("SET default_transaction_read_only = on; BEGIN;"
	  . " SELECT pklimit_allow('xact', 1000, '36500 days', durable => false); ROLLBACK");
is(mem_stat('memory_calls'), $calls + 3, 'xact: the 3 calls in rolled-back and read-only transactions were decided in memory');
is(sql("SELECT pklimit_count('xact')"), '4', 'xact: all 4 calls counted');
sql("BEGIN; SELECT pklimit_allow('xact-new', 1000, '36500 days', durable => false); ROLLBACK");
is(sql("SELECT pklimit_count('xact-new')"), '1', 'xact: a memory call that read its key in, rolled back, is counted');
$node->stop('fast');
$node->start;
is(row('xact') . '|' . row('xact-new'), '4|1', 'xact: and written by the final flush');

$node->stop;
done_testing();
