# Citus: platformkit_limits distributed by key over a coordinator and two
# worker nodes keeps every promise of one server: exact counts from several
# nodes at once, each batch one distributed transaction (a retried batch
# counts nothing twice), the lock wait bounded on every node, no stall
# between nodes, tenants and row level security, purge by hand and by
# pg_cron, GCRA and the sliding window (exact answers from several nodes, on
# one key and at once), the updates from 0.1.0 and 0.2.0 of a distributed
# table, a reference table, policies (a reference table, changes seen on
# every node), leases (colocated with the counts, exact from every node at
# once), and the way to drop the extension.  Not run (never passed) where the citus
# extension is not installed: see docs/citus.md.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use List::Util qw(sum);
use PklimitTest;

my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
plan skip_all => 'the citus extension is not installed'
  unless -f "$sharedir/extension/citus.control";
plan skip_all => 'pg_cron is not installed'
  unless -f "$sharedir/extension/pg_cron.control";

# A node with Citus, pg_cron and pklimit preloaded (Citus first, as it
# requires); the nodes reach each other through their socket directories.
sub citus_node
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'citus,pg_cron,pklimit'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_prepared_transactions = 100
max_worker_processes = 32
citus.local_hostname = '@{[$node->host]}'
});
	$node->start;
	return $node;
}

my $coord = citus_node('coordinator');
my @workers = (citus_node('worker1'), citus_node('worker2'));
my $version = $coord->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'pklimit'");
my @nodes = ($coord, @workers);

# Database $db on every node, with citus, and the workers added to it.
sub citus_database
{
	my ($db) = @_;
	for my $node (@nodes)
	{
		$node->safe_psql('postgres', "CREATE DATABASE $db") if $db ne 'postgres';
		$node->safe_psql($db, 'CREATE EXTENSION citus');
	}
	$coord->safe_psql($db, sprintf("SELECT citus_set_coordinator_host('%s', %d)",
		$coord->host, $coord->port));
	$coord->safe_psql($db, sprintf("SELECT citus_add_node('%s', %d)", $_->host, $_->port))
	  for @workers;
}

# The port of the node holding the shard of stored key $key.
sub key_port
{
	my ($db, $key) = @_;
	return $coord->safe_psql($db, qq{
		SELECT p.nodeport FROM pg_dist_shard_placement p
		 WHERE p.shardid = get_shard_id_for_distribution_column('platformkit_limits', '$key')});
}

# Key names prefix-1, prefix-2, ... until one is on a worker node other than
# those of @avoid (ports); returns (name, port).
sub key_on_other_node
{
	my ($db, $prefix, @avoid) = @_;
	for my $i (1 .. 100)
	{
		my $port = key_port($db, "g:$prefix-$i");
		return ("$prefix-$i", $port) unless grep { $_ == $port } @avoid;
	}
	die "no key of $prefix on another node";
}

# Run pgbench with $script on $node in the background, in $pgbench_db.
my $pgbench_db = 'postgres';
sub start_pgbench
{
	my ($node, $script_name, $script, @args) = @_;
	my $file = $node->basedir . "/$script_name.sql";
	open my $fh, '>', $file or die "$file: $!";
	print $fh $script;
	close $fh;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(['pgbench', '-n', '-h', $node->host, '-p', $node->port,
		'-f', $file, @args, $pgbench_db], '>', \$out, '2>', \$err);
	return sub { $h->finish; return ($h->result(0), $out, $err) };
}

sub stat_of
{
	my ($node, $column) = @_;
	return $node->safe_psql('postgres',
		"SELECT $column FROM pklimit_stats WHERE datname = 'postgres'");
}

citus_database('postgres');
$coord->safe_psql('postgres', 'CREATE EXTENSION pg_cron');
$coord->safe_psql('postgres', 'CREATE EXTENSION pklimit');
# a call first, so the worker has seen the table as a local one
$coord->safe_psql('postgres', "SELECT pklimit_allow('before', 5, '1 hour')");
$coord->safe_psql('postgres', q{
	SELECT create_distributed_table('platformkit_limits', 'key');
	SELECT truncate_local_data_after_distributing_table('public.platformkit_limits');});
is($coord->safe_psql('postgres', "SELECT count || ' ' || status FROM pklimit_check('before', 5, '1 hour')"),
	'2 ok', 'the count from before the distribution goes on in the shards');
is($coord->safe_psql('postgres', q{
	SELECT count(*) FROM pg_dist_shard_placement
	 WHERE shardid = get_shard_id_for_distribution_column('platformkit_limits', 'g:before')
	   AND nodeport <> } . $coord->port), '1', 'on a worker node');
is($coord->safe_psql('postgres', q{
	SELECT string_agg(result, ',') FROM run_command_on_workers(
		$$SELECT extversion FROM pg_extension WHERE extname = 'pklimit'$$)}),
	"$version,$version", 'pklimit is created on the worker nodes with the coordinator, at its version');

# --- exact: 4 clients on the coordinator, rows on both worker nodes
$_->safe_psql('postgres', 'SELECT pklimit_stats_reset()') for @nodes;
my $done = start_pgbench($coord, 'exact', q{
\set n random(1, 16)
SELECT pklimit_allow('exact-' || :n, 1000000, '1 hour');
}, '-c', '4', '-j', '2', '-t', '200');
my ($rc, $out, $err) = $done->();
is($rc, 0, 'pgbench on the coordinator ran') or diag($err);
is($coord->safe_psql('postgres', "SELECT sum(count) FROM platformkit_limits WHERE key LIKE 'g:exact-%'"),
	'800', 'every one of 800 calls counted once');
is(stat_of($coord, 'allowed || \'/\' || unavailable'), '800/0', 'each answered by the store');
is($coord->safe_psql('postgres', q{
	SELECT count(DISTINCT nodeport) FROM pg_dist_shard_placement
	 WHERE shardid IN (SELECT get_shard_id_for_distribution_column('platformkit_limits', key)
						 FROM platformkit_limits WHERE key LIKE 'g:exact-%')}),
	'2', 'the rows live on both worker nodes');

