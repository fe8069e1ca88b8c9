# The release: pklimit.control, META.json, CHANGELOG.md, debian/changelog
# and the clients' packages agree on the version (and, once it is
# released, the changelogs on its date); META.json is valid by the PGXN Meta Spec (test/pgxn-meta-schema.json,
# python3-jsonschema); make dist writes pklimit-<version>.zip with META.json
# at its top, and refuses when META.json's version is not the control
# file's.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Cwd qw(abs_path);
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = abs_path("$FindBin::RealBin/../..");
my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
plan skip_all => 'needs git and python3-jsonschema'
  unless system('git --version >/dev/null 2>&1') == 0
  && system("$python -c 'import jsonschema' >/dev/null 2>&1") == 0;

# the version each file names
my ($control) = slurp_file("$root/pklimit.control") =~ /^default_version = '([^']+)'$/m;
my $meta = decode_json(slurp_file("$root/META.json"));
my ($changes_head) = slurp_file("$root/CHANGELOG.md") =~ /^## (.*)$/m;
my ($deb_version, $deb_dist, $deb_date) =
  slurp_file("$root/debian/changelog") =~ /\Apklimit \(([^)]+)\) ([^;]+);.*?^ -- [^\n]*?>  ([^\n]*)$/ms;
my ($changes_version, $changes_date) =
  $changes_head =~ /^(?:Unreleased \((\S+)\)|(\S+) \((\d{4}-\d\d-\d\d)\))$/ ? ($1 // $2, $3) : ('', undef);
(my $deb_upstream = $deb_version // '') =~ s/-[^-]+$//;

like($control, qr/^\d+\.\d+\.\d+$/, "pklimit.control's default_version is $control");
is($meta->{version}, $control, "META.json's version is the control file's");
is($meta->{provides}{pklimit}{version}, $control, "META.json's provides.pklimit.version is the control file's");
is($changes_version, $control, "CHANGELOG.md's first section ($changes_head) is the control file's version");
is($deb_upstream, $control, "debian/changelog's first entry ($deb_version) is the control file's version");

# released in both or neither, on one day
my %month = (Jan => 1, Feb => 2, Mar => 3, Apr => 4, May => 5, Jun => 6,
	Jul => 7, Aug => 8, Sep => 9, Oct => 10, Nov => 11, Dec => 12);
my $deb_day = ($deb_date // '') =~ /^\w{3}, (\d\d) (\w{3}) (\d{4}) /
  ? sprintf('%04d-%02d-%02d', $3, $month{$2}, $1) : '';
if (defined $changes_date)
{
	isnt($deb_dist, 'UNRELEASED', "$control is dated in CHANGELOG.md and released in debian/changelog ($deb_dist)");
	is($deb_day, $changes_date, "debian/changelog dates $control as CHANGELOG.md does");
}
else
{
	is($deb_dist, 'UNRELEASED', "$control is unreleased in CHANGELOG.md and in debian/changelog");
}

# the clients are released with the extension, at its version: the five
# places that write it
my $node_package = decode_json(slurp_file("$root/clients/node/package.json"));
my $node_lock = decode_json(slurp_file("$root/clients/node/package-lock.json"));
my ($py_project) = slurp_file("$root/clients/python/pyproject.toml") =~ /^version = "([^"]+)"$/m;
my ($py_module) = slurp_file("$root/clients/python/src/pklimit/__init__.py") =~ /^__version__ = "([^"]+)"$/m;
is($node_package->{version}, $control, "clients/node/package.json's version is the control file's");
is($node_lock->{version}, $control, "clients/node/package-lock.json's version is the control file's");
is($node_lock->{packages}{''}{version}, $control, "and so is its root package's");
is($py_project, $control, "clients/python/pyproject.toml's version is the control file's");
is($py_module, $control, "clients/python's pklimit.__version__ is the control file's");

# the README's commands name the files of this version: the Debian
# package, the PGXN zip, the Node package's tarball
my $readme = slurp_file("$root/README.md") . slurp_file("$root/clients/node/README.md");
my @named = $readme =~ /(pklimit_\d+\.\d+\.\d+_amd64\.deb|pklimit-\d+\.\d+\.\d+(?:\.zip|\/| )|rate-limit-pklimit-\d+\.\d+\.\d+\.tgz)/g;
ok(@named >= 3, 'the READMEs name the release files (' . scalar(@named) . ')');
is(join(' ', grep { !/[-_]\Q$control\E[._\/ ]/ } @named), '', "every one of version $control");

# the Makefile installs a script that installs or updates to the version
# (DATA_built while it is written, DATA once released)
my $makefile = slurp_file("$root/Makefile");
my @scripts = map { split /[\s\\]+/ } $makefile =~ /^DATA(?:_built)? = ((?:.*\\\n)*.*)$/mg;
ok(grep({ /^pklimit--(?:\S+--)?\Q$control\E\.sql$/ } @scripts),
	"the Makefile installs a script to $control");

