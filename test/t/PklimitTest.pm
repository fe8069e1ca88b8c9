# PklimitTest: helpers shared by pklimit's TAP tests.
package PklimitTest;

use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use Test::More;
use Time::HiRes qw(time);
use Exporter 'import';
use File::Basename qw(dirname);
use Cwd qw(abs_path);
use IPC::Run;
use PostgreSQL::Test::Utils;

# Running prove by hand outside "make installcheck": find pg_regress, which
# Cluster->init needs, in the PGXS tree.
if (!defined $ENV{PG_REGRESS})
{
	my $pgxs = `pg_config --pgxs`;
	chomp $pgxs;
	$ENV{PG_REGRESS} = dirname($pgxs) . '/../test/regress/pg_regress';
}

our @EXPORT = qw(pklimit_node pklimit_cron_node worker_pid timed_psql pg_major extension_catalog
  update_under_load pklimit_pgbench need start_pgbouncer stop_pgbouncer);

# The major version of the PostgreSQL under test (pg_config on the PATH).
sub pg_major
{
	my $version = `pg_config --version`;
	die "pg_config --version failed" unless $version =~ /PostgreSQL (\d+)/;
	return $1;
}

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

# A started node with pklimit and pg_cron preloaded, pg_cron's jobs kept in
# database postgres, where the pg_cron extension is created (pklimit is not);
# $conf is added to postgresql.conf.
sub pklimit_cron_node
{
	my ($name, $conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'pklimit,pg_cron'\ncron.database_name = 'postgres'\n"
		  . ($conf // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION pg_cron');
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

# $clients pgbench clients (4 threads) each run $per_client transactions of
# the scripts of %$scripts (file name => SQL, chosen at random by pgbench,
# seeded with $seed) on database postgres, without vacuum: pgbench exits 0,
# processes every transaction and writes nothing on stderr but its seed.
# The checks are named $name.
sub pklimit_pgbench
{
	my ($node, $name, $clients, $per_client, $seed, $scripts) = @_;
	my $total = $clients * $per_client;
	$node->pgbench(
		"--no-vacuum --client=$clients --jobs=4 --transactions=$per_client"
		  . " --random-seed=$seed",
		0,
		[qr{processed: $total/$total}],
		[qr{\A(?:pgbench: setting random seed to \d+\n)?\z}],
		$name,
		$scripts);
	return;
}

# ALTER EXTENSION pklimit UPDATE TO $to in database $db while two sessions
# make $per_session calls each on the key 'during' (max 1,000,000, 36500
# days: every call allowed), with $call_options added to each; it must
# commit while they still call.  Returns the count of 'during' when the
# update committed and after every call returned.
sub update_under_load
{
	my ($node, $db, $to, $per_session, $call_options) = @_;
	my @callers;
	my $options = defined $call_options ? ", $call_options" : '';
	for my $s (1, 2)
	{
		my $caller = $node->background_psql($db);
		$caller->query_until(qr/go/, "\\echo go\n"
			  . "DO \$\$ BEGIN FOR i IN 1 .. $per_session LOOP"
			  . " PERFORM pklimit_allow('during', 1000000, '36500 days'$options); END LOOP; END \$\$;\n"
			  . "\\echo done\n");
		push @callers, $caller;
	}
	$node->poll_query_until($db, "SELECT pklimit_count('during') > 0")
	  or die "the calls on $db did not start";
	$node->safe_psql($db, "ALTER EXTENSION pklimit UPDATE TO '$to'");
	my $at_update = $node->safe_psql($db, "SELECT pklimit_count('during')");
	$_->query_until(qr/done/, '') for @callers;
	$_->quit for @callers;
	return ($at_update, $node->safe_psql($db, "SELECT pklimit_count('during')"));
}

# Every pklimit object of database $db, one sorted line each, as an update
# must leave it identical to a fresh install: the extension's version and
# configuration tables; its member objects; functions with their full
# definition (signature, defaults, volatility, parallel safety, proconfig, C
# symbol), ACL and comment; the initial privileges pg_dump measures grants
# against; relations with row level security flags, ACL
# and comment; columns by name (type, collation, NOT NULL, default, ACL,
# comment); constraints, indexes, policies, triggers, rules and views.
sub extension_catalog
{
	my ($node, $db) = @_;
	return $node->safe_psql($db, <<'SQL');
SET search_path = pg_catalog;	-- every name schema-qualified
WITH ext AS (SELECT e.* FROM pg_extension e WHERE e.extname = 'pklimit'),
members AS (
	SELECT d.classid, d.objid FROM pg_depend d, ext
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid
	   AND d.deptype = 'e'),
rels AS (SELECT c.* FROM pg_class c JOIN members m
	ON m.classid = 'pg_class'::regclass AND m.objid = c.oid)
SELECT line FROM (
	SELECT format('extension %s %s schema=%s relocatable=%s config=%s condition=%s',
		extname, extversion, extnamespace::regnamespace, extrelocatable,
		extconfig::regclass[], extcondition) AS line FROM ext
	UNION ALL
	SELECT 'member ' || pg_describe_object(classid, objid, 0) FROM members
	UNION ALL
	SELECT format(E'function %s acl=%s comment=%s\n%s', p.oid::regprocedure,
		p.proacl, obj_description(p.oid, 'pg_proc'), pg_get_functiondef(p.oid))
	  FROM pg_proc p JOIN members m ON m.classid = 'pg_proc'::regclass AND m.objid = p.oid
	UNION ALL
	SELECT format('initial privileges %s %s', pg_describe_object(i.classoid, i.objoid, i.objsubid),
		i.initprivs)
	  FROM pg_init_privs i JOIN members m ON m.classid = i.classoid AND m.objid = i.objoid
	UNION ALL
	SELECT format('relation %s kind=%s persistence=%s rls=%s force=%s acl=%s comment=%s',
		c.oid::regclass, c.relkind, c.relpersistence, c.relrowsecurity,
		c.relforcerowsecurity, c.relacl, obj_description(c.oid, 'pg_class'))
	  FROM rels c
	UNION ALL
	SELECT format('column %s.%s %s collation=%s notnull=%s default=%s acl=%s comment=%s',
		a.attrelid::regclass, a.attname, format_type(a.atttypid, a.atttypmod),
		co.collname, a.attnotnull, pg_get_expr(ad.adbin, ad.adrelid), a.attacl,
		col_description(a.attrelid, a.attnum))
	  FROM rels c JOIN pg_attribute a ON a.attrelid = c.oid
	  LEFT JOIN pg_collation co ON co.oid = a.attcollation
	  LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
	 WHERE a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT format('constraint %s.%s %s', co.conrelid::regclass, co.conname,
		pg_get_constraintdef(co.oid))
	  FROM pg_constraint co JOIN rels c ON co.conrelid = c.oid
	UNION ALL
	SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	  FROM pg_index i JOIN rels c ON i.indrelid = c.oid
	UNION ALL
	SELECT format('policy %s.%s cmd=%s permissive=%s roles=%s using=%s check=%s',
		po.polrelid::regclass, po.polname, po.polcmd, po.polpermissive,
		po.polroles::regrole[], pg_get_expr(po.polqual, po.polrelid),
		pg_get_expr(po.polwithcheck, po.polrelid))
	  FROM pg_policy po JOIN rels c ON po.polrelid = c.oid
	UNION ALL
	SELECT 'trigger ' || pg_get_triggerdef(t.oid)
	  FROM pg_trigger t JOIN rels c ON t.tgrelid = c.oid
	UNION ALL
	SELECT format('rule %s.%s %s', r.ev_class::regclass, r.rulename, pg_get_ruledef(r.oid))
	  FROM pg_rewrite r JOIN rels c ON r.ev_class = c.oid
	 WHERE c.relkind <> 'v'
	UNION ALL
	SELECT format('view %s %s', c.oid::regclass, pg_get_viewdef(c.oid))
	  FROM rels c WHERE c.relkind = 'v'
) s ORDER BY line COLLATE "C";
SQL
}

# Does the command run?  A test line saying so ("$what is installed").
sub need
{
	my ($what, @cmd) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval { IPC::Run::run(\@cmd, '>', \$out, '2>', \$err) };
	ok($ok, "$what is installed (@cmd)") or diag($@ || $err);
	return $ok;
}

# pgbouncer ($binary) in transaction pooling mode in front of database $db
# of $node, with one server connection for every client (at most
# $max_clients), listening on a Unix socket in the node's socket directory,
# its files in the node's basedir; two test lines (it starts, it runs).
# Returns its port and pid; a pgbouncer still running when the test ends is
# stopped then.
my @pgbouncers;

sub start_pgbouncer
{
	my ($binary, $node, $db, $max_clients) = @_;
	my $base = abs_path($node->basedir);
	my ($host, $nport) = ($node->host, $node->port);
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $user = scalar getpwuid($<);
	PostgreSQL::Test::Utils::append_to_file("$base/userlist.txt", qq{"$user" ""\n});
	PostgreSQL::Test::Utils::append_to_file("$base/pgbouncer.ini", <<INI);
[databases]
$db = host=$host port=$nport dbname=$db

[pgbouncer]
listen_addr =
listen_port = $port
unix_socket_dir = $host
auth_type = trust
auth_file = $base/userlist.txt
pool_mode = transaction
default_pool_size = 1
min_pool_size = 0
max_client_conn = $max_clients
logfile = $base/pgbouncer.log
pidfile = $base/pgbouncer.pid
INI
	my ($out, $err) = ('', '');
	ok(IPC::Run::run([ $binary, '-d', "$base/pgbouncer.ini" ], '>', \$out, '2>', \$err),
		'pgbouncer starts') or diag("$out\n$err");
	for (1 .. 100)
	{
		last if -s "$base/pgbouncer.pid" && -S "$host/.s.PGSQL.$port";
		select(undef, undef, undef, 0.1);
	}
	my $pid = -s "$base/pgbouncer.pid" ? PostgreSQL::Test::Utils::slurp_file("$base/pgbouncer.pid") : undef;
	chomp $pid if $pid;
	push @pgbouncers, $pid if $pid;
	ok($pid, 'pgbouncer runs (pid ' . ($pid // 'none') . ')')
	  or diag(-f "$base/pgbouncer.log" ? PostgreSQL::Test::Utils::slurp_file("$base/pgbouncer.log") : '');
	return ($port, $pid);
}

# Stop the pgbouncer of pid $pid and wait for it to be gone; a test line.
sub stop_pgbouncer
{
	my ($pid) = @_;
	kill 'TERM', $pid if $pid;
	for (1 .. 100)
	{
		last unless $pid && kill 0, $pid;
		select(undef, undef, undef, 0.1);
	}
	ok($pid && !kill(0, $pid), 'pgbouncer stopped');
	@pgbouncers = grep { $_ ne ($pid // '') } @pgbouncers;
	return;
}

END
{
	kill 'TERM', $_ for @pgbouncers;
}

1;