# --- GCRA and the sliding window on the distributed table (windows of 36500
# days, so the clock does not matter): a GCRA key bursts 3 then refuses, a
# sliding key counts exactly, whichever node calls; each key's one row lives
# on a worker node
my ($gcra_key, $gcra_port) = key_on_other_node('postgres', 'dist-gcra', $coord->port);
my ($sliding_key) = key_on_other_node('postgres', 'dist-sliding', $coord->port, $gcra_port);
my @answers;
for my $call ([$coord, 'gcra'], [$coord, 'gcra'], [$workers[0], 'gcra'], [$workers[1], 'gcra'],
	[$coord, 'sliding'], [$workers[1], 'sliding'], [$workers[0], 'sliding'], [$coord, 'sliding'])
{
	my ($node, $algorithm) = @$call;
	my $key = $algorithm eq 'gcra' ? $gcra_key : $sliding_key;
	push @answers, $node->safe_psql('postgres', qq{
		SELECT concat_ws(':', allowed, count, remaining, status)
		  FROM pklimit_check('$key', 3, '36500 days', algorithm => '$algorithm')});
}
is("@answers", 't:1:2:ok t:2:1:ok t:3:0:ok f:3:0:ok t:1:2:ok t:2:1:ok t:3:0:ok f:4:0:ok',
	"GCRA ($gcra_key) and sliding ($sliding_key) calls from three nodes answer as on one server");
is($workers[1]->safe_psql('postgres', "SELECT pklimit_count('$gcra_key') || ',' || pklimit_count('$sliding_key')"),
	'3,4', 'pklimit_count reads both states from a worker node');
is($coord->safe_psql('postgres', qq{
	SELECT string_agg(concat_ws(':', algorithm, max_count, previous_count, window_end - window_start,
		expires_at - window_end), ' ' ORDER BY algorithm)
	  FROM platformkit_limits WHERE key IN ('g:$gcra_key', 'g:$sliding_key')}),
	'gcra:3:36500 days sliding:3:0:36500 days:36500 days',
	'each key is one row of its algorithm (NULLs left out: no previous count or expiry for GCRA)');
# one state per key: a fixed call from a worker node counts in the GCRA state
is($workers[0]->safe_psql('postgres', "SELECT allowed FROM pklimit_check('$gcra_key', 3, '36500 days')"),
	'f', 'a fixed call on the GCRA key is decided by its full bucket');
# several keys on different worker nodes, one algorithm, all or nothing
my ($ga) = key_on_other_node('postgres', 'group-gcra-a', $coord->port);
my ($gb) = key_on_other_node('postgres', 'group-gcra-b', $coord->port, key_port('postgres', "g:$ga"));
my $group_call = qq{SELECT string_agg(concat_ws(':', key, allowed, count), ' ')
	FROM pklimit_check_all(ARRAY['$ga', '$gb'], ARRAY[1, 2], ARRAY['36500 days', '36500 days']::interval[],
		record_refused => false, algorithm => 'gcra')};
is($coord->safe_psql('postgres', $group_call), "$ga:t:1 $gb:t:1", 'GCRA on two keys on two worker nodes');
is($workers[1]->safe_psql('postgres', $group_call), "$ga:f:1 $gb:t:1",
	'refused by one: with record_refused => false, neither is recorded');
is($coord->safe_psql('postgres', "SELECT pklimit_count('$ga') || ',' || pklimit_count('$gb')"), '1,1',
	'each key holds only the call allowed on both');

# ... and at once, from two nodes: exactly max_count allowed (the nodes'
# allowed calls added up), as one server would answer the same calls
for my $algorithm ('gcra', 'sliding')
{
	$_->safe_psql('postgres', 'SELECT pklimit_stats_reset()') for @nodes;
	my $hot = qq{SELECT pklimit_allow('hot-$algorithm', 100, '36500 days', algorithm => '$algorithm');
};
	my @running = map { start_pgbench($_, "hot_$algorithm", $hot, '-c', '4', '-j', '2', '-t', '50') }
	  ($coord, $workers[0]);
	for my $i (0 .. 1)
	{
		($rc, $out, $err) = $running[$i]->();
		is($rc, 0, "$algorithm, one hot key: pgbench on node $i ran") or diag($err);
	}
	my ($allowed, $refused) = (0, 0);
	for my $node ($coord, $workers[0])
	{
		my ($yes, $no, $unavailable) = split /\|/, stat_of($node, "concat_ws('|', allowed, refused, unavailable)");
		is($unavailable, '0', "$algorithm, one hot key, " . $node->name . ': every call answered by the store');
		$allowed += $yes;
		$refused += $no;
	}
	is("$allowed/$refused", '100/300', "$algorithm, one hot key, 400 calls from two nodes: exactly 100 allowed");
	is($coord->safe_psql('postgres', "SELECT pklimit_count('hot-$algorithm')"), $algorithm eq 'gcra' ? '100' : '400',
		$algorithm eq 'gcra' ? 'gcra: the bucket holds 100 events, full' : 'sliding: every call counted');
}

# --- two nodes at once, calls on two keys each, in both orders: on 6 keys,
# then on 300 mostly new ones (the nodes' workers create rows at once)
for my $keys (6, 300)
{
	$_->safe_psql('postgres', 'SELECT pklimit_stats_reset()') for @nodes;
	my $pairs = qq{
\\set a random(1, $keys)
\\set b random(1, @{[$keys - 1]})
SELECT pklimit_allow_all(ARRAY['pair$keys-' || :a, 'pair$keys-' || ((:a + :b - 1) % $keys + 1)],
	ARRAY[1000000, 1000000]::bigint[], ARRAY['1 hour', '1 hour']::interval[]);
};
	my @running = map { start_pgbench($_, "pairs$keys", $pairs, '-c', '4', '-j', '2', '-t', '150') }
	  ($coord, $workers[0]);
	for my $i (0 .. 1)
	{
		($rc, $out, $err) = $running[$i]->();
		is($rc, 0, "$keys keys: pgbench on node $i ran") or diag($err);
	}
	is($coord->safe_psql('postgres', "SELECT sum(count) FROM platformkit_limits WHERE key LIKE 'g:pair$keys-%'"),
		'2400', "$keys keys, two nodes, 1200 calls on two keys each: 2400 events, none lost or doubled");
	for my $node ($coord, $workers[0])
	{
		is(stat_of($node, 'allowed || \'/\' || unavailable'), '600/0',
			"$keys keys, " . $node->name . ': every call answered by the store, none stalled');
	}
}

# --- the caller's rollback keeps the event, from any node
for my $node ($coord, $workers[1])
{
	$node->safe_psql('postgres', "BEGIN; SELECT pklimit_allow('rolled-back', 5, '1 hour'); ROLLBACK;");
}
is($coord->safe_psql('postgres', "SELECT pklimit_count('rolled-back')"), '2',
	'events of rolled-back callers on two nodes are kept, once each');

