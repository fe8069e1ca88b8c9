#!/usr/bin/env bash
# test/run.sh: the README's test command.  As root on Debian 12: installs
# what is missing, builds and installs pklimit, starts a throwaway cluster
# (pklimit and pg_cron preloaded) and runs every test layer: pg_regress,
# isolation specs and the TAP tests (preload, workers, conformance,
# concurrency).  Ends with one line "N passed, N failed" and exits non-zero
# on any failure.
#
#   bash test/run.sh            all layers
#   bash test/run.sh sql        pg_regress and isolation specs only
#   bash test/run.sh tap        TAP tests only
#   bash test/run.sh sqlsmith   the long mode: sqlsmith against pklimit
#                               (SQLSMITH_QUERIES=20000), then no crash
if [ "${1:-}" = sqlsmith ]; then
	exec bash "$(dirname "$0")/sqlsmith.sh"
fi
source "$(dirname "$0")/../scripts/common.sh"

layers=${1:-all}
passed=0
failed=0

count_regress() {		# pg_regress and pg_isolation_regress output
	local out=$1 p f
	p=$(grep -cE '\.\.\. ok|^ok [0-9]+ ' "$out" || true)
	f=$(grep -cE '\.\.\. FAILED|^not ok [0-9]+ ' "$out" || true)
	passed=$((passed + p)); failed=$((failed + f))
	echo "   $p passed, $f failed"
}

# the login examples (test/t/060_examples.pl) and pgbouncer (070); Node.js
# may come from elsewhere with its own npm, which Debian's npm conflicts with
node_pkgs=()
command -v npm >/dev/null || node_pkgs=(nodejs npm)
install_packages python3-psycopg pgbouncer golang-go golang-github-jackc-pgx-v4-dev \
	"${node_pkgs[@]}"
build_and_install
start_cluster

if [ "$layers" = all ] || [ "$layers" = sql ]; then
	log "pg_regress and isolation specs (make installcheck)"
	rc=0
	as_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres \
		make -C "$BUILD_DIR" PG_CONFIG=$PG_BIN/pg_config installcheck TAP_TESTS= \
		>"$WORKDIR/installcheck.log" 2>&1 || rc=$?
	grep -E '^(test|     |ok|not ok)|tests (passed|failed)' "$WORKDIR/installcheck.log" || true
	count_regress "$WORKDIR/installcheck.log"
	if [ $rc -ne 0 ]; then
		find "$BUILD_DIR" -name regression.diffs -exec cat {} + | head -200
		[ "$failed" -gt 0 ] || failed=$((failed + 1))
	fi
fi

if [ "$layers" = all ] || [ "$layers" = tap ]; then
	log "TAP tests (prove)"
	rc=0
	rm -rf "$BUILD_DIR/tmp_check"
	(cd "$BUILD_DIR" && as_user env PG_REGRESS=$PG_BIN/../lib/pgxs/src/test/regress/pg_regress \
		prove -v -I "$PG_BIN/../lib/pgxs/src/test/perl" -I test/t test/t/*.pl) \
		>"$WORKDIR/tap.log" 2>&1 || rc=$?
	grep -E '^(ok|not ok) |^test/t/|^#   Failed|^# Looks|^Result' "$WORKDIR/tap.log" || true
	p=$(grep -cE '^ok [0-9]+' "$WORKDIR/tap.log" || true)
	f=$(grep -cE '^not ok [0-9]+' "$WORKDIR/tap.log" || true)
	if [ $rc -ne 0 ]; then
		tail -n 40 "$WORKDIR/tap.log"
		for l in "$BUILD_DIR"/tmp_check/log/regress_log_*; do
			[ -f "$l" ] && grep -B2 -A8 'not ok\|died\|Died' "$l" | head -60
		done
		[ "$f" -gt 0 ] || f=1
	fi
	echo "   $p passed, $f failed"
	passed=$((passed + p)); failed=$((failed + f))
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
