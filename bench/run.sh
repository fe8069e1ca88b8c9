#!/usr/bin/env bash
# bench/run.sh: pklimit measured side by side, in one run, with what a user
# would otherwise write.  As root on Debian 12:
#
#   bash bench/run.sh          (DURATION=8 s per measurement, ROUNDS=3)
#   ONLY=memory bash bench/run.sh   the memory path's scenario alone, with
#                              SELECT 1, the plain statement, the durable
#                              call and Redis beside it
#
# Every scenario runs its variants alternately, ROUNDS times, and reports the
# median; ratios are of medians from this one run.  Reported, not asserted.
#
#   select1   SELECT 1: the round-trip floor
#   plain     the design record's statement, INSERT ... ON CONFLICT (key) DO
#             UPDATE ... RETURNING count, in autocommit
#   pklimit   SELECT pklimit_allow(key, max, window)
#   dblink    the plain statement through dblink, one persistent connection
#             per session to the same database: the autonomous-transaction
#             baseline a user would otherwise write
#   redis     INCR + PEXPIRE in one Lua script (redis-benchmark), when
#             REDIS is not 0
#   algorithms  pklimit_allow with algorithm => 'gcra' and 'sliding'
#             (docs/algorithms.md), all other options the defaults, beside
#             the default fixed window, on one hot key and over 100,000
#             keys, with pgbench -M simple and -M prepared
#   two limits  a request guarded by two limits (an account and an
#             address): one pklimit_allow_all on both keys, recorded
#             together, beside two pklimit_allow calls
#   stats     pklimit_allow with pklimit_stats counting (the default)
#             beside the same calls with pklimit.track_stats off
#   scale     64 and 256 clients on one hot key and over 100,000 keys, and
#             8 databases busy at once (8 clients each)
#   async     pklimit.asynchronous_commit on, 64 clients on one hot key,
#             beside Redis at 64 clients
#   memory    pklimit_allow with durable => false (docs/memory.md), decided
#             in the calling backend, at pklimit.memory_keys = MEMORY_KEYS
#             (default 131072): 1 client and 8 clients on one hot key, 64
#             over 100,000 keys, with -M simple and -M prepared, beside
#             SELECT 1 (both), the plain statement and the durable call; 64
#             clients on one hot key beside Redis.  Every key is read in
#             once before.  Each figure prints the rows flushed per second,
#             the largest flush lag seen (pklimit_stats, sampled every
#             0.1 s) and memory_fallbacks: it counts only while the lag
#             stays within 2 x pklimit.flush_interval and no call falls back
#
# Every measurement also reports the server's CPU time per call (the
# postmaster and all its processes, callers' backends and workers alike,
# user and system time from /proc) and the 99th percentile latency (from
# pgbench's per-transaction log).
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"
shopt -s inherit_errexit

DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-8}
REDIS=${REDIS:-1}
ONLY=${ONLY:-}
MEMORY_KEYS=${MEMORY_KEYS:-131072}
# 256 clients; a worker for each of 9 databases, beside pg_cron's launcher;
# room in memory for 100,000 keys and the hot one
export PKLIMIT_MAX_CONNECTIONS=300
export PKLIMIT_EXTRA_CONF="max_worker_processes = 16
pklimit.max_workers = 12
pklimit.memory_keys = $MEMORY_KEYS"

extra=()
[ "$REDIS" != 0 ] && extra=(redis-server redis-tools)
install_packages bc "${extra[@]}"
build_and_install
start_cluster
B=$WORKDIR/bench
mkdir -p "$B" && chown $RUN_AS "$B"

q <<'SQL'
CREATE EXTENSION pklimit;
CREATE EXTENSION dblink;
CREATE TABLE plain_limits (key text PRIMARY KEY, window_start timestamptz NOT NULL,
	window_end timestamptz NOT NULL, count bigint NOT NULL);
SQL
q -c "SELECT pg_catalog.set_config('synchronous_commit', current_setting('synchronous_commit'), false)" >/dev/null

PLAIN="INSERT INTO plain_limits AS l (key, window_start, window_end, count)
 SELECT k, b.ws, b.ws + interval '1 hour', 1
 FROM (SELECT date_bin('1 hour', clock_timestamp(), '1970-01-01') AS ws) b
 ON CONFLICT (key) DO UPDATE SET
 count = CASE WHEN l.window_start = excluded.window_start THEN l.count + 1 ELSE 1 END,
 window_start = excluded.window_start, window_end = excluded.window_end
 RETURNING count"
CONN="host=$PGHOST port=$PGPORT dbname=$PKLIMIT_DB user=postgres"

