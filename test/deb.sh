#!/usr/bin/env bash
# test/deb.sh: the Debian package layer of test/run.sh.  As root:
#
#   bash test/deb.sh 15      postgresql-15-pklimit (17, 18 likewise)
#
# In a Debian chroot of its own (scripts/chroot.sh, under
# $PKLIMIT_CHROOTS/deb), where make install has never put pklimit: installs
# the build dependencies debian/control names, builds the package with
# dpkg-buildpackage -us -uc -b, checks what it holds and lintian's verdict,
# installs it with apt-get install ./postgresql-<major>-pklimit_*.deb, runs
# its autopkgtest (debian/tests: the regression suite and the isolation
# specs with pklimit preloaded), creates the extension in a fresh cluster,
# then purges the package and checks that none of its files is left.  Ends
# with "N passed, N failed", like the other layers; a step that cannot run
# says so in a line "   name: not run: why".
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
major=${1:?usage: test/deb.sh <15|17|18>}
pkg=postgresql-$major-pklimit

if [ -z "${PKLIMIT_DEB_INSIDE:-}" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "   $pkg: not run: the package is built and installed in a chroot, as root"
		echo "0 passed, 0 failed"
		exit 0
	fi
	PKLIMIT_CHROOTS=${PKLIMIT_CHROOTS:-/var/cache/pklimit/chroots}/deb \
		PKLIMIT_COPY_SRC=$(cd "$here/.." && pwd) \
		exec bash "$here/../scripts/chroot.sh" "$major" \
		env PKLIMIT_DEB_INSIDE=1 bash /opt/pklimit/test/deb.sh "$major"
fi

# Inside the chroot, the source tree in /opt/pklimit.
source /opt/pklimit/scripts/apt.sh
src=/opt/pklimit
work=/tmp/pklimit-deb
passed=0 failed=0

log() { printf '== %s\n' "$*" >&2; }
ok() { echo "   ok: $*"; passed=$((passed + 1)); }
not_ok() { echo "   ! FAILED: $*"; failed=$((failed + 1)); }
finish() { echo "$passed passed, $failed failed"; exit 0; }

# The files of pklimit in PostgreSQL's directories, whoever put them there.
pklimit_files() {
	ls -d /usr/lib/postgresql/"$major"/lib/pklimit.so /usr/lib/postgresql/"$major"/lib/bitcode/pklimit* \
		/usr/share/postgresql/"$major"/extension/pklimit[-.]* 2>/dev/null || true
}

# A run that stopped half-way left its package: take it out first.  Any
# other pklimit file here was put by make install, which the test must not
# find.
if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
	log "purging the $pkg an earlier run left"
	apt_get purge -y -qq "$pkg" >/dev/null
fi
if [ -n "$(pklimit_files)" ]; then
	not_ok "pklimit is installed here outside the package: $(pklimit_files | tr '\n' ' ')"
	finish
fi

log "installing the build dependencies of debian/control"
rm -rf "$work"
mkdir -p "$work"
rsync -a --exclude '*.o' --exclude '*.so' --exclude '*.bc' "$src"/ "$work/pklimit"/
cd "$work/pklimit"
if ! apt_get build-dep -y -qq --no-install-recommends ./ >"$work/build-dep.log" 2>&1 ||
	! apt_get install -y -qq --no-install-recommends lintian >>"$work/build-dep.log" 2>&1; then
	tail -n 20 "$work/build-dep.log"
	not_ok "the build dependencies install"
	finish
fi

# The build: bookworm's debian/control is the committed one (a stale one
# fails the build); trixie and sid regenerate it for their majors.
log "building $pkg (dpkg-buildpackage -us -uc -b)"
[ "$major" = 15 ] || export PG_UPDATECONTROL=1
if dpkg-buildpackage -us -uc -b -j"$(nproc)" >"$work/build.log" 2>&1; then
	ok "dpkg-buildpackage -us -uc -b builds $pkg"
else
	tail -n 40 "$work/build.log"
	not_ok "dpkg-buildpackage -us -uc -b"
	finish
fi
unset PG_UPDATECONTROL
if grep -qE 'pg_regress|pg_virtualenv' "$work/build.log"; then
	not_ok "the build ran tests: $(grep -m1 -E 'pg_regress|pg_virtualenv' "$work/build.log")"
fi
# the built scripts: the Makefile's DATA_built (the released ones are sources)
built=$(sed -n 's/^DATA_built = //p' Makefile)
left=$(ls -d ./*.so src/*.o $built 2>/dev/null || true)
if [ -n "$left" ]; then
	not_ok "the build left built files in the tree: $(tr '\n' ' ' <<<"$left")"
else
	ok "the build leaves no built file in the source tree"
fi

deb=$(ls "$work"/"$pkg"_*.deb)
echo "   $(basename "$deb"): $(dpkg-deb -f "$deb" Version), depends on $(dpkg-deb -f "$deb" Depends)"

# What the package must hold: the library, the control file, every script
# the Makefile installs (released and built), and the documentation.
pg_config=/usr/lib/postgresql/$major/bin/pg_config
scripts=$(make -s --no-print-directory PG_CONFIG="$pg_config" \
	--eval 'print-data: ; @echo $(DATA) $(DATA_built)' print-data)
expected=("./usr/lib/postgresql/$major/lib/pklimit.so"
	"./usr/share/postgresql/$major/extension/pklimit.control"
	"./usr/share/doc/$pkg/copyright"
	"./usr/share/doc/$pkg/changelog.gz")
for s in $scripts; do expected+=("./usr/share/postgresql/$major/extension/$s"); done
missing=()
listing=$(dpkg-deb -c "$deb" | awk '{ print $6 }')
for f in "${expected[@]}"; do
	grep -qxF "$f" <<<"$listing" || missing+=("$f")
done
grep -qE "^\./usr/share/doc/$pkg/README\.md(\.gz)?$" <<<"$listing" || missing+=("README.md")
if [ ${#missing[@]} -eq 0 ]; then
	ok "$pkg holds pklimit.so, pklimit.control, $(wc -w <<<"$scripts") SQL scripts, README, changelog, copyright"
else
	not_ok "$pkg lacks ${missing[*]}; it holds: $(tr '\n' ' ' <<<"$listing")"
fi
depends=$(dpkg-deb -f "$deb" Depends) recommends=$(dpkg-deb -f "$deb" Recommends)
# (newer pg_buildext adds the minor version built against: "(>> 17.12)")
if [[ ", $depends," =~ ,\ postgresql-$major(\ \([^\)]*\))?, ]] &&
	[[ ", $recommends," =~ ,\ postgresql-$major-cron(\ \([^\)]*\))?, ]]; then
	ok "$pkg depends on postgresql-$major and recommends postgresql-$major-cron"
else
	not_ok "$pkg: Depends: $depends; Recommends: $recommends"
fi

log "lintian"
rc=0
lintian --fail-on error "$work"/pklimit_*.changes >"$work/lintian.out" 2>&1 || rc=$?
grep -v 'running with root privileges' "$work/lintian.out" >"$work/lintian.log" || true
sed 's/^/     /' "$work/lintian.log"
if [ $rc -eq 0 ]; then
	ok "lintian: no error ($(grep -c . "$work/lintian.log" || true) warnings or other tags)"
else
	not_ok "lintian reports errors"
fi

log "installing $pkg with apt-get install ./$(basename "$deb")"
cd "$work"
if apt_get install -y -qq "./$(basename "$deb")" >"$work/install.log" 2>&1 &&
	dpkg-query -W -f='${Status}' "$pkg" | grep -q 'ok installed'; then
	ok "apt-get install ./$(basename "$deb")"
else
	tail -n 20 "$work/install.log"
	not_ok "apt-get install ./$(basename "$deb")"
	finish
fi

# The autopkgtest, as autopkgtest runs it: each test of debian/tests/control
# from a fresh copy of the source tree, its dependencies installed.
log "the autopkgtest (debian/tests)"
rm -rf "$work/test"
rsync -a --exclude '*.o' --exclude '*.so' --exclude '*.bc' "$src"/ "$work/test"/
cd "$work/test"
tests=$(awk -F: '$1 == "Tests" { print $2 }' debian/tests/control)
test_deps=$(awk '/^Depends:/ { on = 1; sub(/^Depends:/, ""); } /^[A-Z]/ && !/^Depends:/ { on = 0 } on' \
	debian/tests/control | tr ',' '\n' | sed 's/[[:space:]]//g' | grep -v '^@$' | grep . || true)
# shellcheck disable=SC2086
apt_get install -y -qq --no-install-recommends $test_deps >/dev/null
for t in $tests; do
	rc=0
	AUTOPKGTEST_TMP=$(mktemp -d) "debian/tests/$t" >"$work/autopkgtest-$t.log" 2>&1 || rc=$?
	grep -E '^(test |ok |not ok )|tests (passed|failed)|### ' "$work/autopkgtest-$t.log" | sed 's/^/     /'
	p=$(grep -cE '\.\.\. ok|^ok [0-9]+ ' "$work/autopkgtest-$t.log" || true)
	f=$(grep -cE '\.\.\. FAILED|^not ok [0-9]+ ' "$work/autopkgtest-$t.log" || true)
	passed=$((passed + p)) failed=$((failed + f))
	if [ $rc -eq 0 ] && [ "$p" -gt 0 ]; then
		ok "autopkgtest $t: $p passed against the installed package"
	else
		tail -n 60 "$work/autopkgtest-$t.log"
		not_ok "autopkgtest $t (exit $rc, $p passed, $f failed)"
	fi
done

# CREATE EXTENSION in a fresh cluster set up as the README says: pklimit
# and pg_cron preloaded, pg_cron created first, then pklimit, which
# schedules its purge.
log "CREATE EXTENSION in a fresh cluster"
cd /
out=$(NONROOT=1 pg_virtualenv -v "$major" -o shared_preload_libraries=pklimit,pg_cron \
	psql -X -qAt -v ON_ERROR_STOP=1 \
	-c 'SET client_min_messages = error' \
	-c 'CREATE EXTENSION pg_cron' -c 'CREATE EXTENSION pklimit' \
	-c "SELECT extversion FROM pg_extension WHERE extname = 'pklimit'" \
	-c "SELECT pklimit_allow('deb', 1, '1 minute'), pklimit_allow('deb', 1, '1 minute')" \
	-c "SELECT count(*) FROM cron.job WHERE command LIKE '%pklimit_purge%'" 2>&1) || true
version=$(sed -n 's/^default_version = '"'"'\(.*\)'"'"'$/\1/p' "$src/pklimit.control")
if [ "$(grep -E '^[0-9.]+$|^[tf]\|[tf]$' <<<"$out" | tr '\n' ' ')" = "$version t|f 1 " ]; then
	ok "CREATE EXTENSION pklimit (version $version) in a fresh cluster: it limits and schedules its purge"
else
	echo "$out" | tail -n 30
	not_ok "CREATE EXTENSION pklimit in a fresh cluster"
fi

log "purging $pkg"
files=$(dpkg -L "$pkg")
if apt_get purge -y -qq "$pkg" >"$work/purge.log" 2>&1 &&
	! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'installed'; then
	ok "apt-get purge $pkg"
else
	tail -n 20 "$work/purge.log"
	not_ok "apt-get purge $pkg"
fi
left=()
while IFS= read -r f; do
	[ "$f" = /. ] && continue
	[ -e "$f" ] || [ -L "$f" ] || continue
	# a directory another package still owns stays
	if [ -d "$f" ] && [ ! -L "$f" ] && dpkg-query -S "$f" >/dev/null 2>&1; then
		continue
	fi
	left+=("$f")
done <<<"$files"
if [ ${#left[@]} -eq 0 ] && [ -z "$(pklimit_files)" ]; then
	ok "no file of $pkg is left ($(wc -l <<<"$files") paths checked)"
else
	not_ok "left after the purge: ${left[*]} $(pklimit_files | tr '\n' ' ')"
fi

rm -rf "$work"
finish