# --- a batch is one distributed transaction; the lock wait holds on every node
my ($x, $x_port) = key_on_other_node('postgres', 'x');
my ($y, $y_port) = key_on_other_node('postgres', 'y', $x_port);
my ($z, $z_port) = key_on_other_node('postgres', 'z', $y_port);
$coord->safe_psql('postgres', "SELECT pklimit_allow('$y', 100, '1 hour')");
my $holder = $coord->background_psql('postgres');
$holder->query_safe("BEGIN; SELECT count FROM platformkit_limits WHERE key = 'g:$y' FOR UPDATE");
my $rollbacks = $coord->safe_psql('postgres',
	"SELECT xact_rollback FROM pg_stat_database WHERE datname = 'postgres'");
my $group = $coord->background_psql('postgres');
$group->query_until(qr/started/, qq{
SET pklimit.timeout = '60s';
\\echo started
SELECT pklimit_allow_all(ARRAY['$x', '$y'], ARRAY[100, 100]::bigint[], ARRAY['1 hour', '1 hour']::interval[]);
});
ok($coord->poll_query_until('postgres', qq{
	SELECT xact_rollback >= $rollbacks + 3 FROM pg_stat_database WHERE datname = 'postgres'}),
	"the worker tried the call on $x and $y (row of $y locked) three times and rolled back");
is($coord->safe_psql('postgres', "SELECT count(*) FROM platformkit_limits WHERE key = 'g:$x'"),
	'0', "nothing of $x was committed on its node by the tries");
is($coord->safe_psql('postgres', "SELECT status FROM pklimit_check('$z', 100, '1 hour')"),
	'ok', "a call on $z (on the other worker node) is answered while the row of $y stays locked");
is($workers[0]->safe_psql('postgres', "SELECT status FROM pklimit_check('$z', 100, '1 hour')"),
	'ok', 'and from a worker node');
my ($out_y, $err_y) = ('', '');
$coord->psql('postgres', "SELECT status FROM pklimit_check('$y', 100, '1 hour')",
	stdout => \$out_y, stderr => \$err_y);
is($out_y, 'lock_timeout', "a call on $y itself answers lock_timeout within its budget");
$holder->query_safe('COMMIT');
$holder->quit;
$group->quit;
is($coord->safe_psql('postgres', "SELECT pklimit_count('$x') || ',' || pklimit_count('$y')"),
	'1,2', "the call on $x and $y committed once after the lock went: $x 1, $y 1 + 1");
is($coord->safe_psql('postgres', "SELECT pklimit_count('$z')"), '2',
	"$z has its two calls");

# --- a node's backend that stops answering (hung on its disk, say) holds up
# only the keys it serves: the worker gives up waiting for it, as for a
# locked row, and goes on with the other keys
my ($on_stopped) = key_on_other_node('postgres', 'stopped', $workers[0]->port);
my ($on_running) = key_on_other_node('postgres', 'running', $workers[1]->port);
$coord->safe_psql('postgres',
	"SELECT pklimit_allow('$on_stopped', 100, '1 hour'), pklimit_allow('$on_running', 100, '1 hour')");
my $coord_worker = worker_pid($coord);
my @stopped = split /\n/, $workers[1]->safe_psql('postgres', qq{
	SELECT pid FROM pg_stat_activity
	 WHERE application_name LIKE 'citus_internal gpid=%'
	   AND substr(application_name, length(application_name) - length('$coord_worker') + 1) = '$coord_worker'});
ok(@stopped > 0, 'the coordinator worker\'s connection to the node is found');
kill 'STOP', @stopped;
END { kill 'CONT', @stopped if @stopped; }	# so a failed test still ends
my $waiting = $coord->background_psql('postgres');
$waiting->query_until(qr/started/, qq{
SET pklimit.timeout = '60s';
\\echo started
SELECT pklimit_allow('$on_stopped', 100, '1 hour');
});
is($coord->safe_psql('postgres', "SELECT status FROM pklimit_check('$on_running', 100, '1 hour')"),
	'ok', "a call on $on_running (the other node) is answered while that backend is stopped");
ok($coord->poll_query_until('postgres', "SELECT pklimit_count('$on_stopped') = 2"),
	"the call on $on_stopped is counted, through another connection");
kill 'CONT', @stopped;
$waiting->quit;
is($coord->safe_psql('postgres', "SELECT pklimit_count('$on_stopped') || ',' || pklimit_count('$on_running')"),
	'2,2', 'once the stopped backend runs again, each key has its two calls, none twice');

# --- the owner's settings on the nodes do not reach pklimit's transactions
# there: read-only by default, and no commit flush
my $node_settings = q{
	SET default_transaction_read_only = off;
	SET citus.enable_ddl_propagation = off;
	ALTER ROLE CURRENT_USER IN DATABASE postgres SET default_transaction_read_only = %s;
	ALTER ROLE CURRENT_USER IN DATABASE postgres SET synchronous_commit = %s;
	SELECT count(pg_terminate_backend(pid)) >= 0 FROM pg_stat_activity
	 WHERE application_name LIKE 'citus_internal gpid=%%'};
$_->safe_psql('postgres', sprintf($node_settings, 'on', 'off')) for @workers;
is($coord->safe_psql('postgres', qq{
	SELECT string_agg(status, ',') FROM (SELECT (pklimit_check(k, 100, '1 hour')).status
	  FROM unnest(ARRAY['$on_stopped', '$on_running']) k) c}),
	'ok,ok', 'calls on both worker nodes are answered although the owner is read-only there by default');
like(slurp_file($workers[1]->logfile),
	qr/BEGIN TRANSACTION ISOLATION LEVEL READ COMMITTED;SET LOCAL lock_timeout = \d+;(?:SET LOCAL \w+ = 0;)+SET LOCAL synchronous_commit = on;SET LOCAL transaction_read_only = off;SELECT assign_distributed_transaction_id/,
	'the worker sends its commit mode and read-write with each transaction');
$_->safe_psql('postgres', sprintf($node_settings, 'off', 'on')) for @workers;

