# scripts/common.sh: shared set-up for the demo, the tests and CI.
#
# Sourced, not run.  As root on Debian 12 it installs what is missing, builds
# and installs pklimit, and starts a throwaway PostgreSQL cluster (pklimit and
# pg_cron preloaded) owned by the unprivileged "postgres" user, because
# PostgreSQL refuses to run as root.  The cluster is removed on exit.

set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

PG_MAJOR=${PG_MAJOR:-15}
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PKLIMIT_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PKLIMIT_PORT=${PKLIMIT_PORT:-55432}
PKLIMIT_DB=${PKLIMIT_DB:-pklimit}
RUN_AS=postgres

log() { printf '== %s\n' "$*" >&2; }

# One run that installs pklimit into the system's PostgreSQL (a test run, the
# demo, a benchmark) at a time on a machine: a second one's make install
# would change the first's pklimit under its tests.  The others wait; what a
# run starts (test/run.sh's versions, its demo) holds the lock with it.
lock_machine() {
	[ -n "${PKLIMIT_LOCKED:-}" ] && return 0
	exec 9>/var/lock/pklimit-install.lock
	if ! flock -n 9; then
		log "waiting for another pklimit test, demo or benchmark on this machine to end"
		flock 9
	fi
	export PKLIMIT_LOCKED=1
}

install_packages() {
	lock_machine
	local pkgs=(postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR
		postgresql-$PG_MAJOR-cron libipc-run-perl make gcc rsync "$@")
	local missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		apt_get update -qq
		apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
}

# Build as the unprivileged user in a scratch copy, install as root.
build_and_install() {
	WORKDIR=$(mktemp -d /tmp/pklimit.XXXXXX)
	chmod 755 "$WORKDIR"
	BUILD_DIR=$WORKDIR/build
	rsync -a --exclude .git --exclude '*.o' --exclude '*.so' --exclude '*.bc' \
		--exclude results --exclude tmp_check --exclude 'regression.*' \
		"$PKLIMIT_SRC"/ "$BUILD_DIR"/
	chown -R $RUN_AS "$WORKDIR"
	log "building pklimit"
	as_user make -C "$BUILD_DIR" PG_CONFIG=$PG_BIN/pg_config >/dev/null
	make -C "$BUILD_DIR" PG_CONFIG=$PG_BIN/pg_config install >/dev/null
}

as_user() { runuser -u $RUN_AS -- env PATH="$PG_BIN:$PATH" "$@"; }

# start_node DATA PORT LOG CONF: initdb a cluster in DATA listening only on
# a socket in $WORKDIR, durable, with the lines CONF added; start it.
start_node() {
	as_user initdb -D "$1" -A trust -U postgres --no-sync >/dev/null
	cat >>"$1/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$WORKDIR'
port = $2
fsync = on
synchronous_commit = on
$4
CONF
	as_user pg_ctl -D "$1" -l "$3" -w start >/dev/null
}

# Start a cluster in $WORKDIR/data listening only on a socket in $WORKDIR.
start_cluster() {
	log "starting a throwaway cluster on port $PKLIMIT_PORT"
	start_node "$WORKDIR/data" "$PKLIMIT_PORT" "$WORKDIR/server.log" "\
shared_preload_libraries = 'pklimit,pg_cron'
cron.database_name = '$PKLIMIT_DB'
max_connections = ${PKLIMIT_MAX_CONNECTIONS:-100}
${PKLIMIT_EXTRA_CONF:-}"
	trap stop_cluster EXIT
	export PGHOST=$WORKDIR PGPORT=$PKLIMIT_PORT PGUSER=postgres
	as_user createdb "$PKLIMIT_DB"
}

stop_cluster() {
	as_user pg_ctl -D "$WORKDIR/data" -m immediate stop >/dev/null 2>&1 || true
	if [ -z "${PKLIMIT_KEEP:-}" ]; then
		rm -rf "$WORKDIR"
	else
		log "kept $WORKDIR; start it again with: runuser -u $RUN_AS -- $PG_BIN/pg_ctl -D $WORKDIR/data -l $WORKDIR/server.log start; then psql -h $WORKDIR -p $PKLIMIT_PORT -U postgres $PKLIMIT_DB"
	fi
}

# psql against the throwaway cluster.
q() { as_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres psql -X -v ON_ERROR_STOP=1 -qAt -d "$PKLIMIT_DB" "$@"; }