# script NAME KEYEXPR BODY...: a pgbench script file $B/NAME.sql
script() {
	local name=$1 keyexpr=$2
	shift 2
	{
		[ "$keyexpr" = hot ] || echo "\\set k random(1, $keyexpr)"
		printf '%s\n' "$@"
	} >"$B/$name.sql"
}
key() { if [ "$1" = hot ]; then echo "'hot'"; else echo "'k' || :k"; fi; }
for ks in hot 100000; do
	k=$(key $ks)
	script "select1_$ks" hot "SELECT 1;"
	script "plain_$ks" "$ks" "$(echo "$PLAIN" | sed "s/SELECT k,/SELECT $k,/" | tr '\n' ' ');"
	script "pklimit_$ks" "$ks" "SELECT pklimit_allow($k, 1000000000, '1 hour');"
	# a key of its own for each algorithm: a key has one state, so a gcra
	# call on a fixed window's key would count in the fixed window
	for a in gcra sliding; do
		if [ "$ks" = hot ]; then ak="'hot-$a'"; else ak="'$a-' || :k"; fi
		script "${a}_$ks" "$ks" "SELECT pklimit_allow($ak, 1000000000, '1 hour', algorithm => '$a');"
	done
	# the memory path's keys of their own too: a durable call on a key in
	# memory takes it out of memory first
	if [ "$ks" = hot ]; then mk="'mem-hot'"; else mk="'mem-' || :k"; fi
	script "memory_$ks" "$ks" "SELECT pklimit_allow($mk, 1000000000, '1 hour', durable => false);"
	script "dblink_$ks" "$ks" \
		"SELECT CASE WHEN dblink_get_connections() IS NULL THEN dblink_connect('c', '$CONN') END \\gset" \
		"SELECT * FROM dblink('c', format(\$q\$$(echo "$PLAIN" | sed "s/SELECT k,/SELECT %L,/" | tr '\n' ' ')\$q\$, $k)) AS t(count bigint);"
done
script pklimit_rb hot "BEGIN;" "SELECT pklimit_allow('hot', 1000000000, '1 hour');" "ROLLBACK;"
script dblink_rb hot \
	"SELECT CASE WHEN dblink_get_connections() IS NULL THEN dblink_connect('c', '$CONN') END \\gset" \
	"BEGIN;" \
	"SELECT * FROM dblink('c', format(\$q\$$(echo "$PLAIN" | sed "s/SELECT k,/SELECT %L,/" | tr '\n' ' ')\$q\$, 'hot')) AS t(count bigint);" \
	"ROLLBACK;"
script allow_all 100000 "\\set a random(1, 100000)" \
	"SELECT pklimit_allow_all(ARRAY['acct' || :k, 'addr' || :a], ARRAY[1000000000, 1000000000], ARRAY['1 hour', '1 hour']::interval[]);"
script two_singles 100000 "\\set a random(1, 100000)" \
	"SELECT pklimit_allow('acct' || :k, 1000000000, '1 hour');" \
	"SELECT pklimit_allow('addr' || :a, 1000000000, '1 hour');"
script pklimit_1k 1000 "SELECT pklimit_allow('t' || :k, 1000000000, '1 hour');"
script pklimit_1m 1000000 "SELECT pklimit_allow('t' || :k, 1000000000, '1 hour');"
# each of 16 clients reads in its sixteenth of the memory path's 100,000 keys
script memory_warm hot "SELECT count(*) FROM generate_series(:client_id * 6250 + 1, (:client_id + 1) * 6250) i
 WHERE pklimit_allow('mem-' || i, 1000000000, '1 hour', durable => false);"
chown -R $RUN_AS "$B"


# p99 of pgbench per-transaction logs (latency in microseconds, field 3), ms
p99() { cat "$@" | awk '{ print $3 }' | sort -n |
	awk '{ a[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; printf "%.2f\n", a[i] / 1000 }'; }

# memory_stats: "memory_calls memory_fallbacks rows_flushed epoch" of this
# database now
memory_stats() {
	q -F ' ' -c "SELECT memory_calls, memory_fallbacks, rows_flushed, extract(epoch FROM clock_timestamp())
		FROM pklimit_stats WHERE datname = current_database()"
}
# lag_watch: the flush lag (ms) every 0.1 s for DURATION s, one a line, in
# one session; closed memory (NULL) as 999999
lag_watch() {
	local sample="SELECT coalesce(flush_lag_ms, 999999), pg_sleep(0.1) FROM pklimit_stats WHERE datname = current_database();"
	seq 1 $((DURATION * 10)) | sed "s/.*/$sample/" | q -F ' '
}
# memory_delta STATS0 STATS1 CALLS LAGFILE: "largest_lag_ms fallbacks
# rows_flushed_per_s in_memory" (in_memory: the share of CALLS decided in
# memory)
memory_delta() {
	awk -v a="$1" -v b="$2" -v calls="$3" '{ if ($1 > lag) lag = $1 }
		END { split(a, x, " "); split(b, y, " ")
			printf "%.0f %d %.0f %.3f", lag, y[2] - x[2], (y[3] - x[3]) / (y[4] - x[4]), (y[1] - x[1]) / calls }' "$4"
}

