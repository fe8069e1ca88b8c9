#!/usr/bin/env bash
# bench/policies.sh: a call that names a policy beside the same call with its
# limit written out.  As root on Debian 12:
#
#   bash bench/policies.sh      (DURATION=8 s per measurement, ROUNDS=3,
#                                CLIENTS=8)
#
# The policy 'api' is 1,000,000,000 a fixed hour; 'api_memory' the same with
# durable => false.  Each pair runs over 100,000 keys and on one hot key,
# with pgbench -M simple and -M prepared, alternately ROUNDS times, beside
# SELECT 1; medians, and the ratio policy / direct of this one run.  After
# the run, pklimit_policy_stats() shows the policy table's reads: one per
# session after the policy was last changed, none per call.  Reported, not
# asserted.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"
shopt -s inherit_errexit

DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-8}
export PKLIMIT_EXTRA_CONF="pklimit.memory_keys = 131072"

install_packages bc
build_and_install
start_cluster
B=$WORKDIR/bench
mkdir -p "$B"
q <<'SQL' >/dev/null
CREATE EXTENSION pklimit;
SELECT pklimit_policy_set('api', 1000000000, '1 hour');
SELECT pklimit_policy_set('api_memory', 1000000000, '1 hour', durable => false);
SQL

# script NAME KEYS CALL: a pgbench script making CALL on key :k of KEYS
# (hot: the one key 'hot')
script() {
	{
		[ "$2" = hot ] || echo "\\set k random(1, $2)"
		echo "$3"
	} >"$B/$1.sql"
}
for ks in hot 100000; do
	if [ "$ks" = hot ]; then k="'hot'"; else k="'k' || :k"; fi
	script "select1_$ks" hot "SELECT 1;"
	script "direct_$ks" "$ks" "SELECT pklimit_allow($k, 1000000000, '1 hour');"
	script "policy_$ks" "$ks" "SELECT pklimit_allow($k, 'api');"
	script "direct_memory_$ks" "$ks" "SELECT pklimit_allow('m' || $k, 1000000000, '1 hour', durable => false);"
	script "policy_memory_$ks" "$ks" "SELECT pklimit_allow('m' || $k, 'api_memory');"
done
chown -R $RUN_AS "$B"


ratio() { echo "scale=2; $1 / $2" | bc -l; }
echo "pklimit policies: $(nproc) cores, PostgreSQL $(q -c 'SHOW server_version' | cut -d' ' -f1), $CLIENTS clients, $DURATION s x $ROUNDS rounds, medians"
printf '  %-44s %10s %10s %8s\n' scenario direct policy ratio
for ks in 100000 hot; do
	for mode in simple prepared; do
		declare -A tps=() cpu=()
		names="select1_$ks direct_$ks policy_$ks direct_memory_$ks policy_memory_$ks"
		for _ in $(seq 1 "$ROUNDS"); do
			for s in $names; do
				res=$(pgb "$s" "$mode")
				tps[$s]+="${res% *} "
				cpu[$s]+="${res#* } "
			done
		done
		if [ "$ks" = hot ]; then where="one hot key"; else where="100,000 keys"; fi
		printf '  %-44s %10s\n' "SELECT 1, -M $mode" "$(med "${tps[select1_$ks]}")"
		for path in "" memory_; do
			d=$(med "${tps[direct_$path$ks]}")
			p=$(med "${tps[policy_$path$ks]}")
			if [ -z "$path" ]; then label=durable; else label=memory; fi
			printf '  %-44s %10s %10s %8s   CPU us/call %s, %s\n' \
				"$label, $where, -M $mode: calls/s" "$d" "$p" "$(ratio "$p" "$d")" \
				"$(med "${cpu[direct_$path$ks]}")" "$(med "${cpu[policy_$path$ks]}")"
		done
	done
done
echo "  the policy table's reads (pklimit_policy_stats): one per session and change, none per call"
q -c "SELECT name, calls, table_reads FROM pklimit_policy_stats() ORDER BY name" | sed 's/^/    /'
