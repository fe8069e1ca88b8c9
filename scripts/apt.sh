# scripts/apt.sh: apt-get that waits for the package system's locks.
#
# Sourced, not run.  apt_get runs apt-get with its arguments (apt_wait any
# apt-get command line, one in a chroot say); while another apt or dpkg (an
# unattended upgrade, a second test run) holds the dpkg or package-list
# lock, it waits for it, trying again every 5 s for up to 10 minutes in
# all, instead of failing at once.  apt-get's own DPkg::Lock::Timeout covers
# the dpkg lock only, not the lists lock that apt-get update takes.

apt_get() { apt_wait env DEBIAN_FRONTEND=noninteractive apt-get "$@"; }

# apt_wait COMMAND...: runs an apt-get command line (in a chroot, say),
# waiting while another apt or dpkg holds a lock it needs, as apt_get does;
# prints its output, on stderr if it fails.
apt_wait() {
	local out rc said= until=$((SECONDS + 600))
	while :; do
		rc=0
		out=$("$@" 2>&1) || rc=$?
		if [ "$rc" -eq 0 ]; then
			[ -n "$out" ] && printf '%s\n' "$out"
			return 0
		fi
		if ! grep -qE 'Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock' <<<"$out" ||
			[ "$SECONDS" -ge "$until" ]; then
			printf '%s\n' "$out" >&2
			return "$rc"
		fi
		[ -n "$said" ] || printf '== %s: waiting for another apt or dpkg to let go of its lock\n' "$*" >&2
		said=1
		sleep 5
	done
}