# async on|off: pklimit.asynchronous_commit for the whole server, reloaded
ASYNC=off
async() {
	[ "$1" = "$ASYNC" ] && return
	q -c "ALTER SYSTEM SET pklimit.asynchronous_commit = $1" -c "SELECT pg_reload_conf()" >/dev/null
	ASYNC=$1
}

# pgb SCRIPT CLIENTS [DB]: one pgbench run (PGB_JOBS threads, default 2);
# prints "tps latency_ms cpu_us_per_transaction p99_ms".  SCRIPT ending in
# _nostats: the script without it, with pklimit.track_stats off; ending in
# _async: the script without it, with pklimit.asynchronous_commit on; ending
# in _prepared: the script without it, with pgbench -M prepared (else the
# simple protocol).  A memory_ script (the memory path) also prints, from
# pklimit_stats, "largest_lag_ms fallbacks rows_flushed_per_s in_memory"
# (memory_delta).  A pgbench that fails, or makes no call, ends the
# benchmark.  The server's CPU time is bench/lib.sh's server_ticks, the
# sessions' backends counted once they have exited.
pgb() {
	local opts= db=${3:-$PKLIMIT_DB} script=${1%_nostats} before ticks0 out calls logs mode=simple
	local watch= stats0 stats1 mem= data=$WORKDIR/data
	[[ $1 == *_nostats ]] && opts="-c pklimit.track_stats=off"
	[[ $1 == *_prepared ]] && mode=prepared
	script=${script%_prepared}
	script=${script%_async}
	if [[ $1 == *_async ]]; then async on; else async off; fi
	logs=$(mktemp -d -p "$B") && chown $RUN_AS "$logs"
	before=$(server_children "$data")
	if [[ $script == memory_* ]]; then
		stats0=$(memory_stats)
		lag_watch >"$logs/lag" &
		watch=$!
	fi
	ticks0=$(server_ticks "$data")
	out=$(cd "$logs" && PGOPTIONS="$opts" pgbench_run "$db" -M "$mode" -c "$2" \
		-j "${PGB_JOBS:-$(($2 < 2 ? 1 : 2))}" -T "$DURATION" -f "$B/$script.sql" \
		-l --log-prefix="$logs/log")
	# rows flushed over pgbench's run only (the lag's samples may run on a
	# little after it)
	if [ -n "$watch" ]; then
		stats1=$(memory_stats)
		wait "$watch"
	fi
	# the sessions' backends exit after pgbench: their CPU time counts once reaped
	sessions_gone "$data" "$before"
	calls=$(pgbench_calls "$out")
	[ "${calls:-0}" -gt 0 ] || { echo "bench: no call made on $1 with $2 clients in $db" >&2; exit 1; }
	[ -z "$watch" ] || mem=" $(memory_delta "$stats0" "$stats1" "$calls" "$logs/lag")"
	printf "%.1f %.3f %s %s%s\n" "$(pgbench_tps "$out")" "$(pgbench_latency "$out")" \
		"$(cpu_per_call $(($(server_ticks "$data") - ticks0)) "$calls")" "$(p99 "$logs"/log.*)" "$mem"
	rm -rf "$logs"
}


