#!/usr/bin/env bash
# bench/scale.sh: the scale model (docs/citus.md, "Does it scale out?").
# Does pklimit on a Citus cluster of three nodes do more than one server,
# when each node is a server of its own?  On one machine the nodes would
# share its cores, so each PostgreSQL node gets a CPU budget of its own
# through a cgroup (NODE_CPU of a CPU, 0.35 by default, over a 10 ms period:
# at the kernel's default 100 ms a capped node pauses for about 70 ms at a
# time, longer than pklimit waits for another node).  pgbench runs outside
# the budgets.  Four nodes:
#
#   plain          one server, pklimit on its own table
#   c1, c2, c3     a Citus coordinator and two workers, all with metadata,
#                  platformkit_limits distributed by key (as bench/citus.sh)
#
# Each node is started by a shell that puts itself in the node's cgroup and
# then execs pg_ctl, so the postmaster and all it forks are in it.  Keys are
# filled in before the budgets are set (100,000 for each path); every figure
# is measured under them.  Reports, asserts nothing.  As root, with Citus
# installed for PostgreSQL $PG_MAJOR (not a Debian package: docs/citus.md):
#
#   bash bench/scale.sh        (DURATION=10 s, ROUNDS=2, NODE_CPU=0.35)
#
# Where the cgroups cannot be written (no cgroup v1 cpu and cpuacct
# controllers, or v2 without cpu), or Citus is not installed, it says so
# and exits non-zero: never a figure from nodes without their budgets.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-2}
NODE_CPU=${NODE_CPU:-0.35}
PERIOD_US=10000
QUOTA_US=$(awk -v c="$NODE_CPU" -v p=$PERIOD_US 'BEGIN { printf "%d", c * p }')
NODES=(plain c1 c2 c3)
declare -A PORT=([plain]=$PKLIMIT_PORT [c1]=$((PKLIMIT_PORT + 1)) [c2]=$((PKLIMIT_PORT + 2))
	[c3]=$((PKLIMIT_PORT + 3)))
CLUSTER=(c1 c2 c3)

fail() { echo "bench/scale.sh: not run: $*" >&2; exit 1; }

# --- the cgroups: v1 (cpu and cpuacct controllers) or v2 (cpu.max)
CG=/sys/fs/cgroup
if [ -d $CG/cpu ] && [ -d $CG/cpuacct ] && [ -f $CG/cpu/cpu.cfs_quota_us ]; then
	CGV=1
elif [ -f $CG/cgroup.controllers ] && grep -qw cpu $CG/cgroup.controllers; then
	CGV=2
else
	fail "no cgroup v1 cpu and cpuacct controllers and no cgroup v2 cpu controller under $CG"
fi
group_dirs() {
	if [ $CGV = 1 ]; then
		echo "$CG/cpu/pklimit-scale-$1 $CG/cpuacct/pklimit-scale-$1"
	else
		echo "$CG/pklimit-scale-$1"
	fi
}
make_groups() {
	local n d
	if [ $CGV = 2 ]; then
		echo +cpu >$CG/cgroup.subtree_control 2>/dev/null || true
	fi
	for n in "${NODES[@]}"; do
		for d in $(group_dirs "$n"); do
			mkdir -p "$d" 2>/dev/null || fail "cannot create the cgroup $d"
		done
		budget "$n" off || fail "cannot write the CPU budget of the cgroup of $n"
	done
}
# budget NODE on|off: the node's CPU budget set, or lifted (to fill keys in)
budget() {
	local d
	d=$(group_dirs "$1" | cut -d' ' -f1)
	if [ $CGV = 1 ]; then
		echo $PERIOD_US >"$d/cpu.cfs_period_us" &&
			echo "$([ "$2" = on ] && echo $QUOTA_US || echo -1)" >"$d/cpu.cfs_quota_us"
	else
		echo "$([ "$2" = on ] && echo $QUOTA_US || echo max) $PERIOD_US" >"$d/cpu.max"
	fi
}
# cpu_us NODE: the CPU time of the node's cgroup so far, in microseconds;
# throttled NODE: the periods in which its budget ran out
cpu_us() {
	local d
	if [ $CGV = 1 ]; then
		d=$(group_dirs "$1" | cut -d' ' -f2)
		echo $(($(cat "$d/cpuacct.usage") / 1000))
	else
		awk '$1 == "usage_usec" { print $2 }' "$(group_dirs "$1")/cpu.stat"
	fi
}
throttled() {
	local d
	d=$(group_dirs "$1" | cut -d' ' -f1)
	awk '$1 == "nr_throttled" { print $2 }' "$d/cpu.stat"
}
remove_groups() {
	local n d
	for n in "${NODES[@]}"; do
		for d in $(group_dirs "$n"); do rmdir "$d" 2>/dev/null || true; done
	done
}

