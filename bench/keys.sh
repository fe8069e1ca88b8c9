#!/usr/bin/env bash
# bench/keys.sh: the memory path with many keys, from a cold start with the
# defaults (docs/memory.md, "Sizing").  As root on Debian 12:
#
#   bash bench/keys.sh          (WARMUP=10 s, DURATION=10 s, ROUNDS=3, CLIENTS=64)
#   ONLY="100k zipf" bash bench/keys.sh     some workloads only
#
# Four workloads, each with pgbench -M simple and -M prepared:
#
#   hot    one key
#   100k   100,000 keys, uniformly at random
#   1m     1,000,000 keys, uniformly at random (ten times the default
#          pklimit.memory_keys: the table thrashes)
#   zipf   1,000,000 keys, 1% of which (10,000) take 80% of the calls
#
# For each, at CLIENTS clients and pklimit's defaults, on a server started
# for it (its memory empty, its table truncated): pklimit_allow with
# durable => false for WARMUP seconds from the cold start (reported as
# "mem cold"); then ROUNDS rounds of SELECT 1 (the round-trip floor),
# pklimit_allow with durable => true and with durable => false, DURATION
# seconds each, side by side, so that the machine's changing speed (its
# disk's above all: a durable call waits for a commit) weighs on each alike;
# the medians.  Prints calls/s, the memory path's ratios to SELECT 1 and to
# the durable path, and what the memory table did in the memory path's
# measured seconds (pklimit_memory_stats: hits, misses, keys read in,
# refused, given back; summed over the rounds).  Reported, not asserted.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"
shopt -s inherit_errexit

WARMUP=${WARMUP:-10}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-64}
ONLY=${ONLY:-hot 100k 1m zipf}
export PKLIMIT_MAX_CONNECTIONS=$((CLIENTS + 20))

install_packages
build_and_install
start_cluster
B=$WORKDIR/bench
mkdir -p "$B" && chown $RUN_AS "$B"
q -c "CREATE EXTENSION pklimit" 2>/dev/null

# script NAME KEYLINES: a pgbench script of the durable and the memory call
# on :k, chosen by KEYLINES; each path on keys of its own ('d' and 'k'), as
# a durable call on a key in memory takes it out (docs/memory.md, "One
# count, whichever path calls"), which is not what either path costs
script() {
	printf '%s\n' "$2" "SELECT pklimit_allow('d' || :k, 1000000000, '1 hour');" >"$B/$1-durable.sql"
	printf '%s\n' "$2" "SELECT pklimit_allow('k' || :k, 1000000000, '1 hour', durable => false);" \
		>"$B/$1-memory.sql"
	chown $RUN_AS "$B"/*.sql
}
script hot '\set k 1'
script 100k '\set k random(1, 100000)'
script 1m '\set k random(1, 1000000)'
script zipf '\set r random(1, 100)
\if :r <= 80
\set k random(1, 10000)
\else
\set k random(10001, 1000000)
\endif'
echo 'SELECT 1;' >"$B/select1.sql"
chown $RUN_AS "$B/select1.sql"

# A cold start: the server restarted (its memory path empty), the table
# empty.
cold_start() {
	q -c "TRUNCATE platformkit_limits"
	as_user pg_ctl -D "$WORKDIR/data" -m fast -w restart -l "$WORKDIR/server.log" >/dev/null
	q -c "SELECT pklimit_count('wake-up')" >/dev/null
}

# run SCRIPT PROTOCOL SECONDS: calls/s
run() { pgbench_tps "$(pgbench_run "$PKLIMIT_DB" -M "$2" -c "$CLIENTS" -j 2 -T "$3" -f "$B/$1.sql")"; }

# (by name, through jsonb: a pklimit before 0.4.0 has no hits, misses and
# admissions_refused, shown as 0)
MEMSTATS="SELECT concat_ws(' ', coalesce(j->>'hits', '0'), coalesce(j->>'misses', '0'), j->>'memory_reads',
	coalesce(j->>'admissions_refused', '0'), j->>'memory_evictions')
	FROM (SELECT to_jsonb(m) AS j FROM pklimit_memory_stats() m
	WHERE m.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())) s"
# delta BEFORE AFTER: the counters' differences
delta() { paste -d ' ' <(tr ' ' '\n' <<<"$2") <(tr ' ' '\n' <<<"$1") | awk 'NF { printf "%d ", $1 - $2 }'; }
add() { paste -d ' ' <(tr ' ' '\n' <<<"$1") <(tr ' ' '\n' <<<"$2") | awk 'NF { printf "%d ", $1 + $2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

printf '%-5s %-8s %9s %9s %9s %9s %6s %6s   %s\n' workload protocol 'SELECT 1' durable \
	'mem cold' memory 'x sel1' 'x dur' 'hits misses read_in refused evicted (measured seconds)'
for w in $ONLY; do
	for p in simple prepared; do
		cold_start
		cold=$(run "$w-memory" "$p" "$WARMUP")
		s1s='' durs='' mems='' sum='0 0 0 0 0'
		for _ in $(seq 1 "$ROUNDS"); do
			s1s+=" $(run select1 "$p" "$DURATION")"
			durs+=" $(run "$w-durable" "$p" "$DURATION")"
			before=$(q -c "$MEMSTATS")
			mems+=" $(run "$w-memory" "$p" "$DURATION")"
			sum=$(add "$sum" "$(delta "$before" "$(q -c "$MEMSTATS")")")
		done
		s1=$(med "$s1s") dur=$(med "$durs") mem=$(med "$mems")
		printf '%-5s %-8s %9.0f %9.0f %9.0f %9.0f %6s %6s   %s\n' "$w" "$p" "$s1" "$dur" "$cold" "$mem" \
			"$(ratio "$mem" "$s1")" "$(ratio "$mem" "$dur")" "$sum"
	done
done
# (the memory table's entries are PostgreSQL's unnamed allocations on some
# versions: docs/memory.md, "The table in shared memory")
echo "shared memory: pklimit's named $(q -c "SELECT pg_size_pretty(sum(allocated_size)) FROM pg_shmem_allocations WHERE name LIKE 'pklimit%'"), unnamed (all) $(q -c "SELECT pg_size_pretty(sum(allocated_size)) FROM pg_shmem_allocations WHERE name = '<anonymous>'")"
echo "pklimit.memory_keys = $(q -c 'SHOW pklimit.memory_keys'), pklimit.max_workers = $(q -c 'SHOW pklimit.max_workers')"