# --- tenants and row level security, as a role that is neither superuser nor BYPASSRLS
$coord->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	GRANT USAGE ON SCHEMA public TO app;});
for my $node ($coord, $workers[0])
{
	$node->safe_psql('postgres', q{
		SET ROLE app;
		BEGIN; SELECT set_config('platformkit.tenant', 'acme', true); SELECT pklimit_allow('shared', 5, '1 hour'); COMMIT;
		BEGIN; SELECT set_config('platformkit.tenant', 'beta', true); SELECT pklimit_allow('shared', 5, '1 hour'); COMMIT;
		BEGIN; SELECT set_config('platformkit.tenant', 'acme', true); SELECT pklimit_allow('shared', 5, '1 hour'); COMMIT;});
}
for my $tenant (['acme', 4], ['beta', 2])
{
	is($coord->safe_psql('postgres', qq{
		SET ROLE app; SET platformkit.tenant = '$tenant->[0]'; SELECT pklimit_count('shared')}),
		$tenant->[1], "tenant $tenant->[0] counts its own $tenant->[1] events, from both nodes");
}
($rc, $out, $err) = $workers[0]->psql('postgres', 'SET ROLE app; SELECT count(*) FROM platformkit_limits');
like($err, qr/permission denied for table platformkit_limits/, 'the table is not readable by the role on a worker node');

# --- the owner: only one that bypasses row level security on the nodes
$coord->safe_psql('postgres', q{
	CREATE ROLE limits_owner LOGIN;
	ALTER TABLE platformkit_limits OWNER TO limits_owner;});
($rc, $out, $err) = $coord->psql('postgres', "SELECT status FROM pklimit_check('owned', 5, '1 hour')");
is($out, 'error', 'an owner that is subject to row level security: the call is not counted from nothing');
like($err, qr/pklimit refuses to write Citus table "platformkit_limits" owned by role "limits_owner"/,
	'and the warning says why');
$coord->safe_psql('postgres', 'ALTER ROLE limits_owner BYPASSRLS');
is($coord->safe_psql('postgres', "SELECT count FROM pklimit_check('exact-1', 1000000, '1 hour')") > 1 ? 'counted on' : 'from nothing',
	'counted on', 'an owner with BYPASSRLS sees the rows on the nodes');
$coord->safe_psql('postgres', 'ALTER TABLE platformkit_limits OWNER TO CURRENT_USER');

# --- purge, by hand and by pg_cron, never a live row
my $expired = q{
	INSERT INTO platformkit_limits
	SELECT 'g:expired-' || i, now() - interval '3 days', now() - interval '2 days', 1, now() - interval '2 days'
	  FROM generate_series(1, 300) i};
$coord->safe_psql('postgres', $expired);
my $live = $coord->safe_psql('postgres', "SELECT count(*) FROM platformkit_limits WHERE key NOT LIKE 'g:expired-%'");
is($coord->safe_psql('postgres', 'SELECT pklimit_purge()'), '300', 'pklimit_purge deletes the 300 expired rows');
is($coord->safe_psql('postgres', 'SELECT count(*) FROM platformkit_limits'), $live, 'and no live row');
$coord->safe_psql('postgres', $expired);
$coord->safe_psql('postgres', "SELECT pklimit_schedule_purge('* * * * *')");
ok($coord->poll_query_until('postgres', q{
	SELECT count(*) > 0 FROM cron.job_run_details r JOIN cron.job j USING (jobid)
	 WHERE j.jobname = 'pklimit-purge' AND r.status = 'succeeded'}), 'pg_cron ran the purge job');
is($coord->safe_psql('postgres', 'SELECT count(*) FROM platformkit_limits'), $live,
	'it deleted the expired rows and no live row');

# --- the update of a distributed table from 0.1.0
citus_database('upd');
$coord->safe_psql('upd', q{
	CREATE EXTENSION pklimit VERSION '0.1.0';
	SELECT create_distributed_table('platformkit_limits', 'key');});
$coord->safe_psql('upd', "SELECT pklimit_allow('before', 5, '1 hour')");
$coord->safe_psql('upd', "ALTER EXTENSION pklimit UPDATE TO '0.2.0'");
is($coord->safe_psql('upd', q{
	SELECT string_agg(result, ',') FROM run_command_on_workers(
		$$SELECT extversion FROM pg_extension WHERE extname = 'pklimit'$$)}),
	'0.2.0,0.2.0', 'the update reaches the worker nodes');
is($coord->safe_psql('upd', q{
	SELECT count(DISTINCT result) || ' ' || min(result) FROM run_command_on_shards('platformkit_limits',
		$$SELECT (SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = '%1$s'::regclass AND attnum > 0)
			|| ' ' || (SELECT count(*) FROM pg_constraint WHERE conrelid = '%1$s'::regclass AND contype = 'c')$$)}),
	'1 key,window_start,window_end,count,updated_at,blocked_until 0',
	'every shard has the new column and none of the dropped CHECK constraints');
is($coord->safe_psql('upd', q{
	SELECT allowed || ' ' || count FROM pklimit_check('before', 1, '1 hour', block => '1 hour')}),
	'false 2', 'the updated table keeps its counts and takes 0.2.0 calls');
is($workers[1]->safe_psql('upd', "SELECT status || ' ' || allowed FROM pklimit_check('before', 100, '1 hour')"),
	'ok false', 'the block holds from a worker node');

# --- and on to 0.3.0: the new columns and purge index reach every shard;
# the rows of 0.2.0 are fixed windows, which calls of the new algorithms
# count in
$coord->safe_psql('upd', "SELECT pklimit_allow('kept', 5, '36500 days'), pklimit_allow('kept', 5, '36500 days')");
$coord->safe_psql('upd', "ALTER EXTENSION pklimit UPDATE TO '0.3.0'");
is($coord->safe_psql('upd', q{
	SELECT string_agg(result, ',') FROM run_command_on_workers(
		$$SELECT extversion FROM pg_extension WHERE extname = 'pklimit'$$)}),
	'0.3.0,0.3.0', 'the update to 0.3.0 reaches the worker nodes');
is($coord->safe_psql('upd', q{
	SELECT count(DISTINCT result) || ' ' || min(result) FROM run_command_on_shards('platformkit_limits',
		$$SELECT (SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = '%1$s'::regclass AND attnum > 0 AND NOT attisdropped)
			|| ' ' || (SELECT count(*) FROM pg_index WHERE indrelid = '%1$s'::regclass
				AND pg_get_indexdef(indexrelid) LIKE '%%(GREATEST(window_end, blocked_until, expires_at))%%')$$)}),
	'1 key,window_start,window_end,count,updated_at,blocked_until,algorithm,max_count,previous_count,expires_at 1',
	'every shard has the columns and the purge index of 0.3.0');
is($coord->safe_psql('upd', q{SELECT string_agg(key || ':' || algorithm || ':' || (max_count IS NULL), ' ' ORDER BY key)
	FROM platformkit_limits}), 'g:before:fixed:true g:kept:fixed:true',
	'the rows of 0.2.0 are fixed windows');
