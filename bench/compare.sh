#!/usr/bin/env bash
# bench/compare.sh: the durable path of two commits, side by side in one run,
# and the memory path with PATHS="durable memory".  As root on Debian 12:
#
#   bash bench/compare.sh BEFORE [AFTER]    (AFTER: HEAD; DURATION=5, ROUNDS=3)
#   PATHS="durable memory" bash bench/compare.sh BEFORE
#
# Each commit is built from `git archive` into its own directory and gets a
# cluster of its own (pklimit preloaded, synchronous_commit on). Every round
# installs one commit, starts its cluster, measures, stops it, then does the
# same for the other (the first in odd rounds, the second in even ones), so
# both see the same machine; the medians of the rounds
# are printed with AFTER / BEFORE. Measured with pklimit_allow's durable
# defaults: one hot key at 8 clients and 100,000 keys at 64, with pgbench
# -M simple and -M prepared, calls/s and the server's CPU per call, counted
# as bench/run.sh counts it (bench/lib.sh). Reported, not asserted: a change
# is one beyond the spread of the rounds.  The memory path
# (pklimit_allow(..., durable => false)) is measured the same way, with
# pklimit.memory_keys = 131072 for both commits (their defaults may differ),
# from an empty memory each round (every round restarts the cluster).
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"

BEFORE=${1:?usage: bench/compare.sh BEFORE [AFTER]}
AFTER=${2:-HEAD}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
PATHS=${PATHS:-durable}

install_packages
WORKDIR=$(mktemp -d /tmp/pklimit.XXXXXX)
chmod 755 "$WORKDIR"
chown $RUN_AS "$WORKDIR"
trap '[ $? -eq 0 ] || tail -n 5 "$WORKDIR"/[ab]/server.log >&2 2>/dev/null; for c in a b; do as_user pg_ctl -D "$WORKDIR/$c/data" -m immediate stop >/dev/null 2>&1 || true; done; rm -rf "$WORKDIR"' EXIT
export PGHOST=$WORKDIR PGPORT=$PKLIMIT_PORT PGUSER=postgres

# build C REV: the commit's tree, built, in $WORKDIR/C/src
build() {
	mkdir -p "$WORKDIR/$1/src"
	git -C "$PKLIMIT_SRC" archive "$2" | tar -x -C "$WORKDIR/$1/src"
	chown -R $RUN_AS "$WORKDIR/$1"
	log "building $2 ($(git -C "$PKLIMIT_SRC" rev-parse --short "$2"))"
	as_user make -C "$WORKDIR/$1/src" PG_CONFIG=$PG_BIN/pg_config >/dev/null
}
# up C: install commit C and start its cluster (made on the first round)
up() {
	make -C "$WORKDIR/$1/src" PG_CONFIG=$PG_BIN/pg_config install >/dev/null
	if [ ! -d "$WORKDIR/$1/data" ]; then
		start_node "$WORKDIR/$1/data" "$PKLIMIT_PORT" "$WORKDIR/$1/server.log" \
			"shared_preload_libraries = 'pklimit'
pklimit.memory_keys = 131072
max_connections = 100"
		as_user createdb "$PKLIMIT_DB"
		q -c "SET client_min_messages = error; CREATE EXTENSION pklimit" >/dev/null
	else
		as_user pg_ctl -D "$WORKDIR/$1/data" -l "$WORKDIR/$1/server.log" -w start >/dev/null
	fi
}
down() { as_user pg_ctl -D "$WORKDIR/$1/data" -m fast -w stop >/dev/null; }

build a "$BEFORE"
build b "$AFTER"
echo "\\set k random(1, 100000)" >"$WORKDIR/keys.sql"
echo "SELECT pklimit_allow('k' || :k, 1000000000, '1 hour');" >>"$WORKDIR/keys.sql"
echo "SELECT pklimit_allow('hot', 1000000000, '1 hour');" >"$WORKDIR/hot.sql"
echo "\\set k random(1, 100000)" >"$WORKDIR/mkeys.sql"
echo "SELECT pklimit_allow('m' || :k, 1000000000, '1 hour', durable => false);" >>"$WORKDIR/mkeys.sql"
echo "SELECT pklimit_allow('mhot', 1000000000, '1 hour', durable => false);" >"$WORKDIR/mhot.sql"
chown $RUN_AS "$WORKDIR"/*.sql

# run C SCRIPT CLIENTS MODE: "calls/s us_per_call"; the server's CPU time
# with the sessions' backends, once they have exited (bench/lib.sh)
run() {
	local data=$WORKDIR/$1/data before t0 out
	before=$(server_children "$data")
	t0=$(server_ticks "$data")
	out=$(cd "$WORKDIR" && pgbench_run "$PKLIMIT_DB" -M "$4" -c "$3" -j 2 -T "$DURATION" -f "$WORKDIR/$2.sql")
	sessions_gone "$data" "$before"
	printf "%.1f %s\n" "$(pgbench_tps "$out")" \
		"$(cpu_per_call $(($(server_ticks "$data") - t0)) "$(pgbench_calls "$out")")"
}

SCENARIOS=()
for path in $PATHS; do
	m=$([ "$path" = memory ] && echo m || true)
	SCENARIOS+=("${m}hot 8 simple" "${m}hot 8 prepared" "${m}keys 64 simple" "${m}keys 64 prepared")
done
declare -A TPS CPU
for r in $(seq 1 "$ROUNDS"); do
	order="a b"
	[ $((r % 2)) -eq 1 ] || order="b a"	# neither goes first every round
	for c in $order; do
		up $c
		q -c "SELECT pklimit_allow('warm-up', 1, '1 hour')" >/dev/null
		for s in "${SCENARIOS[@]}"; do
			read -r script clients mode <<<"$s"
			read -r tps cpu <<<"$(run $c "$script" "$clients" "$mode")"
			TPS[$c $s]+="$tps " CPU[$c $s]+="$cpu "
		done
		down $c
	done
done

echo "$(echo "$PATHS" | sed 's/ / and /') path, $BEFORE against $AFTER: $(nproc) cores, PostgreSQL $($PG_BIN/postgres -V | awk '{ print $3 }'), $DURATION s x $ROUNDS rounds, medians (range)"
printf '  %-48s %24s %24s %6s %9s\n' scenario "$BEFORE calls/s" "$AFTER calls/s" ratio "CPU ratio"
for s in "${SCENARIOS[@]}"; do
	read -r script clients mode <<<"$s"
	name="$(case $script in m*) echo "memory: " ;; esac)$(case $script in *hot) echo "one hot key" ;; *) echo "100,000 keys" ;; esac), $clients clients, -M $mode"
	a=$(med "${TPS[a $s]}") b=$(med "${TPS[b $s]}")
	printf '  %-48s %24s %24s %6s %9s\n' "$name" "$a ($(range "${TPS[a $s]}"))" "$b ($(range "${TPS[b $s]}"))" \
		"$(echo "scale=2; $b / $a" | bc -l)" "$(echo "scale=2; $(med "${CPU[b $s]}") / $(med "${CPU[a $s]}")" | bc -l)"
done