# META.json by the PGXN Meta Spec, and the schema refuses what the spec does
sub schema_errors
{
	my $json = shift;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $python, '-c', q{
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
errors = jsonschema.Draft202012Validator(schema).iter_errors(json.load(sys.stdin))
for e in errors: print("/".join(map(str, e.absolute_path)) + ": " + e.message)
}, "$root/test/pgxn-meta-schema.json" ], '<', \$json, '>', \$out, '2>', \$err)
	  or die "jsonschema failed: $err";
	return $out;
}
is(schema_errors(slurp_file("$root/META.json")), '', 'META.json is valid by the PGXN Meta Spec');
my %broken = (
	'a version that is not semver' => sub { $_[0]{version} = '0.3' },
	'no provides' => sub { delete $_[0]{provides} },
	'a key without x_' => sub { $_[0]{homepage} = 'https://example.org/' },
	'a tag with a slash' => sub { push @{ $_[0]{tags} }, 'rate/limit' },
	'a prereq that is no version range' => sub { $_[0]{prereqs}{runtime}{requires}{PostgreSQL} = '15' },
	'an unknown license' => sub { $_[0]{license} = 'postgres' },
	'an unknown release_status' => sub { $_[0]{release_status} = 'final' });
for my $what (sort keys %broken)
{
	my $copy = decode_json(encode_json($meta));
	$broken{$what}->($copy);
	isnt(schema_errors(encode_json($copy)), '', "the schema refuses $what");
}

# what the spec cannot say: the files named exist, the prerequisites
for my $key ('file', 'docfile')
{
	my $path = $meta->{provides}{pklimit}{$key} // '';
	ok($path ne '' && -f "$root/$path", "provides.pklimit.$key ($path) is a file");
}
is($meta->{prereqs}{runtime}{requires}{PostgreSQL}, '15.0.0', 'PostgreSQL 15 is required');
ok(exists $meta->{prereqs}{runtime}{recommends}{pg_cron}, 'pg_cron is recommended');
is($meta->{release_status}, 'stable', 'the release is stable');
is($meta->{'meta-spec'}{version}, '1.0.0', 'meta-spec 1.0.0');

# make dist, from a commit of this tree (its .gitignore applied)
my $tmp = abs_path(PostgreSQL::Test::Utils::tempdir());
sub git { system('git', '-c', 'user.name=pklimit', '-c', 'user.email=pklimit@localhost', @_) == 0 or die "git @_ failed" }
git('init', '-q', "$tmp/repo");
git("--git-dir=$tmp/repo/.git", "--work-tree=$root", 'add', '-A');
git("--git-dir=$tmp/repo/.git", "--work-tree=$root", 'commit', '-q', '-m', 'release');
git('clone', '-q', "$tmp/repo", "$tmp/src");

my ($out, $err) = ('', '');
ok(IPC::Run::run([ 'make', '-s', '-C', "$tmp/src", 'dist' ], '>', \$out, '2>', \$err), 'make dist')
  or diag($err);
my $zip = "$tmp/src/pklimit-$control.zip";
ok(-f $zip, "make dist writes pklimit-$control.zip");
my $zip_meta = '';
IPC::Run::run([ $python, '-c', q{
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
prefix = sys.argv[2]
print("outside:", [n for n in names if not n.startswith(prefix)])
sys.stdout.write(z.read(prefix + "META.json").decode())
}, $zip, "pklimit-$control/" ], '>', \$zip_meta, '2>', \$err) or diag($err);
like($zip_meta, qr/\Aoutside: \[\]\n/, "every file of the zip is under pklimit-$control/");
$zip_meta =~ s/\Aoutside: .*\n//;
my $zipped = eval { decode_json($zip_meta) } // {};
is($zipped->{version}, $control, "the zip's pklimit-$control/META.json is version $control");
is(schema_errors($zip_meta), '', "the zip's META.json is valid by the PGXN Meta Spec");

# a META.json whose version is not the control file's: refused, no zip
unlink $zip;
my $wrong = slurp_file("$tmp/src/META.json") =~ s/"version": "\Q$control\E",/"version": "0.0.1",/r;
open(my $fh, '>', "$tmp/src/META.json") or die $!;
print $fh $wrong;
close $fh;
git('-C', "$tmp/src", 'commit', '-q', '-a', '-m', 'a wrong version');
ok(!IPC::Run::run([ 'make', '-s', '-C', "$tmp/src", 'dist' ], '>', \$out, '2>', \$err),
	'make dist refuses a META.json of another version');
like($err, qr/META\.json says version 0\.0\.1, pklimit\.control default_version \Q$control\E/, 'and says why');
ok(!-e $zip, 'and writes no zip');

done_testing();
