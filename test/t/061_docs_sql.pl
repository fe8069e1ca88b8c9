# The documentation's SQL: every ```sql block of README.md and docs/*.md
# runs as written, or is marked (CONTRIBUTING.md, "Documentation").  The
# comment on the line before a block says how:
#
#   (none)                         run as a superuser in a new database with pklimit
#   <!-- runs: without pklimit --> run in a new database without pklimit
#   <!-- runs: in pg_cron's database -->  run where pg_cron keeps its jobs
#       (with ", without pklimit": pklimit and pg_cron dropped there first)
#   <!-- runs: as monitor -->      run as a pg_monitor member (or: as app)
#   <!-- tested: test/t/X.pl -->   X reads this block, or has its statements
#   <!-- illustrative -->          not run; it must hold a placeholder
#
# A block followed by an <!-- output --> fence must print exactly that.  The
# links between the pages must reach a file and a heading.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PklimitTest;

my $root = "$FindBin::RealBin/../..";
my @pages = ('README.md', map { "docs/" . (split m{/}, $_)[-1] } glob("$root/docs/*.md"));
ok(@pages > 1, 'the README and the docs/ pages are found');

# every sql block: its page, line, marker, text and shown output
my @blocks;
for my $page (@pages)
{
	my @lines = split /\n/, slurp_file("$root/$page"), -1;
	for (my $i = 0; $i < @lines; $i++)
	{
		next unless $lines[$i] =~ /^(\s*)```sql\s*$/;
		my ($indent, $start) = ($1, $i);
		my $marker = $i > 0 && $lines[$i - 1] =~ /^\s*<!-- (.*?) -->\s*$/ ? $1 : '';
		my @text;
		push @text, $lines[$i] while ++$i < @lines && $lines[$i] !~ /^\s*```\s*$/;
		s/^\Q$indent\E// for @text;
		my $output;
		my $j = $i + 1;
		$j++ while $j < @lines && $lines[$j] =~ /^\s*$/;
		if ($j + 1 < @lines && $lines[$j] =~ /^\s*<!-- output -->\s*$/ && $lines[$j + 1] =~ /^\s*```\s*$/)
		{
			my @out;
			$j += 2;
			push @out, $lines[$j++] while $j < @lines && $lines[$j] !~ /^\s*```\s*$/;
			$output = join("\n", @out);
		}
		push @blocks, { where => "$page:" . ($start + 1), page => $page,
			marker => $marker, sql => join("\n", @text) . "\n", output => $output };
	}
}
ok(@blocks >= 10, scalar(@blocks) . ' sql blocks found');

# one server for the runnable blocks: pklimit and pg_cron preloaded, pg_cron
# in database postgres, a database app beside it, a pg_monitor member and an
# application role
my $node = pklimit_cron_node('docs_sql',
	"cron.use_background_workers = on\nmax_worker_processes = 16\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION pklimit;
	CREATE ROLE monitor LOGIN IN ROLE pg_monitor;
	CREATE ROLE app LOGIN;
});
$node->safe_psql('postgres', 'CREATE DATABASE app');

sub normalise { my $s = shift; $s =~ s/[ \t]+$//mg; $s =~ s/\n+\z//; return $s }

# a statement as a test names it: comments dropped, whitespace collapsed
sub statements
{
	my $sql = shift;
	$sql =~ s/--[^\n]*//g;
	return grep { /\S/ } map { s/\s+/ /gr =~ s/^ | $//gr } split /;/, $sql;
}

my $n = 0;
for my $b (@blocks)
{
	my ($where, $marker) = ($b->{where}, $b->{marker});
	if ($marker eq 'illustrative')
	{
		like($b->{sql}, qr/\$\d|<[a-z_ ]+>|\.\.\.|…|:'\w+'/,
			"$where: an illustrative block holds a placeholder");
		next;
	}
	if ($marker =~ m{^tested: (test/t/\w+\.pl)$})
	{
		my $name = $1;
		my $file = "$root/$name";
		my $test = -f $file ? slurp_file($file) : '';
		my $reads = index($test, "<!-- $marker -->") >= 0 && index($test, $b->{page}) >= 0;
		my $flat = $test =~ s/\s+/ /gr;
		my @missing = grep { index($flat, $_) < 0 } statements($b->{sql});
		ok($test ne '' && ($reads || !@missing), "$where: $name runs this block")
		  or diag("not in $name: " . join('; ', @missing));
		next;
	}
	my ($db, $create, $role, @unknown) = ('doc' . ++$n, 1, undef);
	for my $option (split /, /, $marker =~ s/^runs: //r)
	{
		if ($option eq 'without pklimit') { $create = 0 }
		elsif ($option eq "in pg_cron's database") { $db = 'postgres' }
		elsif ($option =~ /^as (monitor|app)$/) { $role = $1 }
		else { push @unknown, $option }
	}
	if (@unknown)
	{
		fail("$where: a block marked <!-- $marker --> is neither runnable nor illustrative");
		next;
	}
	if ($db eq 'postgres' && !$create)
	{
		$node->safe_psql('postgres', 'DROP EXTENSION pklimit; DROP EXTENSION pg_cron');
	}
	elsif ($db ne 'postgres')
	{
		$node->safe_psql('postgres', "CREATE DATABASE $db");
		$node->safe_psql($db, 'CREATE EXTENSION pklimit') if $create;
	}
	my ($out, $err) = ('', '');
	my $ret = $node->psql($db, $b->{sql}, stdout => \$out, stderr => \$err,
		extra_params => [ '-P', 'format=aligned', '-P', 'tuples_only=off',
			defined $role ? ('-U', $role) : () ]);
	is($ret, 0, "$where: the block runs" . (defined $role ? " as $role" : ''))
	  or diag($err);
	is(normalise($out), normalise($b->{output}), "$where: it prints the output shown")
	  if defined $b->{output};
	$node->safe_psql('postgres', "DROP DATABASE $db") if $db ne 'postgres';
	# pg_cron's database as the later blocks find it, whatever this one did
	$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS pg_cron; '
		  . 'CREATE EXTENSION IF NOT EXISTS pklimit')
	  if $db eq 'postgres' && !$create;
}

# links between the pages: a file that exists and, after '#', a heading of
# it (as GitHub names headings) or an <a id>
my %anchors;
sub anchors
{
	my $file = shift;
	return $anchors{$file} if $anchors{$file};
	my (%seen, %set);
	my $infence = 0;
	for (split /\n/, slurp_file($file))
	{
		$infence = !$infence if /^\s*```/;
		next if $infence;
		$set{$1} = 1 while /<a id="([^"]+)">/g;
		next unless /^#+ (.*)$/;
		my $slug = lc($1) =~ s/[^a-z0-9_\- ]//gr =~ s/ /-/gr;
		$set{ $seen{$slug}++ ? "$slug-" . ($seen{$slug} - 1) : $slug } = 1;
	}
	return $anchors{$file} = \%set;
}
for my $page (@pages, 'CONTRIBUTING.md')
{
	my $text = slurp_file("$root/$page") =~ s/```.*?```//gsr;
	my $dir = dirname("$root/$page");
	my @bad;
	while ($text =~ /\]\(([^)\s]+)\)/g)
	{
		my $link = $1;
		next if $link =~ /^[a-z]+:/;
		my ($path, $anchor) = split /#/, $link, 2;
		my $file = $path eq '' ? "$root/$page" : "$dir/$path";
		push @bad, $link
		  unless -e $file && (!defined $anchor || (anchors($file)->{$anchor}));
	}
	is(join(', ', @bad), '', "$page: every link reaches its page and heading");
}

$node->stop;
done_testing();