# measure LABEL CLIENTS FIELD SCRIPT...: alternate the scripts ROUNDS times;
# FIELD 1 is tps, 2 latency.  Sets M[script] to the median of that field,
# CPU[script] to the median CPU time per call (us) and P99[script] to the
# median p99 latency (ms).  A memory_ script also sets LAG[script] to the
# largest flush lag of its rounds (ms), FB[script] to their fallbacks in
# all, FLUSHED[script] to the median rows flushed per second and
# INMEM[script] to the smallest share of calls decided in memory.  The
# script redis is redis_run's Lua script instead of pgbench.
declare -A M CPU P99 LAG FB FLUSHED INMEM
measure() {
	local clients=$2 field=$3 s r res
	shift 3
	declare -A vals cpus p99s lags fbs flushed inmem
	for r in $(seq 1 "$ROUNDS"); do
		for s in "$@"; do
			[[ $s == pklimit_hot* || $s == pklimit_100000* ]] && q -c "SELECT pklimit_forget('hot')" >/dev/null
			[[ $s == gcra_hot* || $s == sliding_hot* ]] && q -c "SELECT pklimit_forget('hot-${s%%_*}')" >/dev/null
			if [ "$s" = redis ]; then res=$(redis_run "$clients"); else res=$(pgb "$s" "$clients"); fi
			vals[$s]+="$(echo "$res" | cut -d' ' -f"$field") "
			cpus[$s]+="$(echo "$res" | cut -d' ' -f3) "
			p99s[$s]+="$(echo "$res" | cut -d' ' -f4) "
			if [[ $s == memory_* ]]; then
				lags[$s]+="$(echo "$res" | cut -d' ' -f5) "
				fbs[$s]+="$(echo "$res" | cut -d' ' -f6) "
				flushed[$s]+="$(echo "$res" | cut -d' ' -f7) "
				inmem[$s]+="$(echo "$res" | cut -d' ' -f8) "
			fi
		done
	done
	for s in "$@"; do
		M[$s]=$(med "${vals[$s]}")
		CPU[$s]=$(med "${cpus[$s]}")
		P99[$s]=$(med "${p99s[$s]}")
		[[ $s == memory_* ]] || continue
		LAG[$s]=$(most "${lags[$s]}")
		FB[$s]=$(total "${fbs[$s]}")
		FLUSHED[$s]=$(med "${flushed[$s]}")
		INMEM[$s]=$(least "${inmem[$s]}")
	done
}
ratio() { echo "scale=2; $1 / $2" | bc -l; }
line() { printf '  %-52s %12s\n' "$1" "$2"; }
# row NAME SCRIPT: the measured value, CPU per call and p99 of a script
row() { printf '  %-36s %12s %10s us/call %8s ms p99\n' "$1" "${M[$2]}" "${CPU[$2]}" "${P99[$2]}"; }
# bounded SCRIPT: "counts" if a memory_ script's figure counts: the flush lag
# stayed within 2 x pklimit.flush_interval (FLUSH_MS) and no call fell back
bounded() {
	if [ "${LAG[$1]}" -le $((2 * FLUSH_MS)) ] && [ "${FB[$1]}" -eq 0 ]; then echo counts; else echo "does NOT count"; fi
}
# mrow NAME SCRIPT: row, then the flush's figures and whether it counts
mrow() {
	row "$1" "$2"
	printf '  %-36s %s\n' "" "flushed ${FLUSHED[$2]} rows/s, flush lag <= ${LAG[$2]} ms, ${FB[$2]} fallbacks, ${INMEM[$2]} in memory: $(bounded "$2")"
}

echo "pklimit benchmark: $(nproc) cores, PostgreSQL $(q -c 'SHOW server_version' | cut -d' ' -f1), synchronous_commit = $(q -c 'SHOW synchronous_commit'), $DURATION s x $ROUNDS rounds, medians"

# fill N: the table holds N keys, no other
fill() {
	q -c "TRUNCATE platformkit_limits" -c "INSERT INTO platformkit_limits
		SELECT 'g:t' || i, b.ws, b.ws + interval '1 hour', 1, clock_timestamp()
		FROM generate_series(1, $1) i, (SELECT date_bin('1 hour', clock_timestamp(), '1970-01-01') ws) b" \
		-c "VACUUM ANALYZE platformkit_limits" >/dev/null
}

# ONLY=memory: the memory path alone (its durable and plain figures beside it)
if [ "$ONLY" != memory ]; then
measure lat 1 2 select1_hot plain_hot pklimit_hot dblink_hot
echo "1 client, one hot key: latency (ms)"
for s in select1_hot plain_hot pklimit_hot dblink_hot; do row "${s%_hot}" "$s"; done
LAT=$(ratio "${M[pklimit_hot]}" "${M[plain_hot]}")

measure hot "$CLIENTS" 1 select1_hot plain_hot pklimit_hot
echo "$CLIENTS clients, one hot key: calls/s"
for s in select1_hot plain_hot pklimit_hot; do row "${s%_hot}" "$s"; done
HOT=$(ratio "${M[pklimit_hot]}" "${M[plain_hot]}")
HOT_TPS=${M[pklimit_hot]}

measure many "$CLIENTS" 1 plain_100000 pklimit_100000
echo "$CLIENTS clients over 100,000 keys: calls/s"
for s in plain_100000 pklimit_100000; do row "${s%_100000}" "$s"; done
MANY=$(ratio "${M[pklimit_100000]}" "${M[plain_100000]}")