is($workers[0]->safe_psql('upd', q{
	SELECT string_agg(concat_ws(':', a, allowed, count), ' ' ORDER BY i)
	  FROM unnest(ARRAY['gcra', 'sliding', 'fixed']) WITH ORDINALITY v(a, i),
		   LATERAL pklimit_check('kept', 5, '36500 days', algorithm => a)}),
	'gcra:t:3 sliding:t:4 fixed:t:5', 'calls of every algorithm count in the fixed window of 0.2.0, from a worker node');
is($coord->safe_psql('upd', "SELECT allowed FROM pklimit_check('before', 100, '1 hour', algorithm => 'gcra')"),
	'f', 'the block of 0.2.0 holds for GCRA');
is($coord->safe_psql('upd', q{SELECT concat_ws(':', pklimit_allow('new', 1, '36500 days', algorithm => 'gcra'),
	pklimit_allow('new', 1, '36500 days', algorithm => 'sliding'))}), 't:f',
	'a new GCRA key, full after one call, refuses the next');

# --- and on to the version of this build: it reaches the worker nodes, and
# the rows keep their counts
$coord->safe_psql('upd', 'ALTER EXTENSION pklimit UPDATE');
is($coord->safe_psql('upd', q{
	SELECT string_agg(result, ',') FROM run_command_on_workers(
		$$SELECT extversion FROM pg_extension WHERE extname = 'pklimit'$$)}),
	"$version,$version", "the update to $version reaches the worker nodes");
is($workers[1]->safe_psql('upd', q{SELECT concat_ws(':', count, allowed)
	FROM pklimit_check('kept', 10, '36500 days')}),
	'6:t', 'the counts are kept, and calls of this version count on, from a worker node');

# --- a reference table: one copy of every row on every node
citus_database('ref');
$coord->safe_psql('ref', q{
	CREATE EXTENSION pklimit;
	SELECT create_reference_table('platformkit_limits');});
for my $node (@nodes)
{
	$node->safe_psql('ref', "SELECT pklimit_allow('r-' || i, 100, '1 hour') FROM generate_series(1, 5) i");
}
is($coord->safe_psql('ref', q{
	SELECT string_agg(result, ',') FROM run_command_on_placements('platformkit_limits',
		$$SELECT sum(count) FROM %s$$)}),
	'15,15,15', 'a reference table: 15 calls from three nodes, in every copy');
$coord->safe_psql('ref', $expired);
is($coord->safe_psql('ref', 'SELECT pklimit_purge()'), '300', 'its purge deletes the expired rows');
is($coord->safe_psql('ref', q{
	SELECT string_agg(result, ',') FROM run_command_on_placements('platformkit_limits',
		$$SELECT count(*) FROM %s$$)}),
	'5,5,5', 'from every copy, and no live row');

# --- dropping the extension: the table first, so Citus drops its shards
$coord->safe_psql('upd', q{
	ALTER EXTENSION pklimit DROP TABLE platformkit_limits;
	DROP TABLE platformkit_limits;
	DROP EXTENSION pklimit;});
is($coord->safe_psql('upd', q{
	SELECT string_agg(result, ',') FROM run_command_on_workers(
		$$SELECT count(*) FROM pg_class WHERE relname LIKE 'platformkit_limits%'
		   OR oid IN (SELECT objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid WHERE e.extname = 'pklimit')$$)}),
	'0,0', 'docs/citus.md\'s way to drop pklimit leaves no table, shard or object on the worker nodes');

# --- every node holds shards, as docs/citus.md sets it up, and each call
# made on the node that holds its key runs there alone.  Database routed,
# created at 0.3.0 and updated, so the update is seen to keep the layout.
citus_database('routed');
$pgbench_db = 'routed';
$coord->safe_psql('routed', sprintf(q{
	SELECT citus_set_node_property('%s', %d, 'shouldhaveshards', true);
	CREATE EXTENSION pklimit VERSION '0.3.0';
	SELECT create_distributed_table('platformkit_limits', 'key');}, $coord->host, $coord->port));
my $layout = q{
	SELECT count(DISTINCT nodeport) || ' ' || string_agg(shardid || '@' || nodeport, ',' ORDER BY shardid)
	  FROM pg_dist_shard_placement p JOIN pg_dist_shard s USING (shardid)
	 WHERE s.logicalrelid = 'platformkit_limits'::regclass};
my $before_update = $coord->safe_psql('routed', $layout);
like($before_update, qr/^3 /, 'every node holds shards');
$coord->safe_psql('routed', 'ALTER EXTENSION pklimit UPDATE');
is($coord->safe_psql('routed', $layout), $before_update, 'the update keeps every shard where it was');

# pklimit_node() names the node and shard Citus places the stored key in,
# with and without a tenant, for readable and digested keys
for my $tenant ('', 'acme')
{
	is($workers[0]->safe_psql('routed', qq{
		SET platformkit.tenant = '$tenant';
		SELECT count(*) FILTER (WHERE n.shard_id = get_shard_id_for_distribution_column('platformkit_limits', pklimit_stored_key(k))
			AND n.node_port = (SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = n.shard_id)),
			count(DISTINCT n.node_port)
		  FROM (SELECT CASE WHEN i % 10 = 0 THEN repeat('long', 100) || i ELSE 'route-' || i END AS k
				  FROM generate_series(1, 300) i) keys, LATERAL pklimit_node(k) n}),
		'300|3', "pklimit_node agrees with Citus for 300 keys" . ($tenant ? " of tenant $tenant" : ''));
}
is($coord->safe_psql('routed', "SELECT (pklimit_node('x')).node_port IS NULL"), 'f', 'pklimit_node names a node on Citus');
my %routed_node = map { ($_->port => $_) } @nodes;
# a key held by each node
sub key_held_by
{
	my ($node, $prefix) = @_;
	for my $i (1 .. 200)
	{
		return "$prefix-$i" if $node->safe_psql('routed', "SELECT (pklimit_node('$prefix-$i')).node_port") == $node->port;
	}
	die "no key of $prefix on " . $node->name;
}