install_packages
[ -f "$("$PG_BIN/pg_config" --sharedir)/extension/citus.control" ] ||
	fail "the citus extension is not installed for PostgreSQL $PG_MAJOR (docs/citus.md says how to build it)"
[ "$(id -u)" = 0 ] || fail "the cgroups need root"
make_groups
build_and_install
WORKDIR=${WORKDIR:?}

stop_nodes() {
	local n
	for n in "${NODES[@]}"; do
		as_user pg_ctl -D "$WORKDIR/$n" -m immediate stop >/dev/null 2>&1 || true
	done
	sleep 1
	remove_groups
	[ -n "${PKLIMIT_KEEP:-}" ] || rm -rf "$WORKDIR"
}
trap stop_nodes EXIT

# start NODE PRELOAD: initdb, then pg_ctl start from a shell in the node's
# cgroup, so that the postmaster and every process it forks are in it
start() {
	local n=$1 d
	as_user initdb -D "$WORKDIR/$n" -A trust -U postgres --no-sync >/dev/null
	cat >>"$WORKDIR/$n/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$WORKDIR'
port = ${PORT[$n]}
fsync = on
synchronous_commit = on
shared_preload_libraries = '$2'
max_connections = 200
max_prepared_transactions = 200
citus.local_hostname = '$WORKDIR'
CONF
	[ "$2" = pklimit ] && sed -i '/^citus\./d;/^max_prepared_transactions/d' "$WORKDIR/$n/postgresql.conf"
	(
		for d in $(group_dirs "$n"); do echo $BASHPID >"$d/cgroup.procs"; done
		exec runuser -u "$RUN_AS" -- "$PG_BIN/pg_ctl" -D "$WORKDIR/$n" -l "$WORKDIR/$n.log" -w start >/dev/null
	)
}
qn() { as_user psql -X -v ON_ERROR_STOP=1 -qAt -h "$WORKDIR" -p "${PORT[$1]}" -U postgres -d bench -c "$2"; }

log "starting four nodes in their cgroups (cgroup v$CGV): plain, and Citus c1 (coordinator), c2, c3"
start plain pklimit
for n in "${CLUSTER[@]}"; do start "$n" citus,pklimit; done
for n in "${NODES[@]}"; do
	as_user createdb -h "$WORKDIR" -p "${PORT[$n]}" -U postgres bench
done
for n in "${CLUSTER[@]}"; do qn "$n" "CREATE EXTENSION citus"; done
qn c1 "SELECT citus_set_coordinator_host('$WORKDIR', ${PORT[c1]})" >/dev/null
for n in c2 c3; do qn c1 "SELECT citus_add_node('$WORKDIR', ${PORT[$n]})" >/dev/null; done
# every node holds shards, the coordinator too (docs/citus.md)
qn c1 "SELECT citus_set_node_property('$WORKDIR', ${PORT[c1]}, 'shouldhaveshards', true)" >/dev/null
qn plain "SET client_min_messages = error; CREATE EXTENSION pklimit"
qn c1 "SET client_min_messages = error; CREATE EXTENSION pklimit"
qn c1 "SELECT create_distributed_table('platformkit_limits', 'key')" >/dev/null

# --- keys filled in, without the budgets: 'd' keys for the durable path, 'm'
# keys for the memory path, 100,000 each, four sessions at a time
fill() {
	local node=$1 prefix=$2 durable=$3 s
	for s in 0 1 2 3; do
		qn "$node" "SELECT count(pklimit_allow('$prefix' || i, 1000000000, '1 hour', durable => $durable))
			FROM generate_series($((s * 25000 + 1)), $((s * 25000 + 25000))) i" >/dev/null &
	done
	wait
}
log "filling in 100,000 keys per path on plain and on the cluster"
for node in plain c1; do
	fill "$node" d true
	fill "$node" m false
done

B=$WORKDIR/bench
mkdir -p "$B"

