#!/usr/bin/env bash
# bench/profile.sh: where the server's CPU goes per call, with perf.  As root
# on Debian 12:
#
#   bash bench/profile.sh                 (CLIENTS=64, KEYS=100000, DURATION=10)
#   SCRIPT=plain bash bench/profile.sh    the plain statement instead
#   SCRIPT=memory bash bench/profile.sh   the memory path (durable => false)
#   SCRIPT=select1 bash bench/profile.sh  SELECT 1, the round-trip floor
#   MODE=prepared bash bench/profile.sh   pgbench -M prepared (else simple)
#   TOP=40 bash bench/profile.sh          the 40 top functions (else 15)
#
# Runs pgbench (pklimit_allow over KEYS random keys, the same with durable
# => false, the design record's plain statement, or SELECT 1) against a
# throwaway cluster while `perf record` samples
# every CPU (software clock events, 999 Hz), then splits the samples by who
# ran (the pklimit worker, the other postgres processes, most of them the
# callers' backends, pgbench, the rest, and idle) and by
# user or kernel mode, and turns them into microseconds of CPU per call.
# Lists the worker's and the backends' top functions.  Reported, not
# asserted.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"

CLIENTS=${CLIENTS:-64}
KEYS=${KEYS:-100000}
DURATION=${DURATION:-10}
SCRIPT=${SCRIPT:-pklimit}
MODE=${MODE:-simple}
export PKLIMIT_MAX_CONNECTIONS=$((CLIENTS + 20))
# room in memory for every key (the memory path's table, docs/memory.md)
export PKLIMIT_EXTRA_CONF="pklimit.memory_keys = $((KEYS < 10000 ? 10000 : KEYS + KEYS / 4))"

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
	if [ "$SCRIPT" = select1 ]; then
		echo "SELECT 1;"
	elif [ "$SCRIPT" = memory ]; then
		echo "SELECT pklimit_allow('k' || :k, 1000000000, '1 hour', durable => false);"
	elif [ "$SCRIPT" = plain ]; then
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
# the memory path reads each key in through the worker on its first call:
# 16 clients read in a sixteenth of the keys each before the warm-up
echo "SELECT count(*) FROM generate_series(:client_id * $(((KEYS + 15) / 16)) + 1, (:client_id + 1) * $(((KEYS + 15) / 16))) i
 WHERE i <= $KEYS AND pklimit_allow('k' || i, 1000000000, '1 hour', durable => false);" >"$B/read_in.sql"
chown -R $RUN_AS "$B"

[ "$SCRIPT" != memory ] || pgbench_run "$PKLIMIT_DB" -c 16 -j 2 -t 1 -f "$B/read_in.sql" >/dev/null
# a short warm-up starts the worker and fills the caches
pgbench_run "$PKLIMIT_DB" -M "$MODE" -c "$CLIENTS" -j 2 -T 2 -f "$B/script.sql" >/dev/null
wpid=$(q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker'")

# pgbench runs under perf record itself: not through bench/lib.sh's pgbench_run
perf record -q -a -g -F 999 -e cpu-clock -o "$B/perf.data" -- \
	runuser -u $RUN_AS -- env PATH="$PG_BIN:$PATH" pgbench -n -M "$MODE" -c "$CLIENTS" -j 2 -T "$DURATION" \
	-f "$B/script.sql" -h "$PGHOST" -p "$PGPORT" -U postgres "$PKLIMIT_DB" >"$B/pgbench.out" 2>&1
calls=$(pgbench_calls "$(cat "$B/pgbench.out")")

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

echo "profile: $SCRIPT over $KEYS keys, $CLIENTS clients, -M $MODE, $DURATION s, $calls calls, $(nproc) cores, 999 Hz samples"
awk -v calls="$calls" '
	{ us = $3 / 999 * 1000000 / calls; printf "  %-9s %-7s %6.1f us/call  (%4.1f %% of all samples)\n", $1, $2, us, 100 * $3 / $4 }
	$1 != "idle" { tot += $3 } END { printf "  %-17s %6.1f us/call (idle left out)\n", "all", tot / 999 * 1000000 / calls }' "$B/split.txt"
if [ -n "$wpid" ]; then
	echo "the worker's top functions (self time)"
	perf report -i "$B/perf.data" --pid "$wpid" --no-children --sort sym --stdio 2>/dev/null |
		grep -E '^ +[0-9.]+%' | head -n "${TOP:-15}" || true
fi
echo "every postgres process's top functions (self time)"
perf report -i "$B/perf.data" --comms postgres --no-children --sort sym --stdio 2>/dev/null |
	grep -E '^ +[0-9.]+%' | head -n "${TOP:-15}" || true