# a call on its key's node writes that node alone: with the two other nodes
# stopped, it is still answered by the store and counted exactly; a call on
# a key held by a stopped node is not
my $own = key_held_by($workers[0], 'own');
my $elsewhere = key_held_by($workers[1], 'elsewhere');
$workers[0]->safe_psql('routed', "SELECT pklimit_allow('$own', 100, '1 hour')");
my $prepared = $workers[0]->safe_psql('routed', 'SELECT count(*) FROM pg_dist_transaction');
$_->stop('fast') for ($coord, $workers[1]);
is($workers[0]->safe_psql('routed', join('', map { qq{
	SELECT concat_ws(':', allowed, count, status) FROM pklimit_check('$own', 100, '1 hour');} } 1 .. 3)),
	"t:2:ok\nt:3:ok\nt:4:ok", "calls on $own on its own node, the other nodes stopped: answered by the store, counted");
is($workers[0]->safe_psql('routed', qq{
	SET pklimit.timeout = '300ms';
	SELECT status <> 'ok' FROM pklimit_check('$elsewhere', 100, '1 hour')}),
	't', "a call on $elsewhere, whose node is stopped, is not answered by the store");
$_->start for ($coord, $workers[1]);
ok($workers[0]->poll_query_until('routed', "SELECT status = 'ok' FROM pklimit_check('$elsewhere', 100, '1 hour')"),
	'once they run again, calls on their keys are answered again');
is($workers[0]->safe_psql('routed', 'SELECT count(*) FROM pg_dist_transaction'), $prepared,
	'no two-phase commit for calls on the node\'s own keys');
is($coord->safe_psql('routed', "SELECT pklimit_count('$own')"), '4', "the count of $own, read from the coordinator");

# tenants: the tenant's stored key names the node; a call there counts in the
# tenant's row, on that node, as a role that is neither superuser nor BYPASSRLS
$coord->safe_psql('routed', q{
	CREATE ROLE app_routed LOGIN;
	GRANT USAGE ON SCHEMA public TO app_routed;});
my $tenant_port = $coord->safe_psql('routed', q{
	SET ROLE app_routed; SET platformkit.tenant = 'acme'; SELECT (pklimit_node('plan')).node_port});
my $tenant_node = $routed_node{$tenant_port};
is($tenant_node->safe_psql('routed', q{
	SET ROLE app_routed; SET platformkit.tenant = 'acme';
	SELECT pklimit_allow('plan', 5, '1 hour'), pklimit_allow('plan', 5, '1 hour');
	RESET platformkit.tenant;
	SELECT pklimit_count('plan')}), "t|t\n0", 'routed calls of tenant acme count in its row, not the default one');
is($coord->safe_psql('routed', q{
	SELECT nodeport FROM pg_dist_shard_placement
	 WHERE shardid = get_shard_id_for_distribution_column('platformkit_limits', 't4:acme:plan')}),
	$tenant_port, 'and that row lives on the node pklimit_node named');

# a routed call in a transaction block the caller rolls back is kept, once
my $rolled = key_held_by($workers[1], 'rolled');
$workers[1]->safe_psql('routed', "BEGIN; SELECT pklimit_allow('$rolled', 5, '1 hour'); ROLLBACK;");
is($workers[1]->safe_psql('routed', "SELECT pklimit_count('$rolled')"), '1',
	'a routed call in a rolled-back transaction block is kept, once');

# several keys on several nodes: still all or none
my $here = key_held_by($workers[0], 'both-here');
my $there = key_held_by($workers[1], 'both-there');
my $both = qq{SELECT string_agg(concat_ws(':', allowed, count), ' ')
	FROM pklimit_check_all(ARRAY['$here', '$there'], ARRAY[2, 1], ARRAY['1 hour', '1 hour']::interval[],
		record_refused => false)};
is($workers[0]->safe_psql('routed', $both), 't:1 t:1', 'two keys on two nodes, from one of them');
is($workers[0]->safe_psql('routed', $both), 't:1 f:1', 'refused by one (record_refused => false)');
is($workers[0]->safe_psql('routed', "SELECT pklimit_count('$here') || ',' || pklimit_count('$there')"), '1,1',
	'each key holds only the call allowed on both');

# a shard moved while calls run on its keys from the node that held it, and
# moved back: every call is answered, none lost or counted twice (with
# writes blocked: logical replication refuses a table with row level
# security, docs/citus.md)
my $shard = $workers[0]->safe_psql('routed', "SELECT (pklimit_node('$own')).shard_id");
$workers[0]->safe_psql('routed', qq{
	CREATE TABLE move_keys AS
	SELECT row_number() OVER () AS id, k AS key FROM (
		SELECT 'move-' || i AS k FROM generate_series(1, 3000) i) c
	 WHERE (pklimit_node(k)).shard_id = $shard LIMIT 20;
	SELECT pklimit_stats_reset()});
is($workers[0]->safe_psql('routed', 'SELECT count(*) FROM move_keys'), '20', "20 keys in shard $shard");
for my $move (['there', $workers[0], $workers[1]], ['back', $workers[1], $workers[0]])
{
	my ($mode, $from, $to) = @$move;
	my $load = start_pgbench($workers[0], "move_$mode", q{
SET pklimit.timeout = '60s';
\set i random(1, 20)
SELECT pklimit_allow(key, 1000000, '1 hour') FROM move_keys WHERE id = :i;
}, '-c', '4', '-j', '2', '-t', '300');
	ok($workers[0]->poll_query_until('routed', 'SELECT allowed > 0 FROM pklimit_stats WHERE datname = current_database()'),
		"$mode: calls are running");
	$coord->safe_psql('routed', sprintf(q{
		SELECT citus_move_shard_placement(%d, '%s', %d, '%s', %d, shard_transfer_mode => 'block_writes')},
		$shard, $from->host, $from->port, $to->host, $to->port));
	($rc, $out, $err) = $load->();
	is($rc, 0, "$mode: pgbench ran") or diag($err);
	is($coord->safe_psql('routed', "SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shard"),
		$to->port, "$mode: the shard moved to " . $to->name);
	$workers[0]->safe_psql('routed', 'SELECT pklimit_stats_reset()');
}
is($workers[0]->safe_psql('routed', q{
	SELECT sum(l.count) FROM move_keys m JOIN platformkit_limits l ON l.key = 'g:' || m.key}),
	'2400', 'two moves under 2,400 calls: every call counted once');
is($coord->safe_psql('routed', "SELECT pklimit_count('$own')"), '4', "$own, in the moved shard, keeps its count");

# --- the memory path on Citus: a key is decided in memory only on the node
# that holds it, and flushed to its shard there
my $mem = key_held_by($workers[0], 'mem');
my $mem_elsewhere = key_held_by($workers[1], 'mem-elsewhere');
$workers[0]->safe_psql('routed', 'SELECT pklimit_stats_reset()');
is($workers[0]->safe_psql('routed', qq{
	SELECT count(*) FILTER (WHERE pklimit_allow('$mem', 1000, '1 hour', durable => false))
	  FROM generate_series(1, 10)}), '10', "10 memory calls on $mem, on its node");