# --- routing, as a client that sends each call to the node holding its key
# (docs/citus.md, "Sending each call to its key's node"): each node gets a
# local table of the keys it holds, numbered from 1, from pklimit_node();
# the plain server a table of every key.  Each call looks its key up there,
# on the plain server as on the cluster, so both pay the same lookup.
log "routing: which node holds each key (pklimit_node)"
qn c1 "CREATE TABLE bench_keys AS SELECT p || i AS key, (pklimit_node(p || i)).node_port AS port
	FROM generate_series(1, 100000) i, (VALUES ('d'), ('m')) v(p)" >/dev/null
keys_table() {
	local node=$1 prefix=$2 where=$3
	qn "$node" "CREATE TABLE here_$prefix (id int PRIMARY KEY, key text NOT NULL)"
	as_user psql -X -qAt -h "$WORKDIR" -p "${PORT[c1]}" -U postgres -d bench -c \
		"COPY (SELECT row_number() OVER (ORDER BY key), key FROM bench_keys WHERE key LIKE '$prefix%' $where) TO STDOUT" |
		as_user psql -X -q -h "$WORKDIR" -p "${PORT[$node]}" -U postgres -d bench -c "COPY here_$prefix FROM STDIN"
	qn "$node" "ANALYZE here_$prefix"
	qn "$node" "SELECT count(*) FROM here_$prefix"
}
declare -A HERE
for prefix in d m; do
	HERE[plain.$prefix]=$(keys_table plain $prefix "")
	for n in "${CLUSTER[@]}"; do
		HERE[$n.$prefix]=$(keys_table "$n" $prefix "AND port = ${PORT[$n]}")
	done
done
# each node's memory-path keys read into its own memory, as routed calls
# leave them (filled from c1, the other nodes' keys were applied durably)
log "reading each node's memory-path keys into its memory"
for n in "${CLUSTER[@]}"; do
	qn "$n" "SELECT count(pklimit_allow(key, 1000000000, '1 hour', durable => false)) FROM here_m" >/dev/null &
done
wait
HOT_NODE=c1
for n in "${CLUSTER[@]}"; do
	[ "$(qn c1 "SELECT (pklimit_node('hot')).node_port")" = "${PORT[$n]}" ] && HOT_NODE=$n
done
MHOT_NODE=c1
for n in "${CLUSTER[@]}"; do
	[ "$(qn c1 "SELECT (pklimit_node('mhot')).node_port")" = "${PORT[$n]}" ] && MHOT_NODE=$n
done
for n in "${NODES[@]}"; do
	printf '%s\n' "\\set k random(1, ${HERE[$n.d]})" \
		"SELECT pklimit_allow(key, 1000000000, '1 hour') FROM here_d WHERE id = :k;" >"$B/routed.$n.sql"
	printf '%s\n' "\\set k random(1, ${HERE[$n.m]})" \
		"SELECT pklimit_allow(key, 1000000000, '1 hour', durable => false) FROM here_m WHERE id = :k;" \
		>"$B/routedmem.$n.sql"
done
echo 'SELECT 1;' >"$B/select1.sql"
printf '%s\n' '\set k random(1, 100000)' "SELECT pklimit_allow('d' || :k, 1000000000, '1 hour');" >"$B/durable.sql"
printf '%s\n' '\set k random(1, 100000)' \
	"SELECT pklimit_allow('m' || :k, 1000000000, '1 hour', durable => false);" >"$B/memory.sql"
echo "SELECT pklimit_allow('hot', 1000000000, '1 hour');" >"$B/hot.sql"
echo "SELECT pklimit_allow('mhot', 1000000000, '1 hour', durable => false);" >"$B/hotmem.sql"
chown -R "$RUN_AS" "$B"

for n in "${NODES[@]}"; do budget "$n" on || fail "cannot set the CPU budget of $n"; done
log "budgets set: $NODE_CPU CPU a node ($QUOTA_US us each $PERIOD_US us)"

