# scripts/apt.sh: apt-get that waits for the package system's locks.
#
# Sourced, not run.  apt_get runs apt-get with its arguments; while another
# apt or dpkg (an unattended upgrade, a second test run) holds the dpkg or
# package-list lock, it waits for it, trying again every 5 s for up to 10
# minutes in all, instead of failing at once.  apt-get's own
# DPkg::Lock::Timeout covers the dpkg lock only, not the lists lock that
# apt-get update takes.

apt_get() {
	local out rc said= until=$((SECONDS + 600))
	while :; do
		rc=0
		out=$(DEBIAN_FRONTEND=noninteractive apt-get \
			-o DPkg::Lock::Timeout=$((until - SECONDS > 0 ? until - SECONDS : 0)) "$@" 2>&1) || rc=$?
		if [ "$rc" -eq 0 ]; then
			[ -n "$out" ] && printf '%s\n' "$out"
			return 0
		fi
		if ! grep -qE 'Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock' <<<"$out" ||
			[ "$SECONDS" -ge "$until" ]; then
			printf '%s\n' "$out" >&2
			return "$rc"
		fi
		[ -n "$said" ] || printf '== apt-get %s: waiting for another apt or dpkg to let go of its lock\n' "$1" >&2
		said=1
		sleep 5
	done
}