is($workers[0]->safe_psql('routed', q{
	SELECT memory_calls >= 9 FROM pklimit_stats WHERE datname = current_database()}), 't',
	'decided in memory there (the first read the key in)');
ok($coord->poll_query_until('routed', "SELECT pklimit_count('$mem') = 10"),
	'flushed to its shard: the coordinator reads the 10 events');
is($workers[0]->safe_psql('routed', qq{
	SELECT count(*) FILTER (WHERE pklimit_allow('$mem_elsewhere', 1000, '1 hour', durable => false))
	  FROM generate_series(1, 5)}), '5', "5 memory calls on $mem_elsewhere, held by another node");
is($workers[1]->safe_psql('routed', "SELECT pklimit_count('$mem_elsewhere')"), '5',
	'applied durably on its node at once: a key is never in memory on a node that does not hold it');

# a call made on another node writes the row of a key in memory: the node
# holding it drops its unflushed events rather than overwrite that call's
$workers[1]->safe_psql('routed', "SELECT pklimit_allow('$mem', 1000, '1 hour')");
$workers[0]->safe_psql('routed', qq{SELECT pklimit_allow('$mem', 1000, '1 hour', durable => false) FROM generate_series(1, 5)});
ok($workers[0]->poll_query_until('routed', q{
	SELECT flushes > 0 AND memory_keys = 0 FROM pklimit_stats WHERE datname = current_database()}),
	'the flush dropped the key');
is($coord->safe_psql('routed', "SELECT pklimit_count('$mem')"), '11',
	"the other node's event is kept: 10 + 1, the 5 decided in memory since dropped");
like(slurp_file($workers[0]->logfile), qr/pklimit dropped 1 key from memory unwritten/, 'and the drop is logged');

# the crash bound on a worker node: events flushed before a crash are kept,
# and none is counted twice
my $crash = key_held_by($workers[0], 'mem-crash');
$workers[0]->safe_psql('routed', qq{SELECT pklimit_allow('$crash', 1000, '1 hour', durable => false) FROM generate_series(1, 20)});
ok($coord->poll_query_until('routed', "SELECT pklimit_count('$crash') = 20"), '20 memory calls flushed');
$workers[0]->safe_psql('routed', qq{SELECT pklimit_allow('$crash', 1000, '1 hour', durable => false) FROM generate_series(1, 20)});
$workers[0]->stop('immediate');
$workers[0]->start;
ok($coord->poll_query_until('routed', "SELECT pklimit_count('$crash') IS NOT NULL"), 'the node runs again');
my $crashed = $coord->safe_psql('routed', "SELECT pklimit_count('$crash')");
ok($crashed >= 20 && $crashed <= 40, "after a crash of the worker node: $crashed of 40, at least the 20 flushed");

# a shard moved while its keys are in memory on the node that held it:
# events flushed before the move are kept, none is counted twice, and the
# calls made after it count on the node that holds them now
my $mshard = $workers[0]->safe_psql('routed', "SELECT (pklimit_node('$crash')).shard_id");
$workers[0]->safe_psql('routed', qq{
	CREATE TABLE mem_keys AS
	SELECT row_number() OVER () AS id, k AS key FROM (
		SELECT 'mem-move-' || i AS k FROM generate_series(1, 3000) i) c
	 WHERE (pklimit_node(k)).shard_id = $mshard LIMIT 20;});
my $mem_script = q{
SET pklimit.timeout = '60s';
\set i random(1, 20)
SELECT pklimit_allow(key, 1000000, '1 hour', durable => false) FROM mem_keys WHERE id = :i;
};
($rc, $out, $err) = start_pgbench($workers[0], 'mem_before', $mem_script, '-c', '4', '-j', '2', '-t', '100')->();
is($rc, 0, 'memory calls on 20 keys of one shard ran') or diag($err);
my $sum = q{(SELECT coalesce(sum(l.count), 0) FROM mem_keys m JOIN platformkit_limits l ON l.key = 'g:' || m.key)};
ok($workers[0]->poll_query_until('routed', "SELECT $sum = 400"), 'their 400 events flushed');
my $mem_load = start_pgbench($workers[0], 'mem_move', $mem_script, '-c', '4', '-j', '2', '-t', '300');
ok($workers[0]->poll_query_until('routed', "SELECT $sum > 400"), 'memory calls running');
$coord->safe_psql('routed', sprintf(q{
	SELECT citus_move_shard_placement(%d, '%s', %d, '%s', %d, shard_transfer_mode => 'block_writes')},
	$mshard, $workers[0]->host, $workers[0]->port, $workers[1]->host, $workers[1]->port));
($rc, $out, $err) = $mem_load->();
is($rc, 0, 'the memory calls during the move ran') or diag($err);
ok($workers[0]->poll_query_until('routed', q{
	SELECT memory_keys = 0 FROM pklimit_stats WHERE datname = current_database()}),
	'the keys of the moved shard left memory');
my $moved = $workers[0]->safe_psql('routed', "SELECT $sum");
ok($moved >= 400 && $moved <= 1600, "after the move: $moved of 1,600 events, at least the 400 flushed before");
$workers[0]->safe_psql('routed', q{
	SELECT pklimit_allow(key, 1000000, '1 hour', durable => false) FROM mem_keys});
is($workers[0]->safe_psql('routed', "SELECT $sum"), $moved + 20, 'calls after the move count on the node that holds the shard now');

# --- policies on Citus (docs/citus.md, "Policies"): the policy table a
# reference table, every node's calls decided by the rows it holds, and a
# change made on any node seen by the next call of a session on every node
# (the shard's trigger announces it there), a direct UPDATE included; the
# view as on one server, as a role that is neither superuser nor BYPASSRLS
citus_database('pol');
$coord->safe_psql('pol', q{
	CREATE EXTENSION pklimit;
	SELECT create_distributed_table('platformkit_limits', 'key');
	SET citus.enable_unsafe_triggers = on;
	SELECT create_reference_table('platformkit_limit_policies');
	RESET citus.enable_unsafe_triggers;
	SELECT pklimit_policy_set('api', 100, '36500 days');
	SELECT pklimit_policy_set('api', 3, '36500 days', tenant => 'acme');
	CREATE ROLE pol_app LOGIN;});
