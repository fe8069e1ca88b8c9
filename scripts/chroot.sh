#!/usr/bin/env bash
# scripts/chroot.sh: a Debian chroot with one PostgreSQL major, for testing
# pklimit on the versions the host's Debian does not ship.
#
#   bash scripts/chroot.sh 17 [command ...]    trixie, PostgreSQL 17
#   bash scripts/chroot.sh 18 [command ...]    sid, PostgreSQL 18
#   PKLIMIT_COPY_SRC=<dir> ...                  copy <dir> to /opt/pklimit first
#
# As root.  Builds the chroot with debootstrap (--variant=minbase) from the
# package mirror the host's apt uses, installs PostgreSQL, its server headers,
# pg_cron and the build and test tools, and runs the command inside (with
# /proc, /dev and a fresh /dev/shm mounted, unmounted again on exit).  The
# chroot lives outside the clone, in $PKLIMIT_CHROOTS (default
# /var/cache/pklimit/chroots), and is reused on the next run once its
# packages have been brought up to date; a new machine builds it from nothing
# (about a minute).

set -euo pipefail
source "$(dirname "$0")/apt.sh"

major=${1:?usage: scripts/chroot.sh <15|17|18> [command ...]}
shift
case $major in
	15) suite=bookworm ;;
	17) suite=trixie ;;
	18) suite=sid ;;
	*) echo "scripts/chroot.sh: no Debian suite for PostgreSQL $major" >&2; exit 2 ;;
esac
root=${PKLIMIT_CHROOTS:-/var/cache/pklimit/chroots}/$suite
packages=(postgresql-$major postgresql-server-dev-$major postgresql-$major-cron
	libipc-run-perl make gcc rsync perl ca-certificates)

log() { printf '== %s\n' "$*" >&2; }

# The Debian mirror of the host's apt sources, where its main suite is.
mirror() {
	local uri
	uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' \
		/etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$uri" ] || uri=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ { print $2; exit }' \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
	echo "${PKLIMIT_MIRROR:-${uri:-http://deb.debian.org/debian}}"
}

mounted=()
unmount_all() {
	local i
	for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
		umount -l "${mounted[$i]}" 2>/dev/null || true
	done
	mounted=()
}
trap unmount_all EXIT

mount_into() {			# mount_into <target> <mount args...>
	local target=$1
	shift
	mountpoint -q "$target" && return 0
	mount "$@" "$target"
	mounted+=("$target")
}

in_chroot() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
	LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

if [ ! -e "$root/.pklimit-ready" ]; then
	command -v debootstrap >/dev/null || {
		apt_get update -qq
		apt_get install -y -qq --no-install-recommends debootstrap >/dev/null
	}
	rm -rf "$root"
	mkdir -p "$(dirname "$root")"
	log "building a $suite chroot in $root from $(mirror)"
	debootstrap --variant=minbase "$suite" "$root" "$(mirror)" >"$root.log" 2>&1 ||
		{ tail -20 "$root.log" >&2; exit 1; }
fi

# What the chroot needs from the host: name resolution, CA certificates (for
# npm and https mirrors) and a mirror whose snapshot may be older than its
# Release file's Valid-Until (sid's expires within days).
cp /etc/resolv.conf "$root/etc/resolv.conf"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
	mkdir -p "$root/usr/local/share/ca-certificates"
	cp /etc/ssl/certs/ca-certificates.crt "$root/usr/local/share/ca-certificates/host.crt"
fi
echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99pklimit"
# never start services inside the chroot
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"

mount_into "$root/proc" -t proc proc
mount_into "$root/dev" --bind /dev
mount_into "$root/dev/shm" -t tmpfs -o mode=1777 tmpfs

# Installing prints much that is no error inside a chroot (no /dev/pts, no
# FQDN, services not started): it goes to a log, shown when a step fails.
log "bringing the $suite chroot's packages up to date (log: $root.setup.log)"
: >"$root.setup.log"
for step in "update -qq" "install -y -qq --no-install-recommends ${packages[*]}" "upgrade -y -qq"; do
	# shellcheck disable=SC2086 # the step's words
	if ! apt_wait in_chroot apt-get $step >>"$root.setup.log" 2>&1; then
		tail -n 20 "$root.setup.log" >&2
		log "apt-get ${step%% *} failed in the $suite chroot: the whole log is $root.setup.log"
		exit 1
	fi
done
touch "$root/.pklimit-ready"

# the source tree to test, copied to /opt/pklimit inside
if [ -n "${PKLIMIT_COPY_SRC:-}" ]; then
	mkdir -p "$root/opt/pklimit"
	rsync -a --delete --exclude .git --exclude '*.o' --exclude '*.so' --exclude '*.bc' \
		--exclude results --exclude tmp_check --exclude 'regression.*' \
		"$PKLIMIT_COPY_SRC"/ "$root/opt/pklimit"/
fi

if [ $# -gt 0 ]; then
	in_chroot "$@"
fi