# the algorithms side by side, default options: one hot key, 100,000 keys,
# with the simple and the extended protocol (drivers that prepare)
declare -A ALG
for ks in hot 100000 hot_prepared 100000_prepared; do
	k=${ks%_prepared}
	measure "alg_$ks" "$CLIENTS" 1 "pklimit_$ks" "gcra_$ks" "sliding_$ks"
	if [ "$k" = hot ]; then where="one hot key"; else where="over 100,000 keys"; fi
	[ "$k" = "$ks" ] && mode=simple || mode=prepared
	echo "$CLIENTS clients $where, each algorithm, -M $mode: calls/s"
	row "fixed (the default)" "pklimit_$ks"
	row "gcra" "gcra_$ks"
	row "sliding" "sliding_$ks"
	for a in gcra sliding; do
		ALG[${a}_$ks]=$(ratio "${M[${a}_$ks]}" "${M[pklimit_$ks]}")
		ALG[${a}_cpu_$ks]=$(ratio "${CPU[${a}_$ks]}" "${CPU[pklimit_$ks]}")
	done
done

# many clients: 64 and 256, on one hot key and over 100,000 keys
declare -A SCALE
for c in 64 256; do
	measure "hot$c" "$c" 1 plain_hot pklimit_hot
	echo "$c clients, one hot key: calls/s"
	for s in plain_hot pklimit_hot; do row "${s%_hot}" "$s"; done
	SCALE[hot$c]=$(ratio "${M[pklimit_hot]}" "${M[plain_hot]}")
	measure "many$c" "$c" 1 plain_100000 pklimit_100000
	echo "$c clients over 100,000 keys: calls/s"
	for s in plain_100000 pklimit_100000; do row "${s%_100000}" "$s"; done
	SCALE[many$c]=$(ratio "${M[pklimit_100000]}" "${M[plain_100000]}")
	SCALE[cpu$c]=$(ratio "${CPU[pklimit_100000]}" "${CPU[plain_100000]}")
done

# eight databases busy at once, 8 clients each, pklimit over 100,000 keys in
# each, beside the same 64 clients in one database
for d in 1 2 3 4 5 6 7 8; do
	q -c "CREATE DATABASE bench_db$d" >/dev/null
	q -d "bench_db$d" -c "SET client_min_messages = error; CREATE EXTENSION pklimit" \
		-c "SELECT pklimit_allow('warm-up', 1, '1 hour')" >/dev/null	# its worker starts
done
declare -A DBS
for r in $(seq 1 "$ROUNDS"); do
	DBS[one]+="$(pgb pklimit_100000 64 | cut -d' ' -f1) "
	pids=()
	for d in 1 2 3 4 5 6 7 8; do
		(PGB_JOBS=1 pgb pklimit_100000 8 "bench_db$d" >"$B/db$d.out") &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p"; done	# set -e: a failed one ends the benchmark
	tot=0 worst=0
	for d in 1 2 3 4 5 6 7 8; do
		read -r t _ _ p <"$B/db$d.out"
		tot=$(echo "$tot + $t" | bc -l)
		worst=$(echo "if ($p > $worst) $p else $worst" | bc -l)
	done
	DBS[tps]+="$tot " DBS[p99]+="$worst "
done
DBS_TPS=$(med "${DBS[tps]}")
DBS_P99=$(med "${DBS[p99]}")
DBS_ONE=$(med "${DBS[one]}")
echo "8 databases busy at once, 8 clients each over 100,000 keys, beside 1 database with 64: calls/s (all)"
line "8 databases x 8 clients (p99: the worst database's)" "$DBS_TPS ($DBS_P99 ms p99)"
line "1 database x 64 clients" "$DBS_ONE"
MULTI=$(ratio "$DBS_TPS" "$DBS_ONE")

# pklimit.asynchronous_commit: 64 clients on one hot key, on and off
measure async 64 1 pklimit_hot_async pklimit_hot
async off
ASYNC_HOT64=${M[pklimit_hot_async]}
echo "64 clients, one hot key, pklimit.asynchronous_commit on and off: calls/s"
row "pklimit, asynchronous commit" pklimit_hot_async
row "pklimit" pklimit_hot
ASYNC_GAIN=$(ratio "${M[pklimit_hot_async]}" "${M[pklimit_hot]}")

measure rb "$CLIENTS" 1 pklimit_rb dblink_rb
echo "$CLIENTS clients, one hot key, inside transactions that roll back: calls/s"
for s in pklimit_rb dblink_rb; do row "${s%_rb}" "$s"; done
RB=$(ratio "${M[pklimit_rb]}" "${M[dblink_rb]}")

measure two "$CLIENTS" 1 allow_all two_singles
echo "$CLIENTS clients over 100,000 keys, two limits per request: requests/s"
row "pklimit_allow_all on both keys" allow_all
row "two pklimit_allow calls" two_singles
TWO=$(ratio "${M[allow_all]}" "${M[two_singles]}")
measure twolat 1 2 allow_all two_singles
echo "1 client, two limits per request: latency (ms)"
row "pklimit_allow_all on both keys" allow_all
row "two pklimit_allow calls" two_singles
TWOLAT=$(ratio "${M[allow_all]}" "${M[two_singles]}")

