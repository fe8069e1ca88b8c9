#!/usr/bin/env bash
# demo/run.sh: pklimit on real input, as root on a fresh Debian 12 machine.
#
#   bash demo/run.sh
#
# Builds pklimit, starts a throwaway cluster (removed on exit), takes the sshd
# sample log that Debian's fail2ban package ships (downloaded and unpacked,
# never installed), and replays its failed logins through pklimit_allow from
# two concurrent psql sessions standing in for two application replicas.  Then
# a credential-stuffing burst on three accounts, a correct password
# (pklimit_forget), login transactions that roll back but still count, a
# ban that outlasts its window (block), a per-request API limit in memory,
# and at most 2 exports at once per tenant (leases).  It checks every answer
# and exits non-zero if pklimit let through more or fewer attempts than the
# limit allows.

# shellcheck source=../scripts/common.sh
source "$(dirname "$0")/../scripts/common.sh"

install_packages
build_and_install
start_cluster

q -c 'CREATE EXTENSION pg_cron' -c 'CREATE EXTENSION pklimit'
echo "pklimit $(q -c "SELECT extversion FROM pg_extension WHERE extname = 'pklimit'") on PostgreSQL $(q -c 'SHOW server_version') (pklimit, pg_cron preloaded)"
# the hourly purge CREATE EXTENSION scheduled: pg_cron, with its default
# settings, runs it over a connection of its own, here on the socket
IFS='|' read -r purge_node purge_error <<<"$(q -c "
	SELECT nodename, coalesce(pklimit_purge_job_error(jobid), 'none')
	FROM cron.job WHERE jobname = 'pklimit-purge'")"
echo "purge: pg_cron job pklimit-purge, hourly, connecting to $purge_node; connection error: $purge_error"

# ---------------------------------------------------------------- input ----
# apt-get download drops privileges to _apt, so give it a directory it can
# write (otherwise apt warns and downloads unsandboxed).
F2B=$WORKDIR/fail2ban
mkdir -p "$F2B/pkg"
if id _apt >/dev/null 2>&1; then chown _apt "$F2B"; fi
if ! (cd "$F2B" && apt-get download -qq fail2ban 2>/dev/null); then
	log "apt-get download fail2ban failed; refreshing the package lists once"
	apt_get update -qq
	(cd "$F2B" && apt_get download -qq fail2ban)
fi
deb=$(ls "$F2B"/fail2ban_*.deb)
dpkg -x "$deb" "$F2B/pkg"
SSHD_LOG=$(find "$F2B/pkg" -path '*/fail2ban/tests/files/logs/sshd' -type f | head -n 1)
if [ -z "$SSHD_LOG" ]; then echo "no tests/files/logs/sshd in $deb" >&2; exit 1; fi
echo "input: ${SSHD_LOG#"$F2B/pkg"} from $(basename "$deb") ($(wc -l <"$SSHD_LOG") lines)"

