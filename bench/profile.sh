#!/usr/bin/env bash
# bench/profile.sh: where the server's CPU goes per call, with perf.  As root
# on Debian 12:
#
#   bash bench/profile.sh                 (CLIENTS=64, KEYS=100000, DURATION=10)
#   SCRIPT=plain bash bench/profile.sh    the plain statement instead
#
# Runs pgbench (pklimit_allow over KEYS random keys, or the design record's
# plain statement) against a throwaway cluster while `perf record` samples
# every CPU (software clock events, 999 Hz), then splits the samples by who
# ran (the pklimit worker, the other postgres processes, most of them the
# callers' backends, pgbench, the rest, and idle) and by
# user or kernel mode, and turns them into microseconds of CPU per call.
# Lists the worker's and the backends' top functions.  Reported, not
# asserted.
source "$(dirname "$0")/../scripts/common.sh"

CLIENTS=${CLIENTS:-64}
KEYS=${KEYS:-100000}
DURATION=${DURATION:-10}
SCRIPT=${SCRIPT:-pklimit}
export PKLIMIT_MAX_CONNECTIONS=$((CLIENTS + 20))

install_packages linux-perf
build_and_install
start_cluster
B=$WORKDIR/bench
mkdir -p "$B" && chown $RUN_AS "$B"

q <<'SQL' >/dev/null
SET client_min_messages = error;
CREATE EXTENSION pklimit;
CREATE TABLE plain_limits (key text PRIMARY KEY, window_start timestamptz NOT NULL,
	window_end timestamptz NOT NULL, count bigint NOT NULL);
SQL
{
	echo "\\set k random(1, $KEYS)"
	if [ "$SCRIPT" = plain ]; then
		echo "INSERT INTO plain_limits AS l (key, window_start, window_end, count)" \
			"SELECT 'k' || :k, b.ws, b.ws + interval '1 hour', 1" \
			"FROM (SELECT date_bin('1 hour', clock_timestamp(), '1970-01-01') AS ws) b" \
			"ON CONFLICT (key) DO UPDATE SET" \
			"count = CASE WHEN l.window_start = excluded.window_start THEN l.count + 1 ELSE 1 END," \
			"window_start = excluded.window_start, window_end = excluded.window_end RETURNING count;"
	else
		echo "SELECT pklimit_allow('k' || :k, 1000000000, '1 hour');"
	fi
} >"$B/script.sql"
chown -R $RUN_AS "$B"

# a short warm-up starts the worker and fills the caches
as_user pgbench -n -c "$CLIENTS" -j 2 -T 2 -f "$B/script.sql" -h "$PGHOST" -p "$PGPORT" \
	-U postgres "$PKLIMIT_DB" >/dev/null 2>&1
wpid=$(q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker'")

perf record -q -a -g -F 999 -e cpu-clock -o "$B/perf.data" -- \
	runuser -u $RUN_AS -- env PATH="$PG_BIN:$PATH" pgbench -n -c "$CLIENTS" -j 2 -T "$DURATION" \
	-f "$B/script.sql" -h "$PGHOST" -p "$PGPORT" -U postgres "$PKLIMIT_DB" >"$B/pgbench.out" 2>&1
calls=$(awk '/number of transactions actually processed/ { split($NF, a, "/"); print a[1] }' "$B/pgbench.out")

# samples by process name, pid and mode: comm pid (user|kernel)
perf script -i "$B/perf.data" -F comm,pid,ip,dso 2>/dev/null |
	awk -v wpid="${wpid:-0}" '
		/^[^ \t]/ {		# a sample line: comm pid ... (the call chain follows, indented)
			n = split($0, f, " ")
			comm = f[1]; pid = f[2] + 0
			who = "other"
			if (comm == "pgbench") who = "pgbench"
			if (comm == "postgres") who = "backends"
			if (pid == wpid) who = "worker"
			if (pid == 0) who = "idle"
			first = 1; next
		}
		first && NF > 0 {
			mode = ($0 ~ /kernel/) ? "kernel" : "user"
			count[who " " mode]++; total++; first = 0
		}
		END { for (k in count) print k, count[k], total }' |
	sort >"$B/split.txt"

echo "profile: $SCRIPT over $KEYS keys, $CLIENTS clients, $DURATION s, $calls calls, $(nproc) cores, 999 Hz samples"
awk -v calls="$calls" '
	{ us = $3 / 999 * 1000000 / calls; printf "  %-9s %-7s %6.1f us/call  (%4.1f %% of all samples)\n", $1, $2, us, 100 * $3 / $4 }
	$1 != "idle" { tot += $3 } END { printf "  %-17s %6.1f us/call (idle left out)\n", "all", tot / 999 * 1000000 / calls }' "$B/split.txt"
if [ -n "$wpid" ]; then
	echo "the worker's top functions (self time)"
	perf report -i "$B/perf.data" --pid "$wpid" --no-children --sort sym --stdio 2>/dev/null |
		grep -E '^ +[0-9.]+%' | head -n 15 || true
fi
echo "every postgres process's top functions (self time)"
perf report -i "$B/perf.data" --comms postgres --no-children --sort sym --stdio 2>/dev/null |
	grep -E '^ +[0-9.]+%' | head -n 15 || true