measure stats "$CLIENTS" 1 pklimit_hot pklimit_hot_nostats
echo "$CLIENTS clients, one hot key, pklimit_stats counting and not: calls/s"
row "pklimit.track_stats = on" pklimit_hot
row "pklimit.track_stats = off" pklimit_hot_nostats
STATS_HOT=$(ratio "${M[pklimit_hot]}" "${M[pklimit_hot_nostats]}")
measure stats_many "$CLIENTS" 1 pklimit_100000 pklimit_100000_nostats
echo "$CLIENTS clients over 100,000 keys, pklimit_stats counting and not: calls/s"
row "pklimit.track_stats = on" pklimit_100000
row "pklimit.track_stats = off" pklimit_100000_nostats
STATS_MANY=$(ratio "${M[pklimit_100000]}" "${M[pklimit_100000_nostats]}")

# table size: the same calls on a table of 1,000 keys and one of 1,000,000
declare -A T
for r in $(seq 1 "$ROUNDS"); do
	fill 1000; T[1k]+="$(pgb pklimit_1k "$CLIENTS" | cut -d' ' -f1) "
	fill 1000000; T[1m]+="$(pgb pklimit_1m "$CLIENTS" | cut -d' ' -f1) "
done
K1=$(med "${T[1k]}")
K1M=$(med "${T[1m]}")
echo "$CLIENTS clients, random keys of a table of 1,000 and of 1,000,000 rows: calls/s"
line "1,000 keys" "$K1"; line "1,000,000 keys" "$K1M"
SIZE=$(ratio "$K1M" "$K1")

# backend memory over many calls in one session: private memory (kB) of the
# pgbench session's backend early and at the end, and of the worker
# private_kb PID: Private_Clean + Private_Dirty of the process's private
# mappings (heap and stack), in kB.  Shared mappings are left out: pages of
# shared_buffers only this process has touched count as private there.
private_kb() {
	awk '/^[0-9a-f]+-[0-9a-f]+ / { mine = (substr($2, 4, 1) == "p") }
		mine && /^Private_(Clean|Dirty):/ { s += $2 } END { print s }' "/proc/$1/smaps"
}
as_user pgbench -n -c 1 -T $((DURATION * 4)) -f "$B/pklimit_100000.sql" \
	-h "$PGHOST" -p "$PGPORT" -U postgres "$PKLIMIT_DB" >"$B/mem.out" 2>&1 &