is($workers[1]->safe_psql('pol', q{
	SELECT string_agg(t.tgname, ',') FROM pg_trigger t
	 WHERE t.tgrelid = (SELECT logicalrelid FROM pg_dist_partition
						 WHERE logicalrelid = 'platformkit_limit_policies'::regclass)}),
	'platformkit_limit_policies_changed', 'the policy table is a reference table, its trigger kept');
my $pol_check = q{SELECT concat_ws('|', allowed, count, remaining) FROM pklimit_check('k', 'api')};
my @pol_apps = map { $_->background_psql('pol', on_error_stop => 0, extra_params => [ '-U', 'pol_app' ]) }
  $workers[0], $coord;
is($pol_apps[0]->query_safe($pol_check), 't|1|99', 'a worker node decides by the default row');
is($pol_apps[1]->query_safe($pol_check), 't|2|98', 'and so does the coordinator, on the same count');
$coord->safe_psql('pol', q{SELECT pklimit_policy_set('api', 3, '36500 days')});
is($pol_apps[0]->query_safe($pol_check), 't|3|0',
	'a change made on the coordinator: the next call of a worker node\'s session uses it');
is($pol_apps[0]->query_safe($pol_check), 'f|4|0', 'and refuses the call after');
$workers[1]->safe_psql('pol', q{UPDATE platformkit_limit_policies SET max_count = 10 WHERE tenant = ''});
is($pol_apps[1]->query_safe($pol_check), 't|5|5',
	'a direct UPDATE made on a worker node: the coordinator\'s session uses it');
is($pol_apps[0]->query_safe($pol_check), 't|6|4', 'and so does the other node\'s');
$pol_apps[0]->query_safe(q{SET platformkit.tenant = 'acme'});
is($pol_apps[0]->query_safe($pol_check), 't|1|2', "a tenant's override, on a worker node");
is($pol_apps[0]->query_safe(q{SELECT string_agg(coalesce(tenant, '-') || ':' || max_count, ',' ORDER BY tenant NULLS FIRST)
	FROM pklimit_policies}), '-:10,acme:3', 'the view on a worker node: the default row and the tenant\'s');
$workers[0]->safe_psql('pol', q{SELECT pklimit_policy_drop('api', 'acme')});
is($pol_apps[0]->query_safe($pol_check), 't|2|8',
	'an override dropped: the next call of the tenant uses the default row, on the tenant\'s count');
$coord->safe_psql('pol', q{SELECT pklimit_policy_drop('api')});
my ($pol_out) = $pol_apps[1]->query($pol_check);
like($pol_apps[1]->{stderr}, qr/policy "api" does not exist/, 'a dropped policy: the next call is an error')
  or diag($pol_out);
$_->quit for @pol_apps;

# --- leases on Citus (docs/leases.md): platformkit_leases distributed by key
# with platformkit_limits, so a key's leases live on its key's node; acquires
# made on every node at once never give more than max_concurrent, and a
# lease taken on one node is seen, renewed and released on another
my ($lease_rc, $lease_out, $lease_err) = $workers[0]->psql('pol', q{SELECT pklimit_acquire('early', 2, '1 hour')});
like($lease_err, qr/"platformkit_leases" is not distributed like "platformkit_limits"/,
	'a lease before platformkit_leases is distributed: an error, not leases per node');
$coord->safe_psql('pol', q{
	SELECT create_distributed_table('platformkit_leases', 'key', colocate_with => 'platformkit_limits')});
is($coord->safe_psql('pol', q{
	SELECT count(DISTINCT colocationid) FROM pg_dist_partition
	 WHERE logicalrelid IN ('platformkit_limits'::regclass, 'platformkit_leases'::regclass)}),
	'1', 'the leases are colocated with the counts');
$workers[0]->safe_psql('pol', q{
	SELECT pklimit_acquire('lease-' || i, 2, '1 hour') FROM generate_series(1, 12) i});
is($coord->safe_psql('pol', q{
	SELECT count(*) || ' ' || count(*) FILTER (WHERE n.nodeport = (pklimit_node(substr(l.key, 3))).node_port)
	  FROM platformkit_leases l
	  JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('platformkit_leases', l.key)
	  JOIN pg_dist_node n ON n.groupid = p.groupid
	 WHERE l.key LIKE 'g:lease-%'}), '12 12', "each key's leases on the node that holds its key");
$_->safe_psql('pol', 'CREATE TABLE granted (token uuid)') for @nodes;
$pgbench_db = 'pol';
my @lease_runs = map { start_pgbench($_, 'acquire', q{
INSERT INTO granted SELECT t FROM pklimit_acquire('hot', 3, '1 hour') t WHERE t IS NOT NULL;
}, '-c', '3', '-t', '40') } @nodes;
for my $run (@lease_runs)
{
	my ($lrc, undef, $lerr) = $run->();
	is($lrc, 0, 'pgbench acquiring on a node ran') or diag($lerr);
}
is(sum(map { $_->safe_psql('pol', 'SELECT count(*) FROM granted') } @nodes), 3,
	'360 acquires from three nodes at once: exactly max_concurrent (3) granted');
is($workers[1]->safe_psql('pol', q{SELECT count(*) FROM pklimit_leases('hot')}), '3',
	'and held, as any node sees them');
is($workers[0]->safe_psql('pol', q{SELECT count(*) FROM pklimit_leases('hot')},
		extra_params => [ '-U', 'pol_app' ]),
	'3', 'also to a role that is neither superuser nor BYPASSRLS');
is($workers[0]->safe_psql('pol', q{SET platformkit.tenant = 'acme'; SELECT count(*) FROM pklimit_leases('hot')},
		extra_params => [ '-U', 'pol_app' ]),
	'0', "but not to another tenant's session");
my $token = $workers[0]->safe_psql('pol', q{SELECT pklimit_acquire('moving', 1, '1 hour')});
is($coord->safe_psql('pol', qq{SELECT string_agg(token::text, ',') FROM pklimit_leases('moving')}),
	$token, 'a lease taken on a worker node shows on the coordinator');
is($workers[1]->safe_psql('pol', qq{SELECT pklimit_renew('moving', '$token', '2 hours')}), 't',
	'is renewed on the other worker node');
is($coord->safe_psql('pol', qq{SELECT pklimit_release('moving', '$token')}), 't',
	'and released on the coordinator');
is($workers[0]->safe_psql('pol', qq{SELECT pklimit_release('moving', '$token')}), 'f',
	'once');

done_testing();
