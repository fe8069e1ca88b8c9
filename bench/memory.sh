#!/usr/bin/env bash
# bench/memory.sh: does a session's memory stay flat over a million calls?
# As root on Debian 12:
#
#   bash bench/memory.sh          (CALLS=1000000, one session, 100,000 keys)
#
# One pgbench session makes CALLS calls of pklimit_allow over 100,000 keys on
# a throwaway cluster.  The private memory (Private_Clean + Private_Dirty of
# the private mappings in /proc/PID/smaps) of that session's backend and of
# the worker is printed every SAMPLE seconds, the first 2 s in; flat means no
# growth per call.  Reported, not asserted.  At about 0.6 ms a call, a million calls
# take about ten minutes on a 2-core machine.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"

CALLS=${CALLS:-1000000}
SAMPLE=${SAMPLE:-60}

install_packages
build_and_install
start_cluster
B=$WORKDIR/bench
mkdir -p "$B"
q -c "CREATE EXTENSION pklimit" 2>/dev/null
printf '%s\n' '\set k random(1, 100000)' \
	"SELECT pklimit_allow('k' || :k, 1000000000, '1 hour');" >"$B/allow.sql"
chown -R $RUN_AS "$B"

# private_kb PID: Private_Clean + Private_Dirty of the process's private
# mappings (heap and stack), in kB.  Shared mappings are left out: pages of
# shared_buffers only this process has touched count as private there.
private_kb() {
	awk '/^[0-9a-f]+-[0-9a-f]+ / { mine = (substr($2, 4, 1) == "p") }
		mine && /^Private_(Clean|Dirty):/ { s += $2 } END { print s }' "/proc/$1/smaps"
}

pgbench_run "$PKLIMIT_DB" -c 1 -t "$CALLS" -f "$B/allow.sql" >"$B/pgbench.out" &
bench=$!
sleep 2
bpid=$(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' LIMIT 1")
wpid=$(q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker' LIMIT 1")
echo "pklimit memory over $CALLS calls in one session: private memory (kB)"
printf '  %8s %10s %10s\n' seconds backend worker
start=$(date +%s)
while kill -0 "$bench" 2>/dev/null; do
	b=$(private_kb "$bpid" 2>/dev/null) || break
	w=$(private_kb "$wpid" 2>/dev/null) || w=-
	printf '  %8d %10s %10s\n' $(($(date +%s) - start + 2)) "$b" "$w"
	for _ in $(seq 1 "$SAMPLE"); do kill -0 "$bench" 2>/dev/null && sleep 1; done
done
wait "$bench"
grep -E 'number of transactions actually processed|latency average|^tps' "$B/pgbench.out" | sed 's/^/  /'
exit 0