sleep 2
bpid=$(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' LIMIT 1")
mem0=$(private_kb "$bpid")
sleep $((DURATION * 4 - 4))
mem1=$(private_kb "$bpid")
wait
calls=$(awk '/number of transactions actually processed/ { print $NF }' "$B/mem.out")
wpid=$(q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pklimit worker' LIMIT 1")
echo "memory"
line "backend private memory after 2 s and at the end (kB)" "$mem0 -> $mem1"
line "calls in that session" "$calls"
line "worker private memory (kB)" "$(private_kb "$wpid")"
line "shared memory pklimit takes (bytes)" "$(q -c "SELECT sum(allocated_size) FROM pg_shmem_allocations WHERE name LIKE 'pklimit%'")"

fi

# redis_run CLIENTS: the Lua script on one hot key, DURATION x 100,000 calls,
# printed as pgb prints: "calls/s latency_ms cpu_us_per_call p99_ms", the
# CPU being redis-server's own
redis_run() {
	local ticks0 n=$((DURATION * 100000))
	ticks0=$(process_ticks "$REDIS_PID")
	redis-benchmark -s "$B/redis.sock" -c "$1" -n "$n" --csv EVAL "$LUA" 1 hot 2>/dev/null >"$B/redis.csv"
	tail -n 1 "$B/redis.csv" | awk -F '","' -v cpu="$(cpu_per_call $(($(process_ticks "$REDIS_PID") - ticks0)) "$n")" \
		'{ printf "%.1f %.3f %s %.2f\n", $2, $3, cpu, $7 }'
}

if [ "$REDIS" != 0 ] && command -v redis-server >/dev/null; then
	as_user redis-server --port 0 --unixsocket "$B/redis.sock" --save '' --appendonly no --daemonize yes \
		--pidfile "$B/redis.pid" --logfile "$B/redis.log" >/dev/null
	trap 'kill "$(cat "$B/redis.pid" 2>/dev/null)" 2>/dev/null || true; stop_cluster' EXIT
	sleep 1
	REDIS_PID=$(cat "$B/redis.pid")
	LUA="local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('PEXPIRE', KEYS[1], 3600000) end return c"
	rps=() rps64=()
	for r in $(seq 1 "$ROUNDS"); do
		rps+=("$(redis-benchmark -s "$B/redis.sock" -c "$CLIENTS" -n 200000 -q EVAL "$LUA" 1 hot 2>/dev/null |
			grep -o '[0-9.]* requests per second' | cut -d' ' -f1)")
		rps64+=("$(redis-benchmark -s "$B/redis.sock" -c 64 -n 200000 -q EVAL "$LUA" 1 hot 2>/dev/null |
			grep -o '[0-9.]* requests per second' | cut -d' ' -f1)")
	done
	REDIS_RPS=$(printf '%s\n' "${rps[@]}" | median)
	REDIS_RPS64=$(printf '%s\n' "${rps64[@]}" | median)
	echo "one hot key, Redis INCR + PEXPIRE (Lua): calls/s"
	line "redis, $CLIENTS clients (no fsync: appendonly no)" "$REDIS_RPS"
	line "redis, 64 clients" "$REDIS_RPS64"
fi

# The memory path, last, so every figure above is of a server with nothing
# in memory.  The 8 databases go first: a database with a worker keeps its
# share of pklimit.memory_keys (memory_keys / pklimit.max_workers) for
# itself, so beside them this one could hold only what their shares leave.
# Then a clean table, and every key read in once (through the worker)
# before anything is measured.
for d in 1 2 3 4 5 6 7 8; do q -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bench_db$d WITH (FORCE)" >/dev/null; done
fill 0
as_user pgbench -n -c 16 -j 2 -t 1 -f "$B/memory_warm.sql" -h "$PGHOST" -p "$PGPORT" -U postgres "$PKLIMIT_DB" >/dev/null
q -c "SELECT pklimit_allow('mem-hot', 1000000000, '1 hour', durable => false)" >/dev/null
FLUSH_MS=$(q -c "SELECT setting FROM pg_settings WHERE name = 'pklimit.flush_interval'")
held=$(q -c "SELECT memory_keys FROM pklimit_stats WHERE datname = current_database()")
[ "$held" -ge 100001 ] || echo "bench: only $held of the memory path's 100,001 keys are in memory" >&2
echo "the memory path (durable => false): pklimit.memory_keys = $MEMORY_KEYS, pklimit.flush_interval = $FLUSH_MS ms, $held keys in memory"

# mname SCRIPT: how the memory path's tables name a script
mname() {
	local n=${1%_prepared} mode=simple
	[ "$n" = "$1" ] || mode=prepared
	n=${n%_hot}
	n=${n%_100000}
	case $n in
	redis) echo "redis, Lua (its own CPU)" ;;
	pklimit) echo "pklimit, durable, -M $mode" ;;
	*) echo "$n, -M $mode" ;;
	esac
}
mrows() { for s in "$@"; do if [[ $s == memory_* ]]; then mrow "$(mname "$s")" "$s"; else row "$(mname "$s")" "$s"; fi; done; }
# memory_ratios LABEL KEYS: the memory path over SELECT 1 (the measured
# value and CPU per call) in each protocol, and whether the figure counts
declare -A MEM
memory_ratios() {
	local p
	for p in "" _prepared; do
		MEM[$1$p]=$(ratio "${M[memory_$2$p]}" "${M[select1_hot$p]}")
		MEM[cpu_$1$p]=$(ratio "${CPU[memory_$2$p]}" "${CPU[select1_hot$p]}")
		MEM[ok_$1$p]=$(bounded "memory_$2$p")
	done
}
MS=(select1_hot select1_hot_prepared memory_hot memory_hot_prepared)
measure mem_lat 1 2 "${MS[@]}" plain_hot pklimit_hot
echo "1 client, one hot key, the memory path: latency (ms)"
mrows "${MS[@]}" plain_hot pklimit_hot
memory_ratios lat hot
measure mem_hot "$CLIENTS" 1 "${MS[@]}" plain_hot pklimit_hot
echo "$CLIENTS clients, one hot key, the memory path: calls/s"
mrows "${MS[@]}" plain_hot pklimit_hot
memory_ratios hot hot
MEM[hot_plain]=$(ratio "${M[memory_hot]}" "${M[plain_hot]}")
MEM[hot_durable]=$(ratio "${M[memory_hot]}" "${M[pklimit_hot]}")
MS=(select1_hot select1_hot_prepared memory_100000 memory_100000_prepared)
measure mem_many 64 1 "${MS[@]}" plain_100000 pklimit_100000
echo "64 clients over 100,000 keys, the memory path: calls/s"
mrows "${MS[@]}" plain_100000 pklimit_100000
memory_ratios many 100000
MEM[many_plain]=$(ratio "${M[memory_100000]}" "${M[plain_100000]}")
MEM[many_durable]=$(ratio "${M[memory_100000]}" "${M[pklimit_100000]}")
MS=(select1_hot select1_hot_prepared memory_hot memory_hot_prepared)
[ -z "${REDIS_PID:-}" ] || MS+=(redis)
measure mem_hot64 64 1 "${MS[@]}"
echo "64 clients, one hot key, the memory path: calls/s"
mrows "${MS[@]}"
memory_ratios hot64 hot
line "keys in memory, memory_evictions, memory_reads at the end" \
	"$(q -F ', ' -c "SELECT memory_keys, memory_evictions, memory_reads FROM pklimit_stats WHERE datname = current_database()")"