# Failed logins: "Failed password for [invalid user] U from ADDR",
# "Failed <method> for invalid user U from ADDR", "Failed keyboard-interactive
# for U from ADDR" and "Invalid user U from ADDR", with an optional
# " port N" and " sshN" after the address.  The file is fail2ban's test
# fixture, so it holds injection attempts ("Failed password for invalid user
# test from 10.10.1.2 port 55555 ssh2 from 127.0.0.1 port 58946 ssh2", an
# auth-info part ": ruser from 1.2.3.4"): the source is the first "from ADDR
# [port N] [sshN]" that ends the line or is followed by ": ".  The fixture
# annotates most lines with the host fail2ban expects (# failJSON: ...
# "host": ...); the parser is checked against it.  Output: one address a line.
perl -e '
	use strict; use warnings;
	my ($lines, $n, $v6, $checked, $agree, $noaddr, $expect) = (0, 0, 0, 0, 0, 0);
	my $ip = qr/\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f]*:[0-9A-Fa-f:.]*:[0-9A-Fa-f.]*/;
	while (my $l = <STDIN>) {
		chomp $l; $lines++;
		if ($l =~ /^#\s*failJSON:.*"host":\s*"([^"]*)"/) { $expect = $1; next; }
		next if $l =~ /^\s*(#|$)/;
		my $e = $expect; undef $expect;
		next unless $l =~ /\bsshd\b/ and $l =~ /Failed password for |Failed \S+ for invalid user |Failed keyboard-interactive\S* for |: Invalid user /;
		my ($src) = $l =~ / from ($ip)(?: port \d+)?(?: ssh\d*)?(?=$|: )/;
		if (!defined $src) { $noaddr++; next; }
		$n++; $v6++ if $src =~ /:/;
		if (defined $e) {
			$checked++;
			if (lc $e eq lc $src) { $agree++ } else { print STDERR "parser says $src, fail2ban expects $e: $l\n" }
		}
		print "$src\n";
	}
	printf STDERR "parsed %d failed-login lines (%d IPv4, %d IPv6 sources; %d without an address skipped);"
		. " source agrees with the fixture'\''s failJSON host on %d/%d\n",
		$n, $n - $v6, $v6, $noaddr, $agree, $checked;
' <"$SSHD_LOG" >"$WORKDIR/ssh.addr" 2>"$WORKDIR/ssh.parse"
cat "$WORKDIR/ssh.parse"
if ! [ -s "$WORKDIR/ssh.addr" ]; then echo "no failed logins found" >&2; exit 1; fi

# ------------------------------------------------------------- replicas ----
q <<'SQL'
CREATE TABLE demo_attempt (replica text, phase text, key text, max_count int, allowed bool, t timestamptz);
CREATE TABLE demo_count (phase text, key text, count bigint);
CREATE FUNCTION ms(a timestamptz, b timestamptz) RETURNS int LANGUAGE sql
	RETURN round(extract(epoch FROM b - a) * 1000);
SQL

# run_replicas PHASE MAX WINDOW FILE: two psql sessions, replicas A and B,
# replay the SQL key expressions of FILE at the same time (A takes lines 1, 3,
# 5 ..., B lines 2, 4, 6 ...; both wait for a common start instant), each
# printing replica|phase|key|max|allowed|time per attempt.  The lines are loaded
# into demo_attempt, and pklimit_count of every key into demo_count.
run_replicas() {
	local phase=$1 max=$2 win=$3 file=$4 start r rc=0
	local -A pid
	start=$(q -c "SELECT clock_timestamp() + interval '500 ms'")
	for r in A B; do
		awk -v r="$r" -v ph="$phase" -v max="$max" -v win="$win" -v start="$start" '
			BEGIN { printf "SELECT pg_sleep_until(\047%s\047) \\g /dev/null\n", start }
			NR % 2 == (r == "A") {
				printf "SELECT \047%s\047, \047%s\047, k, %d, pklimit_allow(k, %d, \047%s\047), clock_timestamp() FROM (VALUES (%s)) v(k);\n",
					r, ph, max, max, win, $0
			}' "$file" >"$WORKDIR/$phase.$r.sql"
		q <"$WORKDIR/$phase.$r.sql" >"$WORKDIR/$phase.$r.out" &
		pid[$r]=$!
	done
	for r in A B; do wait "${pid[$r]}" || rc=$?; done
	if [ "$rc" -ne 0 ]; then echo "a replica failed (exit $rc)" >&2; exit 1; fi
	cat "$WORKDIR/$phase.A.out" "$WORKDIR/$phase.B.out" |
		q -c "\\copy demo_attempt FROM pstdin (FORMAT csv, DELIMITER '|')"
	q -c "INSERT INTO demo_count SELECT '$phase', key, pklimit_count(key)
		FROM (SELECT DISTINCT key FROM demo_attempt WHERE phase = '$phase') k"
}

# overlap PHASE: how many calls each replica made and how long their runs
# overlapped (time of each call's answer, server clock).
overlap() {
	q -c "SELECT format('   replica A made %s calls in %s ms, replica B %s calls in %s ms; the two ran side by side for %s ms',
			count(*) FILTER (WHERE replica = 'A'), ms(min(t) FILTER (WHERE replica = 'A'), max(t) FILTER (WHERE replica = 'A')),
			count(*) FILTER (WHERE replica = 'B'), ms(min(t) FILTER (WHERE replica = 'B'), max(t) FILTER (WHERE replica = 'B')),
			greatest(0, ms(greatest(min(t) FILTER (WHERE replica = 'A'), min(t) FILTER (WHERE replica = 'B')),
				least(max(t) FILTER (WHERE replica = 'A'), max(t) FILTER (WHERE replica = 'B')))))
		FROM demo_attempt WHERE phase = '$1'"
}

# summary PHASE: one row per key, attempts and allowed split by replica.
summary() {
	q -P format=aligned -P tuples_only=off -P footer=off -c "
		SELECT a.key,
			format('%s (%s+%s)', count(*), count(*) FILTER (WHERE replica = 'A'),
				count(*) FILTER (WHERE replica = 'B')) AS \"attempts (A+B)\",
			format('%s (%s+%s)', count(*) FILTER (WHERE allowed),
				count(*) FILTER (WHERE allowed AND replica = 'A'),
				count(*) FILTER (WHERE allowed AND replica = 'B')) AS \"allowed (A+B)\",
			count(*) FILTER (WHERE NOT allowed) AS refused,
			min(c.count) AS pklimit_count,
			CASE WHEN count(*) FILTER (WHERE allowed) = least(count(*), min(max_count))
				AND min(c.count) = count(*) THEN 'ok' ELSE 'WRONG' END AS \"check\"
		FROM demo_attempt a JOIN demo_count c USING (phase, key)
		WHERE phase = '$1'
		GROUP BY a.key ORDER BY count(*) DESC, a.key"
}

# Windows are aligned to the epoch (10 minutes: :00, :10 ...; 15 minutes:
# :00, :15, :30, :45 UTC).  The whole demo takes a few seconds; if a boundary
# of either window is less than 30 s away, let it pass first so that every
# phase stays in one window.
left=$(q -c "SELECT ceil(least(600 - e % 600, 900 - e % 900))::int
	FROM (SELECT extract(epoch FROM clock_timestamp()) AS e) t")
if [ "$left" -lt 30 ]; then
	echo "the next window boundary is ${left}s away: waiting for it to pass so the replay stays in one window"
	sleep $((left + 1))
fi
q -c "SET TimeZone = 'UTC'; SELECT format('windows (UTC): 10 min %s-%s, 15 min %s-%s; next boundary in %s s',
	to_char(date_bin('10 min', t, 'epoch'), 'HH24:MI'), to_char(date_bin('10 min', t, 'epoch') + '10 min', 'HH24:MI'),
	to_char(date_bin('15 min', t, 'epoch'), 'HH24:MI'), to_char(date_bin('15 min', t, 'epoch') + '15 min', 'HH24:MI'),
	ceil(least(600 - e % 600, 900 - e % 900)))
	FROM (SELECT clock_timestamp() AS t, extract(epoch FROM clock_timestamp()) AS e) s"

# 1. The sshd failures, keyed by source address (normalised by inet, so two
#    spellings of one IPv6 address share a count): lockout 3 per 10 minutes.
sed "s/.*/'ssh:' || host('&'::inet)/" "$WORKDIR/ssh.addr" >"$WORKDIR/ssh.keys"
run_replicas ssh 3 '10 minutes' "$WORKDIR/ssh.keys"
echo
echo "1. sshd failed logins replayed by replicas A and B at once: pklimit_allow('ssh:<addr>', 3, '10 minutes')"
overlap ssh
summary ssh

# 2. Credential stuffing on three accounts from both replicas: 5 per 15 min.
#    Each line is written twice, so A and B get the same attempts.
for i in $(seq 1 10); do
	for acct in alice:10 bob:8 carol:2; do
		if [ "$i" -le "${acct#*:}" ]; then printf "'login:%s'\n'login:%s'\n" "${acct%:*}" "${acct%:*}"; fi
	done
done >"$WORKDIR/login.keys"
run_replicas login 5 '15 minutes' "$WORKDIR/login.keys"
echo "2. credential stuffing from both replicas at once: pklimit_allow('login:<user>', 5, '15 minutes')"
overlap login
summary login

# 3. alice types her password correctly: forget her count.  Her next attempt
#    (replica A) is allowed again; bob's (replica B, at the same time) is not.
forgot=$(q -c "SELECT pklimit_forget('login:alice')")
printf "'login:alice'\n'login:bob'\n" >"$WORKDIR/after.keys"
run_replicas after 5 '15 minutes' "$WORKDIR/after.keys"
echo "3. correct password for alice: pklimit_forget('login:alice') = $forgot, then one more attempt each"
q -c "SELECT format('   %-12s replica %s: allowed = %s, pklimit_count = %s', a.key, replica, allowed, c.count)
	FROM demo_attempt a JOIN demo_count c USING (phase, key) WHERE phase = 'after' ORDER BY a.key"

# 4. A login transaction that fails rolls back, and its attempt must still
#    count: three wrong passwords for dave (tenant acme), each in a request
#    transaction that rolls back; the fourth attempt is refused.
rolled_back=$(
	for attempt in 1 2 3; do
		printf '%s\n' "BEGIN;" "SET LOCAL platformkit.tenant = 'acme';" \
			"SELECT pklimit_allow('login:dave', 3, '15 minutes') \\g /dev/null" \
			"ROLLBACK; -- wrong password $attempt: the request's transaction fails"
	done | q
	q <<'SQL'
BEGIN;
SET LOCAL platformkit.tenant = 'acme';
SELECT pklimit_count('login:dave') || ' ' || pklimit_allow('login:dave', 3, '15 minutes');
ROLLBACK;
SQL
)
read -r dave_count dave_fourth <<<"$rolled_back"
echo
echo "4. three login transactions for dave (tenant acme) rolled back after a wrong password:"
echo "   pklimit_count('login:dave') = $dave_count after the rollbacks; the fourth attempt: allowed = $dave_fourth"

# 5. A ban that outlasts the window, as fail2ban's bantime beside findtime
#    and maxretry: the most persistent sshd address again, 3 attempts per
#    5-second window, and a refusal bans it for an hour.  Once the window
#    has closed the address is still refused, its attempts not counted,
#    while the same attempts without a ban are allowed again.
addr=$(q -c "SELECT substr(key, 5) FROM demo_count WHERE phase = 'ssh' ORDER BY count DESC, key LIMIT 1")
ban=$(q -v addr="$addr" <<'SQL'
-- start at the beginning of a window, so that the attempts share one
SELECT pg_sleep(5 - extract(epoch FROM clock_timestamp()) % 5) \g /dev/null
CREATE TEMP TABLE ban AS
SELECT k, i, c.* FROM unnest(ARRAY['sshban:' || :'addr', 'sshnoban:' || :'addr']) k,
	generate_series(1, 4) i,	-- (i in the key's text makes one call per attempt)
	LATERAL pklimit_check(k || left(i::text, 0), 3, '5 seconds', block => CASE WHEN k LIKE 'sshban:%' THEN interval '1 hour' END) c;
SELECT pg_sleep(extract(epoch FROM max(reset_at) - clock_timestamp()) + 0.01) FROM ban WHERE k LIKE 'sshnoban:%' \g /dev/null
SELECT string_agg(format('%s %s %s %s', (SELECT string_agg(allowed::text, ',' ORDER BY b.count) FROM ban b WHERE b.k = c.k),
		c.allowed::text, c.count, round(extract(epoch FROM c.retry_after) / 60)), ' ' ORDER BY c.k)
  FROM unnest(ARRAY['sshban:' || :'addr', 'sshnoban:' || :'addr']) k,
	LATERAL (SELECT k, * FROM pklimit_check(k, 3, '5 seconds', block => CASE WHEN k LIKE 'sshban:%' THEN interval '1 hour' END)) c;
SQL
)
read -r ban_first ban_after ban_count ban_minutes noban_first noban_after noban_count _ <<<"$ban"
echo
echo "5. a ban longer than the window for $addr: pklimit_check('sshban:<addr>', 3, '5 seconds', block => '1 hour')"
echo "   four attempts: $ban_first (the fourth starts the ban); after the window: allowed = $ban_after, count = $ban_count, retry after $ban_minutes minutes"
echo "   the same without block: $noban_first; after the window: allowed = $noban_after, count = $noban_count"

# 6. A per-request API limit, on the memory path (durable => false): two
#    replicas make 500 requests each at once for the API key acme, under
#    a limit of 600 an hour; exactly 600 are allowed, the count is 1000, and
#    the row the DBA reads says 1000 once the worker has written it behind.
for replica in A B; do
	yes "SELECT pklimit_allow('api:acme', 600, '1 hour', durable => false);" | head -500 |
		q -A -t >"$WORKDIR/api.$replica" &
done
wait
api_allowed=$(cat "$WORKDIR"/api.A "$WORKDIR"/api.B | grep -c '^t$' || true)
api_count=$(q -c "SELECT pklimit_count('api:acme')")
api_row=$(q -c "DO \$\$ BEGIN
	FOR i IN 1 .. 600 LOOP
		EXIT WHEN EXISTS (SELECT FROM platformkit_limits WHERE key = 'g:api:acme' AND count = 1000);
		PERFORM pg_sleep(0.05);
	END LOOP; END \$\$;" -c "SELECT count FROM platformkit_limits WHERE key = 'g:api:acme'")
api_memory=$(q -c "SELECT memory_calls FROM pklimit_stats WHERE datname = current_database()")
echo
echo "6. a per-request API limit from replicas A and B at once: pklimit_allow('api:acme', 600, '1 hour', durable => false)"
echo "   1000 requests: $api_allowed allowed, pklimit_count = $api_count, the row written behind: count = $api_row; decided in memory: $api_memory"
echo "   (the other $((1000 - api_memory)) were applied durably by the worker, as a memory call is while its key is not in memory yet; then the worker read the key in)"

# 7. A concurrency limit (docs/leases.md): at most 2 exports at once per
#    tenant.  Replicas A and B try to start 3 exports each for tenant acme at
#    once: exactly 2 get a lease.  One export finishes and releases its
#    lease, and the next one starts; the tenant is full again, and another
#    tenant is not held up.  An export that crashes never releases its lease
#    (5 seconds): its slot frees itself when the lease ends.
acme() { q -c "SET platformkit.tenant = 'acme'" "$@"; }
for replica in A B; do
	{
		echo "SET platformkit.tenant = 'acme';"
		yes "SELECT pklimit_acquire('export', 2, '1 minute');" | head -3
	} | q >"$WORKDIR/export.$replica" &
done
wait
exports_granted=$(cat "$WORKDIR"/export.A "$WORKDIR"/export.B | grep -c . || true)
first_export=$(cat "$WORKDIR"/export.A "$WORKDIR"/export.B | grep . | head -n 1)
export_released=$(acme -c "SELECT pklimit_release('export', '$first_export')")
export_next=$(acme -c "SELECT token IS NOT NULL FROM pklimit_acquire_check('export', 2, '5 seconds')")
export_full=$(acme -c "SELECT concat_ws(',', token IS NULL, held, retry_after > '0') FROM pklimit_acquire_check('export', 2, '1 minute')")
export_other=$(q -c "SET platformkit.tenant = 'globex'" -c "SELECT pklimit_acquire('export', 2, '1 minute') IS NOT NULL")
export_freed=$(acme -c "DO \$\$ BEGIN
	FOR i IN 1 .. 600 LOOP
		EXIT WHEN (SELECT count(*) FROM pklimit_leases('export')) = 1;
		PERFORM pg_sleep(0.05);
	END LOOP; END \$\$;" -c "SELECT pklimit_acquire('export', 2, '1 minute') IS NOT NULL")
echo
echo "7. at most 2 exports at once per tenant, from replicas A and B at once: pklimit_acquire('export', 2, '1 minute') as tenant acme"
echo "   6 tries: $exports_granted leases; one released: $export_released, the next started: $export_next; full again (refused, held, retry_after > 0): $export_full"
echo "   tenant globex meanwhile: $export_other; a crashed export's 5-second lease ended by itself, and a new export started: $export_freed"

# ---------------------------------------------------------------- check ----
# For every key of phases 1 and 2: allowed = min(attempts, limit) and
# pklimit_count = attempts.  Phase 3: forget said true, alice allowed with a
# count of 1, bob refused with a count of his attempts + 1.
read -r nkeys nattempts bad <<<"$(q -F ' ' -c "
	SELECT count(*), sum(attempts), count(*) FILTER (WHERE allowed <> least(attempts, max_count) OR cnt <> attempts)
	FROM (SELECT a.phase, a.key, count(*) AS attempts, count(*) FILTER (WHERE a.allowed) AS allowed,
			min(a.max_count) AS max_count, min(c.count) AS cnt
		FROM demo_attempt a JOIN demo_count c USING (phase, key)
		WHERE a.phase IN ('ssh', 'login') GROUP BY a.phase, a.key) k")"
after_ok=$(q -c "
	SELECT count(*) = 2
	FROM demo_attempt a JOIN demo_count c USING (phase, key)
	WHERE phase = 'after' AND (
		(key = 'login:alice' AND allowed AND c.count = 1) OR
		(key = 'login:bob' AND NOT allowed AND c.count =
			(SELECT count(*) + 1 FROM demo_attempt WHERE phase = 'login' AND key = 'login:bob')))")
echo
if [ "$bad" -eq 0 ] && [ "$after_ok" = t ] && [ "$forgot" = t ] &&
	[ "$dave_count" = 3 ] && [ "$dave_fourth" = false ] &&
	[ "$ban_first" = true,true,true,false ] && [ "$ban_after" = false ] && [ "$ban_count" = 0 ] &&
	[ "$ban_minutes" = 60 ] && [ "$noban_first" = true,true,true,false ] && [ "$noban_after" = true ] &&
	[ "$noban_count" = 1 ] && [ "$purge_error" = none ] &&
	[ "$api_allowed" = 600 ] && [ "$api_count" = 1000 ] && [ "$api_row" = 1000 ] &&
	[ "$exports_granted" = 2 ] && [ "$export_released" = t ] && [ "$export_next" = t ] &&
	[ "$export_full" = t,2,t ] && [ "$export_other" = t ] && [ "$export_freed" = t ]; then
	echo "OK: for all $nkeys keys ($nattempts attempts from 2 concurrent replicas) allowed = min(attempts, limit) and pklimit_count = attempts; forget re-opened alice only; rolled-back attempts counted; the ban outlasted its window; the memory path kept the API limit exact and wrote it behind; at most 2 exports ran at once and a crashed one's lease ended by itself; pg_cron can run the purge"
else
	echo "FAILED: $bad of $nkeys keys broke allowed = min(attempts, limit) or pklimit_count = attempts; forget returned $forgot; alice allowed / bob refused after forget: $after_ok; dave after 3 rolled-back attempts: count $dave_count, fourth allowed $dave_fourth; ban: $ban; API limit on the memory path: $api_allowed allowed, count $api_count, row $api_row; exports: $exports_granted leases, release $export_released, next $export_next, full $export_full, other tenant $export_other, freed $export_freed; purge job's connection error: $purge_error"
	exit 1
fi