# measure SCRIPT CLIENTS NODE...: pgbench with CLIENTS clients on each NODE
# at once, DURATION seconds; prints "calls/s cpu_us_per_call throttled"
# over those nodes (calls summed, their cgroups' CPU summed)
measure() {
	local script=$1 clients=$2 n f calls=0 cpu0=0 cpu1=0 thr0=0 thr1=0
	shift 2
	for n in "$@"; do cpu0=$((cpu0 + $(cpu_us "$n"))); thr0=$((thr0 + $(throttled "$n"))); done
	for n in "$@"; do
		f=$B/$script.sql
		[ -f "$B/$script.$n.sql" ] && f=$B/$script.$n.sql
		pgbench_run bench -h "$WORKDIR" -p "${PORT[$n]}" -c "$clients" -j 1 -T "$DURATION" \
			-M prepared -f "$f" >"$B/out.$n" &
	done
	wait
	for n in "$@"; do cpu1=$((cpu1 + $(cpu_us "$n"))); thr1=$((thr1 + $(throttled "$n"))); done
	for n in "$@"; do calls=$((calls + $(pgbench_calls "$(cat "$B/out.$n")"))); done
	awk -v c="$calls" -v d="$DURATION" -v u=$((cpu1 - cpu0)) -v t=$((thr1 - thr0)) \
		'BEGIN { printf "%.0f %.0f %d\n", c / d, (c > 0 ? u / c : 0), t }'
}

# The scenarios: name, script, clients, nodes (the plain one against the
# cluster's)
SCEN=(
	"select1-one|select1|16|c1"
	"select1-plain|select1|16|plain"
	"select1-three|select1|16|c1 c2 c3"
	"routed-plain|routed|16|plain"
	"routed-three|routed|16|c1 c2 c3"
	"routedmem-plain|routedmem|16|plain"
	"routedmem-three|routedmem|16|c1 c2 c3"
	"durable-plain|durable|16|plain"
	"durable-three|durable|16|c1 c2 c3"
	"memory-plain|memory|16|plain"
	"memory-three|memory|16|c1 c2 c3"
	"hot-plain|hot|8|plain"
	"hot-three|hot|8|c1 c2 c3"
	"hot-routed|hot|8|$HOT_NODE"
	"hotmem-plain|hotmem|8|plain"
	"hotmem-three|hotmem|8|c1 c2 c3"
	"hotmem-routed|hotmem|8|$MHOT_NODE"
)
declare -A TPS CPU THR
for r in $(seq 1 "$ROUNDS"); do
	for s in "${SCEN[@]}"; do
		IFS='|' read -r name script clients nodes <<<"$s"
		# shellcheck disable=SC2086
		read -r t c h <<<"$(measure "$script" "$clients" $nodes)"
		TPS[$name]+="$t "
		CPU[$name]+="$c "
		THR[$name]+="$h "
	done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
echo "the scale model: pklimit $(qn plain "SELECT extversion FROM pg_extension WHERE extname = 'pklimit'"), Citus $(qn c1 "SELECT extversion FROM pg_extension WHERE extname = 'citus'"), PostgreSQL $(qn plain 'SHOW server_version' | cut -d' ' -f1), $(nproc) cores; each node $NODE_CPU CPU (cgroup v$CGV, $PERIOD_US us period); pgbench -M prepared, medians of $ROUNDS x $DURATION s"
printf '  %-44s %10s %10s %8s   %s\n' scenario 'plain' 'cluster' 'ratio' 'CPU us/call plain, cluster; periods throttled'
row() {
	local label=$1 a=$2 b=$3
	printf '  %-44s %10s %10s %8s   %s, %s; %s, %s\n' "$label" "$(med "${TPS[$a]}")" "$(med "${TPS[$b]}")" \
		"$(ratio "$(med "${TPS[$b]}")" "$(med "${TPS[$a]}")")" "$(med "${CPU[$a]}")" "$(med "${CPU[$b]}")" \
		"$(med "${THR[$a]}")" "$(med "${THR[$b]}")"
}
row "SELECT 1, 16 clients a node: c1 alone, three" select1-one select1-three
row "SELECT 1: plain, the three Citus nodes" select1-plain select1-three
row "routed: durable, 100,000 keys, 16 clients a node" routed-plain routed-three
row "routed: memory path, 100,000 keys" routedmem-plain routedmem-three
row "durable, 100,000 keys, 16 clients a node" durable-plain durable-three
row "memory path, 100,000 keys, 16 clients a node" memory-plain memory-three
row "durable, one hot key, 8 clients a node" hot-plain hot-three
row "routed: durable, one hot key, 8 clients" hot-plain hot-routed
row "memory path, one hot key, 8 clients a node" hotmem-plain hotmem-three
row "routed: memory path, one hot key, 8 clients" hotmem-plain hotmem-routed
echo "(cluster: the calls of all three nodes together; routed: each node called only on the keys it holds, as pklimit_node() names them, and one hot key on its own node; otherwise each node called at random keys, no routing by the client; ratio: cluster / plain, or three / one for the first line)"