if [ "$ONLY" != memory ]; then
echo "ratios (target)"
line "hot key, $CLIENTS clients: pklimit / plain (>= 5)" "$HOT"
line "hot key, 64 clients: pklimit / plain (>= 15)" "${SCALE[hot64]}"
line "hot key, 256 clients: pklimit / plain" "${SCALE[hot256]}"
line "100,000 keys, $CLIENTS clients: pklimit / plain (>= 1.25)" "$MANY"
line "100,000 keys, 64 clients: pklimit / plain (>= 1.5)" "${SCALE[many64]}"
line "100,000 keys, 256 clients: pklimit / plain" "${SCALE[many256]}"
line "CPU per call, 100,000 keys, 64 clients: pklimit / plain (<= 0.5)" "${SCALE[cpu64]}"
line "8 databases x 8 clients / 1 database x 64 clients" "$MULTI"
line "hot key, 64 clients: asynchronous commit / not" "$ASYNC_GAIN"
line "1 client latency: pklimit / plain (<= 1.25)" "$LAT"
for ks in hot 100000 hot_prepared 100000_prepared; do
	k=${ks%_prepared}
	if [ "$k" = hot ]; then where="hot key"; else where="100,000 keys"; fi
	[ "$k" = "$ks" ] && mode=simple || mode=prepared
	for a in gcra sliding; do
		line "$where, $CLIENTS clients, -M $mode: $a / fixed, calls/s (CPU per call) (>= 0.9)" \
			"${ALG[${a}_$ks]} (${ALG[${a}_cpu_$ks]})"
	done
done
line "rolled back, hot key: pklimit / dblink (>= 5)" "$RB"
line "1,000,000 keys / 1,000 keys (>= 0.8)" "$SIZE"
line "two limits, $CLIENTS clients: allow_all / two calls, requests/s" "$TWO"
line "two limits, 1 client latency: allow_all / two calls" "$TWOLAT"
line "stats counting / not, hot key (about 1)" "$STATS_HOT"
line "stats counting / not, 100,000 keys (about 1)" "$STATS_MANY"
if [ -n "${REDIS_RPS:-}" ]; then
	line "hot key, $CLIENTS clients: pklimit / redis" "$(ratio "$HOT_TPS" "$REDIS_RPS")"
	line "hot key, 64 clients, asynchronous commit: pklimit / redis (>= 0.5)" "$(ratio "$ASYNC_HOT64" "$REDIS_RPS64")"
fi
fi
echo "ratios of the memory path, memory_keys = $MEMORY_KEYS (target); each with its CPU per call over select1's (<= 2) and whether it counts"
for p in "" _prepared; do
	[ -z "$p" ] && mode=simple || mode=prepared
	line "memory, hot key, $CLIENTS clients, -M $mode: / select1 (>= 0.6)" "${MEM[hot$p]} (${MEM[cpu_hot$p]}) ${MEM[ok_hot$p]}"
	line "memory, 100,000 keys, 64 clients, -M $mode: / select1 (>= 0.3)" "${MEM[many$p]} (${MEM[cpu_many$p]}) ${MEM[ok_many$p]}"
	line "memory, 1 client latency, -M $mode: / select1 (<= 1.5)" "${MEM[lat$p]} (${MEM[cpu_lat$p]}) ${MEM[ok_lat$p]}"
	line "memory, hot key, 64 clients, -M $mode: / select1" "${MEM[hot64$p]} (${MEM[cpu_hot64$p]}) ${MEM[ok_hot64$p]}"
	[ -z "${REDIS_PID:-}" ] ||
		line "memory, hot key, 64 clients, -M $mode: / redis (>= 0.5)" "$(ratio "${M[memory_hot$p]}" "${M[redis]}")"
done
line "memory, hot key, $CLIENTS clients: / plain, / durable (-M simple)" "${MEM[hot_plain]}, ${MEM[hot_durable]}"
line "memory, 100,000 keys, 64 clients: / plain, / durable (-M simple)" "${MEM[many_plain]}, ${MEM[many_durable]}"
exit 0
