# A limit imposed on a role: docs/security.md's SECURITY DEFINER wrapper, run as
# written, pins every setting a role may set that pklimit reads, and takes
# the tenant from a table the caller cannot write.  A caller that sets each
# of them against the limit, a new tenant for every call included, still
# redeems 3 codes of 5 in the hour.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

# the block docs/security.md says this test runs (test/t/061_docs_sql.pl
# checks that this file reads it)
my $marker = '<!-- tested: test/t/033_imposed_limit.pl -->';
my $page = slurp_file("$FindBin::RealBin/../../docs/security.md");
my ($block) = $page =~ m{\Q$marker\E\n```sql\n(.*?)```}s;
ok(defined $block, "docs/security.md's wrapper is found");
$block //= '';

my $node = PostgreSQL::Test::Cluster->new('imposed_limit');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pklimit'\n");
$node->start;
# the recommended installation: pklimit in a schema of its own
$node->safe_psql('postgres', q{
	CREATE ROLE redeemer LOGIN NOSUPERUSER NOBYPASSRLS;
	CREATE SCHEMA pklimit;
	REVOKE CREATE ON SCHEMA pklimit FROM PUBLIC;
	CREATE EXTENSION pklimit SCHEMA pklimit;
});
is($node->safe_psql('postgres', $block), 'f', 'the block runs, and the role does not reach pklimit itself');
$node->safe_psql('postgres', "INSERT INTO billing.role_tenants VALUES ('redeemer', 'acme')");

# every pklimit setting a role may set is pinned on the wrapper, and so are
# the tenant and search_path
my $settable = $node->safe_psql('postgres',
	"SET ROLE redeemer; SELECT string_agg(name, ',' ORDER BY name) FROM pg_settings"
	  . " WHERE name LIKE 'pklimit.%' AND context = 'user'");
is($settable, 'pklimit.default_max,pklimit.default_window,pklimit.on_unavailable,pklimit.shadow_mode,pklimit.timeout',
	'the pklimit settings any role may set');
my $pinned = $node->safe_psql('postgres',
	"SELECT string_agg(split_part(c, '=', 1), ',' ORDER BY 1) FROM pg_proc p, unnest(p.proconfig) c"
	  . " WHERE p.oid = 'billing.redeem_code(text)'::regprocedure");
for my $name (split(/,/, $settable), 'platformkit.tenant', 'search_path')
{
	ok(grep({ $_ eq $name } split(/,/, $pinned)), "the wrapper pins $name");
}

# the caller sets each of them to let more through: no limit is reached in
# 1 ms, unreachable is allowed, refusals are allowed, and a function of its
# own comes first on its search_path
$node->safe_psql('postgres', 'CREATE SCHEMA mine AUTHORIZATION redeemer');
my $hostile = q{
	SET pklimit.timeout = '1ms';
	SET pklimit.on_unavailable = allow;
	SET pklimit.shadow_mode = on;
	SET pklimit.default_max = 1000000;
	SET pklimit.default_window = '1s';
	CREATE FUNCTION mine.pklimit_allow(text, bigint, interval) RETURNS boolean
		LANGUAGE sql AS 'SELECT true';
	SET search_path = mine, pklimit, public;
};
my ($ret, $out, $err) = $node->psql('postgres', $hostile
	  . "SELECT string_agg(billing.redeem_code('c' || g)::text, ',' ORDER BY g)"
	  . " FROM (SELECT g, set_config('platformkit.tenant', 'x' || g, false) FROM generate_series(1, 5) g) s",
	extra_params => [ '-U', 'redeemer' ]);
is($ret, 0, 'the calls run') or diag($err);
is($out, 'true,true,true,false,false', 'a new tenant for each call and every setting against the limit: 3 of 5 redeemed');
is($node->safe_psql('postgres', 'SELECT count(*) FROM billing.redemptions'), '3', 'and 3 redemptions made');
is($node->safe_psql('postgres',
	"SELECT string_agg(key || '=' || count, ',') FROM pklimit.platformkit_limits"),
	't4:acme:redeem:redeemer=5', "one count, in the role's own tenant");

# nor can it reach pklimit's own functions, to forget its count or open a
# window of a second on its key
for my $sql ("SET platformkit.tenant = 'acme'; SELECT pklimit.pklimit_forget('redeem:redeemer')",
	"SET platformkit.tenant = 'acme'; SELECT pklimit.pklimit_allow('redeem:redeemer', 1000000, '1 second')")
{
	($ret, $out, $err) = $node->psql('postgres', $sql, extra_params => [ '-U', 'redeemer' ]);
	like($err, qr/permission denied for schema pklimit/, "the role may not: $sql");
}
($ret, $out, $err) = $node->psql('postgres', "SELECT billing.redeem_code('c6')", extra_params => [ '-U', 'redeemer' ]);
is($out, 'f', 'and its next redemption is still refused');

# a role without a tenant is refused, not counted in the global namespace
$node->safe_psql('postgres', 'CREATE ROLE stranger LOGIN; GRANT USAGE ON SCHEMA billing TO stranger;'
	  . ' GRANT EXECUTE ON FUNCTION billing.redeem_code(text) TO stranger');
($ret, $out, $err) = $node->psql('postgres', "SELECT billing.redeem_code('c')", extra_params => [ '-U', 'stranger' ]);
like($err, qr/role stranger has no tenant/, 'a role with no tenant gets an error');
$node->stop;
done_testing();
