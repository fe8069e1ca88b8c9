#!/usr/bin/env bash
# bench/citus.sh: pklimit_allow on a Citus distributed table, on a reference
# table and on a local table, side by side on one coordinator with two worker
# nodes (three clusters on this machine), and the calls from all three nodes
# at once.  Reports, asserts nothing.  Needs Citus installed for the
# PostgreSQL under test (it is not a Debian package: see
# docs/citus.md); without it, says so and stops.  As root:
#
#   bash bench/citus.sh             (DURATION=10 ROUNDS=3 by default)
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}

install_packages
if [ ! -f "$("$PG_BIN/pg_config" --sharedir)/extension/citus.control" ]; then
	echo "bench/citus.sh: not run: the citus extension is not installed for PostgreSQL $PG_MAJOR"
	exit 0
fi
build_and_install
WORKDIR=${WORKDIR:?}
PORTS=("$PKLIMIT_PORT" $((PKLIMIT_PORT + 1)) $((PKLIMIT_PORT + 2)))

stop_nodes() {
	for p in "${PORTS[@]}"; do
		as_user pg_ctl -D "$WORKDIR/node$p" -m immediate stop >/dev/null 2>&1 || true
	done
	[ -n "${PKLIMIT_KEEP:-}" ] || rm -rf "$WORKDIR"
}
trap stop_nodes EXIT

log "starting a coordinator and two worker nodes on ports ${PORTS[*]}"
for p in "${PORTS[@]}"; do
	start_node "$WORKDIR/node$p" "$p" "$WORKDIR/node$p.log" "\
shared_preload_libraries = 'citus,pklimit'
max_prepared_transactions = 200
max_connections = 200
citus.local_hostname = '$WORKDIR'"
done
qn() { local port=$1 db=$2; shift 2; as_user psql -X -v ON_ERROR_STOP=1 -qAt -h "$WORKDIR" -p "$port" -U postgres -d "$db" "$@"; }

# local: pklimit's own table; dist: distributed by key; ref: a reference table
for db in local dist ref; do
	for p in "${PORTS[@]}"; do
		qn "$p" postgres -c "CREATE DATABASE $db"
		qn "$p" "$db" -c "CREATE EXTENSION citus"
	done
	qn "${PORTS[0]}" "$db" -c "SELECT citus_set_coordinator_host('$WORKDIR', ${PORTS[0]})" >/dev/null
	for p in "${PORTS[@]:1}"; do qn "${PORTS[0]}" "$db" -c "SELECT citus_add_node('$WORKDIR', $p)" >/dev/null; done
	qn "${PORTS[0]}" "$db" -c "CREATE EXTENSION pklimit" 2>/dev/null
done
qn "${PORTS[0]}" dist -c "SELECT create_distributed_table('platformkit_limits', 'key')" >/dev/null
qn "${PORTS[0]}" ref -c "SELECT create_reference_table('platformkit_limits')" >/dev/null

B=$WORKDIR/bench
mkdir -p "$B"
printf '%s\n' "\\set k random(1, 100000)" "SELECT pklimit_allow('k' || :k, 1000000000, '1 hour');" >"$B/keys.sql"
printf '%s\n' "SELECT pklimit_allow('hot', 1000000000, '1 hour');" >"$B/hot.sql"
chown -R $RUN_AS "$B"

# tps SCRIPT CLIENTS DB [PORT]: calls/s of one pgbench run
tps() {
	local out
	out=$(pgbench_run "$3" -c "$2" -j 2 -T "$DURATION" -f "$B/$1.sql" -h "$WORKDIR" -p "${4:-${PORTS[0]}}")
	printf "%.0f\n" "$(pgbench_tps "$out")"
}

# spread SCRIPT CLIENTS DB: calls/s from all three nodes at once (CLIENTS each)
spread() {
	local p f total=0
	for p in "${PORTS[@]}"; do tps "$1" "$2" "$3" "$p" >"$B/spread.$p" & done
	wait
	for p in "${PORTS[@]}"; do f=$(cat "$B/spread.$p"); total=$((total + f)); done
	echo "$total"
}

declare -A V
for r in $(seq 1 "$ROUNDS"); do
	for db in local dist ref; do
		V[$db.keys8]+="$(tps keys 8 $db) "
		V[$db.keys64]+="$(tps keys 64 $db) "
		V[$db.hot8]+="$(tps hot 8 $db) "
		[ $db = local ] || V[$db.spread]+="$(spread keys 8 $db) "
	done
done

echo "pklimit on Citus $(qn "${PORTS[0]}" dist -c "SELECT extversion FROM pg_extension WHERE extname = 'citus'"), PostgreSQL $(qn "${PORTS[0]}" dist -c 'SHOW server_version' | cut -d' ' -f1), $(nproc) cores, a coordinator and two worker nodes, $DURATION s x $ROUNDS rounds, medians of calls/s"
printf '  %-48s %10s %12s %10s %10s\n' scenario local distributed reference "dist/local"
for s in keys8 keys64 hot8 spread; do
	case $s in
		keys8) label="100,000 keys, 8 clients on the coordinator" ;;
		keys64) label="100,000 keys, 64 clients on the coordinator" ;;
		hot8) label="one hot key, 8 clients on the coordinator" ;;
		spread) label="100,000 keys, 8 clients on each of 3 nodes" ;;
	esac
	# spread: against 8 clients on one server's local table
	l=$(med "${V[local.$s]:-${V[local.keys8]}}")
	d=$(med "${V[dist.$s]}")
	f=$(med "${V[ref.$s]}")
	printf '  %-48s %10s %12s %10s %10s\n' "$label" "$l" "$d" "$f" "$(echo "scale=2; $d / $l" | bc -l)"
done
echo "(local: pklimit's own table on the coordinator; 'spread' is the calls of all three nodes' pklimit workers together, against the local table's 8 clients on one server)"
