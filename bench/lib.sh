# bench/lib.sh: what the benchmarks share, sourced after scripts/common.sh:
# one pgbench runner, the server's CPU time (measured one way, so figures of
# bench/run.sh and bench/compare.sh can stand side by side in
# bench/RESULTS.md), and the median and range of rounds.  Sourced, not run.

# pgbench_run DB [OPTION...]: pgbench as postgres on $PGHOST:$PGPORT (the
# options may name another -h, -p), without vacuum, as the cluster's user,
# with $PGOPTIONS; its output on stdout.  A pgbench that fails ends the
# benchmark, with the end of its output.
pgbench_run() {
	local db=$1 out conn=()
	shift
	[ -z "${PGHOST:-}" ] || conn+=(-h "$PGHOST")
	[ -z "${PGPORT:-}" ] || conn+=(-p "$PGPORT")
	out=$(as_user env PGOPTIONS="${PGOPTIONS:-}" pgbench -n "${conn[@]}" -U postgres \
		"$@" "$db" 2>&1) || {
		echo "bench: pgbench $* $db failed:" >&2
		echo "$out" | tail -n 5 >&2
		exit 1
	}
	echo "$out"
}

# pgbench_calls OUTPUT, pgbench_tps OUTPUT, pgbench_latency OUTPUT: the
# transactions it processed, per second, and their average latency (ms).
pgbench_calls() { echo "$1" | awk '/number of transactions actually processed/ { split($NF, a, "/"); print a[1] }'; }
pgbench_tps() { echo "$1" | awk '/^tps/ { print $3 }'; }
pgbench_latency() { echo "$1" | awk '/^latency average/ { print $4 }'; }

# process_ticks PID [REAPED]: a process's CPU time so far (user and system),
# in clock ticks; with REAPED, its reaped children's too.
process_ticks() {
	local f
	{ read -r -a f <"/proc/$1/stat"; } 2>/dev/null || { echo 0; return; }	# gone meanwhile
	echo $((f[13] + f[14] + (${2:-0} ? f[15] + f[16] : 0)))
}
TICK_US=$((1000000 / $(getconf CLK_TCK)))

# server_ticks PGDATA: the server's CPU time so far, in clock ticks: the
# postmaster, the children it has reaped (a pgbench session's backend, once
# it has exited) and its live children (the workers, the background
# processes).  A session's backend counts only once reaped: see
# sessions_gone.
server_ticks() {
	local pm c t
	pm=$(head -n 1 "$1/postmaster.pid")
	t=$(process_ticks "$pm" 1)
	for c in $(pgrep -P "$pm"); do t=$((t + $(process_ticks "$c"))); done
	echo "$t"
}

# server_children PGDATA: the postmaster's live children.
server_children() { pgrep -P "$(head -n 1 "$1/postmaster.pid")" | wc -l; }

# sessions_gone PGDATA BEFORE: wait (5 s at most) until the postmaster has
# no more children than BEFORE, so that the CPU time of the sessions that
# ended is in its reaped children's.
sessions_gone() {
	for _ in $(seq 1 50); do
		[ "$(server_children "$1")" -le "$2" ] && return
		sleep 0.1
	done
}

# cpu_per_call TICKS CALLS: microseconds of CPU per call.
cpu_per_call() { awk -v t="$1" -v us="$TICK_US" -v n="$2" 'BEGIN { printf "%.0f\n", (n > 0 ? t * us / n : 0) }'; }

# median: of the numbers on stdin, one a line.  med VALUES, most VALUES,
# least VALUES, total VALUES, range VALUES: of space-separated values (range:
# "lowest-highest").
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
med() { echo "$1" | tr ' ' '\n' | grep . | median; }
most() { echo "$1" | tr ' ' '\n' | grep . | sort -n | tail -n 1; }
least() { echo "$1" | tr ' ' '\n' | grep . | sort -n | head -n 1; }
total() { echo "$1" | tr ' ' '\n' | grep . | awk '{ s += $1 } END { print s }'; }
range() { echo "$1" | tr ' ' '\n' | grep . | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'; }

# pgb SCRIPT MODE: "transactions_per_s cpu_us_per_transaction" of one run of
# $B/SCRIPT.sql, $CLIENTS clients for $DURATION s, with pgbench -M MODE, on
# the cluster of $WORKDIR; a run that makes no call ends the benchmark.
pgb() {
	local out ticks0 before data=$WORKDIR/data
	before=$(server_children "$data")
	ticks0=$(server_ticks "$data")
	out=$(pgbench_run "$PKLIMIT_DB" -M "$2" -c "$CLIENTS" -j 2 -T "$DURATION" -f "$B/$1.sql")
	sessions_gone "$data" "$before"
	[ "$(pgbench_calls "$out")" -gt 0 ] || { echo "bench: no call made by $1" >&2; exit 1; }
	printf '%.0f %s\n' "$(pgbench_tps "$out")" \
		"$(cpu_per_call $(($(server_ticks "$data") - ticks0)) "$(pgbench_calls "$out")")"
}
