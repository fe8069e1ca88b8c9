#!/usr/bin/env bash
# bench/run.sh: pklimit measured side by side, in one run, with what a user
# would otherwise write.  As root on Debian 12:
#
#   bash bench/run.sh          (DURATION=8 s per measurement, ROUNDS=3)
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
#   two limits  a request guarded by two limits (an account and an
#             address): one pklimit_allow_all on both keys, recorded
#             together, beside two pklimit_allow calls
#   stats     pklimit_allow with pklimit_stats counting (the default)
#             beside the same calls with pklimit.track_stats off
source "$(dirname "$0")/../scripts/common.sh"

DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-8}
REDIS=${REDIS:-1}

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
chown -R $RUN_AS "$B"

# pgb SCRIPT CLIENTS: one pgbench run; prints "tps latency_ms".  SCRIPT
# ending in _nostats: the script without it, with pklimit.track_stats off.
pgb() {
	local opts=
	[[ $1 == *_nostats ]] && opts="-c pklimit.track_stats=off"
	as_user env PGOPTIONS="$opts" \
		pgbench -n -c "$2" -j "$(($2 < 2 ? 1 : 2))" -T "$DURATION" -f "$B/${1%_nostats}.sql" \
		-h "$PGHOST" -p "$PGPORT" -U postgres "$PKLIMIT_DB" 2>&1 |
		awk '/^latency average/ { l = $4 } /^tps/ { t = $3 } END { printf "%.1f %.3f\n", t, l }'
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

# measure LABEL CLIENTS FIELD SCRIPT...: alternate the scripts ROUNDS times;
# FIELD 1 is tps, 2 latency.  Sets M[script] to the median.
declare -A M
measure() {
	local clients=$2 field=$3 s r
	shift 3
	declare -A vals
	for r in $(seq 1 "$ROUNDS"); do
		for s in "$@"; do
			[[ $s == pklimit_hot* || $s == pklimit_100000* ]] && q -c "SELECT pklimit_forget('hot')" >/dev/null
			vals[$s]+="$(pgb "$s" "$clients" | cut -d' ' -f"$field") "
		done
	done
	for s in "$@"; do M[$s]=$(echo "${vals[$s]}" | tr ' ' '\n' | grep . | median); done
}
ratio() { echo "scale=2; $1 / $2" | bc -l; }
line() { printf '  %-52s %12s\n' "$1" "$2"; }

echo "pklimit benchmark: $(nproc) cores, PostgreSQL $(q -c 'SHOW server_version' | cut -d' ' -f1), synchronous_commit = $(q -c 'SHOW synchronous_commit'), $DURATION s x $ROUNDS rounds, medians"

measure lat 1 2 select1_hot plain_hot pklimit_hot dblink_hot
echo "1 client, one hot key: latency (ms)"
for s in select1_hot plain_hot pklimit_hot dblink_hot; do line "${s%_hot}" "${M[$s]}"; done
LAT=$(ratio "${M[pklimit_hot]}" "${M[plain_hot]}")

measure hot "$CLIENTS" 1 select1_hot plain_hot pklimit_hot
echo "$CLIENTS clients, one hot key: calls/s"
for s in select1_hot plain_hot pklimit_hot; do line "${s%_hot}" "${M[$s]}"; done
HOT=$(ratio "${M[pklimit_hot]}" "${M[plain_hot]}")

measure many "$CLIENTS" 1 plain_100000 pklimit_100000
echo "$CLIENTS clients over 100,000 keys: calls/s"
for s in plain_100000 pklimit_100000; do line "${s%_100000}" "${M[$s]}"; done
MANY=$(ratio "${M[pklimit_100000]}" "${M[plain_100000]}")

measure rb "$CLIENTS" 1 pklimit_rb dblink_rb
echo "$CLIENTS clients, one hot key, inside transactions that roll back: calls/s"
for s in pklimit_rb dblink_rb; do line "${s%_rb}" "${M[$s]}"; done
RB=$(ratio "${M[pklimit_rb]}" "${M[dblink_rb]}")

measure two "$CLIENTS" 1 allow_all two_singles
echo "$CLIENTS clients over 100,000 keys, two limits per request: requests/s"
line "pklimit_allow_all on both keys" "${M[allow_all]}"
line "two pklimit_allow calls" "${M[two_singles]}"
TWO=$(ratio "${M[allow_all]}" "${M[two_singles]}")
measure twolat 1 2 allow_all two_singles
echo "1 client, two limits per request: latency (ms)"
line "pklimit_allow_all on both keys" "${M[allow_all]}"
line "two pklimit_allow calls" "${M[two_singles]}"
TWOLAT=$(ratio "${M[allow_all]}" "${M[two_singles]}")

measure stats "$CLIENTS" 1 pklimit_hot pklimit_hot_nostats
echo "$CLIENTS clients, one hot key, pklimit_stats counting and not: calls/s"
line "pklimit.track_stats = on" "${M[pklimit_hot]}"
line "pklimit.track_stats = off" "${M[pklimit_hot_nostats]}"
STATS_HOT=$(ratio "${M[pklimit_hot]}" "${M[pklimit_hot_nostats]}")
measure stats_many "$CLIENTS" 1 pklimit_100000 pklimit_100000_nostats
echo "$CLIENTS clients over 100,000 keys, pklimit_stats counting and not: calls/s"
line "pklimit.track_stats = on" "${M[pklimit_100000]}"
line "pklimit.track_stats = off" "${M[pklimit_100000_nostats]}"
STATS_MANY=$(ratio "${M[pklimit_100000]}" "${M[pklimit_100000_nostats]}")

# table size: the same calls on a table of 1,000 keys and one of 1,000,000
fill() {
	q -c "TRUNCATE platformkit_limits" -c "INSERT INTO platformkit_limits
		SELECT 'g:t' || i, b.ws, b.ws + interval '1 hour', 1, clock_timestamp()
		FROM generate_series(1, $1) i, (SELECT date_bin('1 hour', clock_timestamp(), '1970-01-01') ws) b" \
		-c "VACUUM ANALYZE platformkit_limits" >/dev/null
}
declare -A T
for r in $(seq 1 "$ROUNDS"); do
	fill 1000; T[1k]+="$(pgb pklimit_1k "$CLIENTS" | cut -d' ' -f1) "
	fill 1000000; T[1m]+="$(pgb pklimit_1m "$CLIENTS" | cut -d' ' -f1) "
done
K1=$(echo "${T[1k]}" | tr ' ' '\n' | grep . | median)
K1M=$(echo "${T[1m]}" | tr ' ' '\n' | grep . | median)
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

if [ "$REDIS" != 0 ] && command -v redis-server >/dev/null; then
	as_user redis-server --port 0 --unixsocket "$B/redis.sock" --save '' --appendonly no --daemonize yes \
		--pidfile "$B/redis.pid" --logfile "$B/redis.log" >/dev/null
	sleep 1
	LUA="local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('PEXPIRE', KEYS[1], 3600000) end return c"
	rps=()
	for r in $(seq 1 "$ROUNDS"); do
		rps+=("$(redis-benchmark -s "$B/redis.sock" -c "$CLIENTS" -n 200000 -q EVAL "$LUA" 1 hot 2>/dev/null |
			grep -o '[0-9.]* requests per second' | cut -d' ' -f1)")
	done
	kill "$(cat "$B/redis.pid")" 2>/dev/null || true
	REDIS_RPS=$(printf '%s\n' "${rps[@]}" | median)
	echo "$CLIENTS clients, one hot key, Redis INCR + PEXPIRE (Lua): calls/s"
	line "redis (no fsync: appendonly no)" "$REDIS_RPS"
fi

echo "ratios (target)"
line "hot key, $CLIENTS clients: pklimit / plain (>= 5)" "$HOT"
line "100,000 keys, $CLIENTS clients: pklimit / plain (>= 1.5)" "$MANY"
line "1 client latency: pklimit / plain (<= 1.25)" "$LAT"
line "rolled back, hot key: pklimit / dblink (>= 5)" "$RB"
line "1,000,000 keys / 1,000 keys (>= 0.8)" "$SIZE"
line "two limits, $CLIENTS clients: allow_all / two calls, requests/s" "$TWO"
line "two limits, 1 client latency: allow_all / two calls" "$TWOLAT"
line "stats counting / not, hot key (about 1)" "$STATS_HOT"
line "stats counting / not, 100,000 keys (about 1)" "$STATS_MANY"
[ -n "${REDIS_RPS:-}" ] && line "hot key: pklimit / redis" "$(ratio "${M[pklimit_hot]}" "$REDIS_RPS")"
exit 0
