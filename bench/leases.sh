#!/usr/bin/env bash
# bench/leases.sh: a lease taken and given back (pklimit_acquire, then
# pklimit_release, in one statement: two calls, each a trip to the worker
# and a commit of its own) beside a rate
# limit's one call, SELECT 1 and the plain statements a hand-made semaphore
# table would run (an INSERT of the holder's row, then its DELETE, with no
# bound checked).  As root on Debian 12:
#
#   bash bench/leases.sh        (DURATION=8 s per measurement, ROUNDS=3,
#                                CLIENTS=8)
#
# Over 1,000 keys and on one hot key (max_concurrent 1,000, so no acquire
# is refused and each pair writes the key's row twice), with pgbench
# -M simple and -M prepared, alternately ROUNDS times; medians, and the
# ratios of this one run.  Reported, not asserted.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"
shopt -s inherit_errexit

DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-8}

install_packages bc
build_and_install
start_cluster
B=$WORKDIR/bench
mkdir -p "$B"
q <<'SQL' >/dev/null
CREATE EXTENSION pklimit;
CREATE TABLE plain_held (key text, token bigint);
CREATE INDEX ON plain_held (key, token);
SQL

# script NAME KEYS LINES...: a pgbench script on key :k of KEYS (hot: the one
# key 'hot')
script() {
	local name=$1 keys=$2
	shift 2
	{
		[ "$keys" = hot ] || echo "\\set k random(1, $keys)"
		printf '%s\n' "$@"
	} >"$B/$name.sql"
}
for ks in hot 1000; do
	if [ "$ks" = hot ]; then k="'hot'"; else k="'k' || :k"; fi
	script "select1_$ks" hot "SELECT 1;"
	script "allow_$ks" "$ks" "SELECT pklimit_allow($k, 1000000000, '1 hour');"
	script "plain_$ks" "$ks" "\\set t random(1, 1000000000)" \
		"INSERT INTO plain_held VALUES ($k, :t);" \
		"DELETE FROM plain_held WHERE key = $k AND token = :t;"
	# one statement, two calls: the token never leaves the server
	script "lease_$ks" "$ks" \
		"SELECT pklimit_release(a.k, a.t) FROM (SELECT $k AS k) s," \
		" LATERAL (SELECT s.k, pklimit_acquire(s.k, 1000, '1 minute') AS t OFFSET 0) a;"
done
chown -R $RUN_AS "$B"


ratio() { echo "scale=2; $1 / $2" | bc -l; }
echo "pklimit leases: $(nproc) cores, PostgreSQL $(q -c 'SHOW server_version' | cut -d' ' -f1), $CLIENTS clients, $DURATION s x $ROUNDS rounds, medians"
printf '  %-66s %8s %7s %9s\n' scenario "per s" "CPU us" "/SELECT 1"
for ks in 1000 hot; do
	for mode in simple prepared; do
		declare -A tps=() cpu=()
		names="select1_$ks allow_$ks plain_$ks lease_$ks"
		for _ in $(seq 1 "$ROUNDS"); do
			for s in $names; do
				res=$(pgb "$s" "$mode")
				tps[$s]+="${res% *} "
				cpu[$s]+="${res#* } "
			done
		done
		if [ "$ks" = hot ]; then where="one hot key"; else where="1,000 keys"; fi
		one=$(med "${tps[select1_$ks]}")
		for s in $names; do
			case ${s%_*} in
			select1) label="SELECT 1" ;;
			allow) label="pklimit_allow (one call)" ;;
			plain) label="plain INSERT + DELETE (pairs)" ;;
			lease) label="pklimit_acquire + pklimit_release (pairs)" ;;
			esac
			printf '  %-66s %8s %7s %9s\n' "$label, $where, -M $mode" \
				"$(med "${tps[$s]}")" "$(med "${cpu[$s]}")" "$(ratio "$(med "${tps[$s]}")" "$one")"
		done
	done
done
left=$(q -c "SELECT count(*) FROM platformkit_leases")
echo "  rows left in platformkit_leases: $left (each key's row goes with its last lease)"
