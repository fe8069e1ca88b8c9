#!/usr/bin/env bash
# test/sqlsmith.sh: optional long fuzz.  As root on Debian 12: installs what
# is missing (and sqlsmith), builds and installs pklimit, starts a throwaway
# cluster (pklimit and pg_cron preloaded), creates the extension with a few
# rows, and lets sqlsmith send random queries to it as the superuser.
# sqlsmith builds its queries from the catalog, so it calls pklimit's
# functions (and every other function) with random arguments in random
# places.  Errors are expected and ignored; what fails the run is a server
# process that crashes (killed by a signal, or exiting abnormally, which
# makes the postmaster restart every session), a PANIC, an assertion
# failure, or a server that no longer answers.  Ends with one line
# "N passed, N failed" and exits non-zero on a crash.
#
#   bash test/sqlsmith.sh
#
# Environment:
#   SQLSMITH_QUERIES  queries to generate (default 20000)
#   SQLSMITH_SEED     sqlsmith's seed (default 1)
#   SQLSMITH_TIMEOUT  seconds after which sqlsmith is stopped (default 3600);
#                     a stop is reported, not counted as a failure
#   SQLSMITH_ARGS     more sqlsmith options, e.g. --exclude-catalog
#   PKLIMIT_PORT      the cluster's port (default 55432)
#   PKLIMIT_KEEP=1    keep the cluster directory, with server.log and
#                     sqlsmith.log, after the run
source "$(dirname "$0")/../scripts/common.sh"

QUERIES=${SQLSMITH_QUERIES:-20000}
SEED=${SQLSMITH_SEED:-1}
TIMEOUT=${SQLSMITH_TIMEOUT:-3600}

install_packages sqlsmith
build_and_install
start_cluster

log "creating the extension and a few rows"
q -c 'CREATE EXTENSION pklimit'
q <<'SQL' >/dev/null
SELECT pklimit_allow('login:alice@example.com', 10, '15 minutes');
SELECT pklimit_allow('login:bob', 1, '1 hour');
SELECT pklimit_allow('login:bob', 1, '1 hour');
SELECT pklimit_check('api:acme', 100, '1 day');
SELECT pklimit_allow('old', 5, '1 second');
SELECT set_config('platformkit.tenant', 'acme', false);
SELECT pklimit_allow('login:alice@example.com', 3, '36500 days');
SELECT pklimit_allow(repeat('long', 100), 3, '1 day');
SQL

# count the calls of every function, pklimit's included (from here on)
q -c "ALTER SYSTEM SET track_functions = 'all'"
q -c 'SELECT pg_reload_conf()' >/dev/null
sleep 0.2

log "sqlsmith: $QUERIES queries, seed $SEED (timeout ${TIMEOUT}s)"
start=$(date +%s)
rc=0
# shellcheck disable=SC2086
as_user timeout --kill-after=30 "$TIMEOUT" sqlsmith \
	--target="host=$PGHOST port=$PGPORT dbname=$PKLIMIT_DB user=postgres" \
	--seed="$SEED" --max-queries="$QUERIES" --verbose ${SQLSMITH_ARGS:-} \
	>"$WORKDIR/sqlsmith.log" 2>&1 || rc=$?
elapsed=$(( $(date +%s) - start ))

log "sqlsmith exited with status $rc after ${elapsed}s; its last lines:"
tail -n 15 "$WORKDIR/sqlsmith.log" | tr '\r' '\n' | tail -n 15 | cut -c1-300 >&2
[ $rc -eq 124 ] && log "sqlsmith stopped by the ${TIMEOUT}s timeout"

# Crash lines of the postmaster: a backend or worker killed by a signal or
# exiting abnormally, a PANIC, a failed assertion.
crash_re='terminated by signal|was terminated|server process .* exited with exit code|PANIC:  |^TRAP: '
crashes=$(grep -E "$crash_re" "$WORKDIR/server.log" || true)
alive=yes
q -c 'SELECT 1' >/dev/null 2>&1 || alive=no
pklimit_ok=yes
q -c "SELECT pklimit_allow('sqlsmith-after', 1, '1 hour')" >/dev/null 2>&1 || pklimit_ok=no

# sqlsmith may itself have reset the statistics: these are lower bounds
calls=$(q -c "SELECT funcid::regprocedure || ': ' || calls FROM pg_stat_user_functions
	WHERE funcname LIKE 'pklimit%' OR funcname = 'platformkit_is_system' ORDER BY 1" \
	2>/dev/null || true)

log "summary"
echo "   queries asked:       $QUERIES (seed $SEED), ${elapsed}s, sqlsmith status $rc"
echo "   errors in server log: $(grep -c 'ERROR:  ' "$WORKDIR/server.log" || true)"
echo "   pklimit's errors and warnings in the server log:"
grep -E '(ERROR|WARNING):  (pklimit|key must|max_count must|window (must|is too)|retention must|.*platformkit_limits)' \
	"$WORKDIR/server.log" | sed -E 's/^.*(ERROR|WARNING):  /\1:  /' | cut -c1-160 |
	sort | uniq -c | sort -rn | head -n 15 | sed 's/^/     /' || true
echo "   server answers:       $alive; pklimit records: $pklimit_ok"
echo "   pklimit functions called (pg_stat_user_functions):"
printf '%s\n' "${calls:-none}" | sed 's/^/     /'
if [ -n "$crashes" ]; then
	echo "   crashes:"
	printf '%s\n' "$crashes" | head -n 20 | sed 's/^/     /'
	echo "   queries that crashed (server log):"
	grep -A1 -E "$crash_re" "$WORKDIR/server.log" | grep 'Failed process was running' |
		head -n 10 | cut -c1-2000 | sed 's/^/     /' || true
fi

if [ -z "$crashes" ] && [ $alive = yes ] && [ $pklimit_ok = yes ]; then
	echo "1 passed, 0 failed"
else
	echo "0 passed, 1 failed"
	exit 1
fi
