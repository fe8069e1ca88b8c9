#!/usr/bin/env bash
# bench/purge.sh: pklimit_allow latency while a million expired rows are
# purged, pklimit_purge (batches committed one by one, interleaved with
# calls) side by side with the plain single DELETE a DBA would otherwise run.
# Reports, asserts nothing.  As root on Debian 12:
#
#   bash bench/purge.sh            (ROWS=1000000 CLIENTS=4 by default)
#
# The pgbench clients call pklimit_allow on the very keys being purged
# (returning users whose old window expired), which is where a long purge
# transaction would make them wait.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"

ROWS=${ROWS:-1000000}
CLIENTS=${CLIENTS:-4}
BEFORE=${BEFORE:-10}

install_packages
build_and_install
start_cluster
q -c 'CREATE EXTENSION pklimit'
B=$WORKDIR/bench
mkdir -p "$B" && chown $RUN_AS "$B"
cat >"$B/allow.sql" <<SQL
\set id random(1, $ROWS)
SELECT pklimit_allow('exp-' || :id, 100, '1 hour');
SQL

fill() {
	q -c "TRUNCATE platformkit_limits" -c "INSERT INTO platformkit_limits
		SELECT 'g:exp-' || i, clock_timestamp() - interval '3 days', clock_timestamp() - interval '2 days', 1,
		       clock_timestamp() - interval '2 days' FROM generate_series(1, $ROWS) i" -c "VACUUM ANALYZE platformkit_limits"
}

# p99 and max latency (ms) of the transactions that ended between two epochs
# (microseconds), from pgbench per-transaction logs in directory $1.
pct() {
	cat "$1"/pgbench_log.* | awk -v from="$2" -v to="$3" '
		{ t = $5 * 1000000 + $6; if (t >= from && t <= to) print $3 }' |
		sort -n | awk '{ a[NR] = $1 } END {
			if (NR == 0) { print "n/a n/a 0"; exit }
			i = int(NR * 0.99); if (i < 1) i = 1
			printf "%.2f %.2f %d\n", a[i] / 1000, a[NR] / 1000, NR }'
}

now_us() { date +%s%6N; }

# run LABEL PURGE_SQL: pgbench for BEFORE s, then the purge while it goes on.
run() {
	local label=$1 purge=$2 logdir=$B/${1//[^a-zA-Z]/} t0 t1 t2 warn0 warn1 pid
	mkdir -p "$logdir" && chown $RUN_AS "$logdir"
	fill
	warn0=$(grep -c 'pklimit store unavailable' "$WORKDIR/server.log" || true)
	t0=$(now_us)
	pgbench_run "$PKLIMIT_DB" -c "$CLIENTS" -j 2 -T $((BEFORE + 600)) -l \
		--log-prefix="$logdir/pgbench_log" -f "$B/allow.sql" >/dev/null 2>&1 &
	pid=$!
	sleep "$BEFORE"
	t1=$(now_us)
	q -c "$purge" >/dev/null
	t2=$(now_us)
	sleep 2
	pkill -TERM -f "$B/allow.sql" || true	# background jobs ignore SIGINT
	wait $pid 2>/dev/null || true
	warn1=$(grep -c 'pklimit store unavailable' "$WORKDIR/server.log" || true)
	read -r b99 bmax bn <<<"$(pct "$logdir" "$t0" "$t1")"
	read -r d99 dmax dn <<<"$(pct "$logdir" "$t1" "$t2")"
	printf '%-22s %9.1f s %8s %8s %8s %8s %8s %10s\n' "$label" "$(echo "($t2 - $t1) / 1000000" | bc -l)" \
		"$b99" "$bmax" "$d99" "$dmax" "$dn" "$((warn1 - warn0))"
	echo "$d99" >"$logdir.p99"
}

echo "pklimit purge benchmark: $ROWS expired rows, $CLIENTS pgbench clients calling pklimit_allow on those keys"
printf '%-22s %11s %8s %8s %8s %8s %8s %10s\n' "purge" "took" "p99 ms" "max ms" "p99 ms" "max ms" "calls" "unavailable"
printf '%-22s %11s %17s %26s\n' "" "" "(before)" "(during the purge)"
run "pklimit_purge()" "SELECT pklimit_purge()"
run "one DELETE" "DELETE FROM platformkit_limits WHERE window_end < now() - interval '1 day'"
echo "p99 during the purge: pklimit_purge / one DELETE = $(echo "scale=2; $(cat "$B/pklimitpurge.p99") / $(cat "$B/oneDELETE.p99")" | bc -l)"
