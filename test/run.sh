#!/usr/bin/env bash
# test/run.sh: the README's test command.  As root on Debian 12: installs
# what is missing, builds and installs pklimit, starts a throwaway cluster
# (pklimit and pg_cron preloaded) and runs every test layer: pg_regress,
# isolation specs and the TAP tests (preload, workers, conformance,
# concurrency, upgrade) and, on the host's version, the demo, on every
# supported PostgreSQL major: 15 on the host, 17 and 18 in Debian chroots
# (scripts/chroot.sh).  Ends with a line for each test not run and why
# ("== not run: ..."), one per version (with why it stopped, if it stopped
# before any test ran), and one line "N passed, N failed" (every version
# added up), and exits non-zero on any failure.  Package installs wait for
# another apt or dpkg to let go of its locks (scripts/apt.sh).  Last, the
# Debian package layer (test/deb.sh): postgresql-15-pklimit built, installed
# in a chroot of its own, tested and purged.
#
#   bash test/run.sh               every layer on 15, 17 and 18
#   bash test/run.sh --pg 17       one version (15, 17 or 18; or "all")
#   bash test/run.sh sql           pg_regress and isolation specs only
#   bash test/run.sh tap           TAP tests only
#   bash test/run.sh deb           the Debian package layer only
#   PKLIMIT_DEB_ALL=1              the package layer for 17 and 18 too
#   bash test/run.sh sqlsmith      the long mode: sqlsmith against pklimit
#                                  (SQLSMITH_QUERIES=20000), then no crash
#   PKLIMIT_TAP_TESTS="031_static_workers 090_upgrade" bash test/run.sh tap
#                                  only the TAP tests named
#   PKLIMIT_KEEP=1                 keep the cluster and the build directory
#
# The client-language examples (060), the framework clients (062, 063) and
# the pgbouncer test (070) run on the host's version only; on the others
# they are reported as not run.  The long tests run at full length on the
# host's version; on the others the randomized ones make 1000 operations
# (PKLIMIT_OPS) and the memory crash test kills the worker only
# (PKLIMIT_SHORT), the round that starts shared memory again.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
versions=${PKLIMIT_PG:-all}
layers=all
while [ $# -gt 0 ]; do
	case $1 in
		--pg) versions=${2:?--pg needs a version}; shift 2 ;;
		--pg=*) versions=${1#--pg=}; shift ;;
		all | sql | tap | deb) layers=$1; shift ;;
		sqlsmith) exec bash "$here/sqlsmith.sh" ;;
		*) echo "test/run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ "$versions" = all ] && versions="15 17 18"

# one run at a time on a machine (scripts/common.sh)
source "$here/../scripts/common.sh"
lock_machine

# The PostgreSQL major the host's Debian ships; others run in a chroot.
host_major() {
	. /etc/os-release
	case ${VERSION_CODENAME:-} in
		bookworm) echo 15 ;;
		trixie) echo 17 ;;
		*) echo 0 ;;
	esac
}

