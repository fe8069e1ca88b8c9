#!/usr/bin/env bash
# scripts/indent.sh: lay out the C sources of src/ and src/memory/ as
# PostgreSQL's pgindent does (make indent).
#
#   bash scripts/indent.sh           rewrite the files in place
#   bash scripts/indent.sh --check   list the files that would change; exit 1
#
# Runs Debian's pg_bsd_indent (package pg-bsd-indent, installed if missing
# and run as root) with pgindent's options, a typedef list made of
# PostgreSQL's server headers and pklimit's own, and pgindent's main
# post-processing (a lone "*" of a function's return type joins the type;
# run-together comments get a tab between them).
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
[ "${1:-}" = --check ] && check=1

if ! command -v pg_bsd_indent >/dev/null; then
	[ "$(id -u)" = 0 ] || { echo "scripts/indent.sh: install pg-bsd-indent" >&2; exit 2; }
	source scripts/apt.sh
	apt_get update -qq
	apt_get install -y -qq --no-install-recommends pg-bsd-indent >/dev/null
fi
PG_CONFIG=${PG_CONFIG:-pg_config}
includes=$($PG_CONFIG --includedir-server)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Every name typedef'd in the server headers and in src/: "typedef ... name;"
# and "} name;" closing a typedef'd struct, union or enum.
{
	find "$includes" src -name '*.h' -print0 | xargs -0 cat
	cat src/*.c src/memory/*.c
} | perl -ne '
	print "$1\n" if /^\s*typedef\b.*?\b(\w+)\s*(\[[^\]]*\])?\s*;/;
	print "$1\n" if /^\s*typedef\b.*\(\s*\*\s*(\w+)\s*\)\s*\(/;
	$in = 1 if /^typedef\s+(struct|union|enum)\b[^;]*$/;
	if ($in && /^\}\s*(\w+)\s*;/) { print "$1\n"; $in = 0; }
' | sort -u >"$work/typedefs"

opts=(-bad -bap -bbb -bc -bl -cli1 -cp33 -cdb -nce -d0 -di12 -nfc1 -i4 -l79
	-lp -lpl -nip -npro -sac -tpg -ts4 "-U$work/typedefs")

changed=0
for f in src/*.c src/*.h src/memory/*.c src/memory/*.h; do
	pg_bsd_indent "${opts[@]}" "$f" "$work/out" 2>"$work/err" ||
		{ cat "$work/err" >&2; exit 1; }
	perl -0pi -e 's!^([A-Za-z_]\S*)[ \t]+\*$!$1 *!gm; s!\*/(/\*.*\*/)$!*/\t$1!gm' "$work/out"
	if ! cmp -s "$f" "$work/out"; then
		changed=1
		if [ $check = 1 ]; then
			echo "$f"
		else
			cp "$work/out" "$f"
			echo "indented $f"
		fi
	fi
done
[ $check = 0 ] || [ $changed = 0 ]