# Several versions, or one the host does not ship: run each where it lives
# and add up their summary lines.
if [ -z "${PKLIMIT_ONE_VERSION:-}" ]; then
	total_p=0 total_f=0 summary=() not_run=() failures=()
	# add_up NAME OUT RC START: a run's summary line, its tests not run and
	# its time added to the totals
	add_up() {
		local name=$1 out=$2 rc=$3 start=$4 line p=0 f=1 why= skipped
		line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1 || true)
		while IFS= read -r skipped; do
			not_run+=("$name: $skipped")
		done < <(sed -nE 's/^ +([0-9a-z_-]+)(\.pl)?: not run:? /\1: /p' "$out")
		while IFS= read -r skipped; do
			failures+=("$name: $skipped")
		done < <(sed -n 's/^   ! //p' "$out")
		[[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]] && p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
		[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
		# a run that stopped before its tests ran: its last words say why
		[ -z "$line" ] && why=": stopped before any test ran, after: $(grep -v '^[[:space:]]*$' "$out" | tail -n 1)"
		rm -f "$out"
		total_p=$((total_p + p)) total_f=$((total_f + f))
		summary+=("$name: $p passed, $f failed ($(($(date +%s) - start)) s)$why")
	}
	[ "$layers" = deb ] || for v in $versions; do
		start=$(date +%s)
		out=$(mktemp)
		rc=0
		if [ "$v" = "$(host_major)" ]; then
			PKLIMIT_ONE_VERSION=1 PG_MAJOR=$v bash "$here/run.sh" "$layers" 2>&1 | tee "$out" |
				{ grep --line-buffered -v '^   ! ' || true; } || rc=$?
		else
			PKLIMIT_COPY_SRC=$(cd "$here/.." && pwd) bash "$here/../scripts/chroot.sh" "$v" \
				env PKLIMIT_ONE_VERSION=1 PG_MAJOR=$v PKLIMIT_EXAMPLES=0 \
				PKLIMIT_OPS="${PKLIMIT_OPS:-1000}" PKLIMIT_SHORT=1 \
				PKLIMIT_PORT="${PKLIMIT_PORT:-55432}" PKLIMIT_KEEP="${PKLIMIT_KEEP:-}" \
				PKLIMIT_TAP_TESTS="${PKLIMIT_TAP_TESTS:-}" \
				bash /opt/pklimit/test/run.sh "$layers" \
				2>&1 | tee "$out" | { grep --line-buffered -v '^   ! ' || true; } || rc=$?
		fi
		add_up "PostgreSQL $v" "$out" "$rc" "$start"
	done
	# The Debian packages: 15's always, 17's and 18's with PKLIMIT_DEB_ALL=1
	# (each builds a chroot of its own).
	if [ "$layers" = all ] || [ "$layers" = deb ]; then
		for v in $versions; do
			if [ "$v" != 15 ] && [ "${PKLIMIT_DEB_ALL:-}" != 1 ]; then
				not_run+=("postgresql-$v-pklimit: the package is built with PKLIMIT_DEB_ALL=1 only")
				continue
			fi
			start=$(date +%s)
			out=$(mktemp)
			rc=0
			echo "== the Debian package postgresql-$v-pklimit (test/deb.sh)"
			bash "$here/deb.sh" "$v" 2>&1 | tee "$out" | { grep --line-buffered -v '^   ! ' || true; } || rc=$?
			add_up "postgresql-$v-pklimit" "$out" "$rc" "$start"
		done
	fi
	[ ${#not_run[@]} -gt 0 ] && printf '== not run: %s\n' "${not_run[@]}"
	if [ ${#failures[@]} -gt 0 ]; then
		echo "== what failed, with each check's got and expected:"
		printf '   %s\n' "${failures[@]}"
	fi
	printf '== %s\n' "${summary[@]}"
	echo "$total_p passed, $total_f failed"
	[ "$total_f" -eq 0 ] && [ "$total_p" -gt 0 ]
	exit
fi

# One version, here (the host, or inside its chroot).
source "$here/../scripts/common.sh"

passed=0
failed=0
examples=${PKLIMIT_EXAMPLES:-1}

count_regress() {		# pg_regress and pg_isolation_regress output
	local out=$1 p f
	p=$(grep -cE '\.\.\. ok|^ok [0-9]+ ' "$out" || true)
	f=$(grep -cE '\.\.\. FAILED|^not ok [0-9]+ ' "$out" || true)
	passed=$((passed + p)); failed=$((failed + f))
	echo "   $p passed, $f failed"
}

# the login examples (test/t/060_examples.pl), the framework clients (062,
# 063) and pgbouncer (070); Node.js may come from elsewhere with its own
# npm, which Debian's npm conflicts with
extra=()
if [ "$examples" = 1 ]; then
	command -v npm >/dev/null || extra=(nodejs npm)
	extra+=(python3-psycopg pgbouncer golang-go golang-github-jackc-pgx-v4-dev)
	# the framework clients (test/t/062, 063): Flask and flask-limiter on limits
	extra+=(python3-psycopg-pool python3-flask python3-flask-limiter python3-limits python3-venv python3-pip)
fi
# the release test (test/t/120_release.pl): git for make dist, and
# python3-jsonschema to validate META.json
extra+=(git python3-jsonschema)
install_packages "${extra[@]}"
build_and_install
start_cluster

if [ "$layers" = all ] || [ "$layers" = sql ]; then
	log "pg_regress and isolation specs (make installcheck) on PostgreSQL $PG_MAJOR"
	rc=0
	# the regression suite, then the isolation specs even if it failed
	# (each test's line as it ends: pg_regress's own, "test x ... ok" or, from
	# 16 on, "ok 1 - x")
	for suite in "ISOLATION=" "REGRESS="; do
		as_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres \
			make -C "$BUILD_DIR" PG_CONFIG=$PG_BIN/pg_config installcheck TAP_TESTS= "$suite" 2>&1 |
			tee -a "$WORKDIR/installcheck.log" |
			{ grep --line-buffered -E '^(test |ok |not ok )' || true; } | sed -u 's/^/   /' || rc=$?
	done
	count_regress "$WORKDIR/installcheck.log"
	if [ $rc -ne 0 ]; then
		# every failing test, and the first lines of its diff, for the end
		grep -E '\.\.\. FAILED|^not ok [0-9]+ ' "$WORKDIR/installcheck.log" | sed 's/^/   ! /' || true
		find "$BUILD_DIR" -name regression.diffs -exec cat {} + | head -200 | sed 's/^/   ! /'
		[ "$failed" -gt 0 ] || failed=$((failed + 1))
	fi
fi

if [ "$layers" = all ] || [ "$layers" = tap ]; then
	log "TAP tests (prove) on PostgreSQL $PG_MAJOR"
	tests=()
	for t in "$BUILD_DIR"/test/t/*.pl; do
		if [ -n "${PKLIMIT_TAP_TESTS:-}" ] &&
			! [[ " $PKLIMIT_TAP_TESTS " == *" $(basename "$t" .pl) "* ]]; then
			continue
		fi
		case $(basename "$t") in
			060_examples.pl | 062_client_node.pl | 063_client_python.pl | 070_pgbouncer.pl)
				if [ "$examples" != 1 ]; then
					echo "   $(basename "$t" .pl): not run: it runs on the host's PostgreSQL only"
					continue
				fi ;;
			120_release.pl)
				if [ "$examples" != 1 ]; then
					echo "   $(basename "$t" .pl): not run: the release's files are the same for every version, checked with the host's"
					continue
				fi ;;
		esac
		tests+=("test/t/$(basename "$t")")
	done
	rc=0
	rm -rf "$BUILD_DIR/tmp_check"
	# one line per test file as it ends, a file skipped as a whole (110_citus
	# without Citus) with why, then each failed check with its got and
	# expected (test/progress.pl); everything in tap.log.  (The console
	# formatter: the default one, to a pipe, holds a file's output to its end.)
	(cd "$BUILD_DIR" && as_user env PG_REGRESS=$PG_BIN/../lib/pgxs/src/test/regress/pg_regress \
		prove --formatter TAP::Formatter::Console -v --merge \
			-I "$PG_BIN/../lib/pgxs/src/test/perl" -I test/t "${tests[@]}") 2>&1 |
		perl "$here/progress.pl" "$WORKDIR/tap.log" || rc=$?
	# a test that skips is not run, never passed
	p=$(grep -E '^ok [0-9]+' "$WORKDIR/tap.log" | grep -vc '# skip' || true)
	f=$(grep -cE '^not ok [0-9]+' "$WORKDIR/tap.log" || true)
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
		# prove failed, but no check did: what it said last
		tail -n 5 "$WORKDIR/tap.log" | sed 's/^/   ! /'
		f=1
	fi
	echo "   $p passed, $f failed"
	passed=$((passed + p)); failed=$((failed + f))
fi

# The README's first command, the demo, on the host's version: one test
# (its own cluster, on the next port).
if [ "$layers" = all ] && [ "$examples" = 1 ]; then
	log "the demo (demo/run.sh) on PostgreSQL $PG_MAJOR"
	if PKLIMIT_PORT=$((PKLIMIT_PORT + 1)) PKLIMIT_KEEP= bash "$here/../demo/run.sh" \
		>"$WORKDIR/demo.log" 2>&1 && grep -q '^OK: ' "$WORKDIR/demo.log"; then
		echo "   demo: $(grep '^OK: ' "$WORKDIR/demo.log" | cut -c1-60)..."
		passed=$((passed + 1))
	else
		tail -n 30 "$WORKDIR/demo.log" | sed 's/^/   ! /'
		failed=$((failed + 1))
	fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
