#!/usr/bin/env bash
# What the tests of the postgres scope start their own server with: PostgreSQL's initdb and
# pg_ctl, and pgbouncer (python/ctxlock/_bench/pg_server.py), and libpq for their client.
# When one is missing and this runs as root on a system with apt-get, installs the Debian
# packages `postgresql`, `pgbouncer` and `libpq5` (the tests never use the system's own
# cluster: they run a server of their own). Otherwise says what is missing and exits 0; the
# test session then says why it cannot run those tests. Quiet when nothing is to do; every
# step is bounded.
set -euo pipefail

have_initdb() {
	local dir
	for dir in /usr/lib/postgresql/*/bin; do
		[ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && return 0
	done
	command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1
}

have_pgbouncer() {
	command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]
}

# The tests' client (psycopg, pure Python) loads the system's libpq.
have_libpq() {
	# grep reads it all (no -q): an early exit would fail the pipe under pipefail.
	{ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep 'libpq\.so\.5 ' >/dev/null
}

packages=()
have_initdb || packages+=(postgresql)
have_pgbouncer || packages+=(pgbouncer)
have_libpq || packages+=(libpq5)
[ ${#packages[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-postgres: missing ${packages[*]} (install them, as root: apt-get install ${packages[*]});" \
		"the tests of the postgres scope need them" >&2
	exit 0
fi

echo "ensure-postgres: installing ${packages[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
apt_get() {
	timeout 600 apt-get -q -y -o Dpkg::Use-Pty=0 -o DPkg::Lock::Timeout=120 "$@" >>"$log" 2>&1
}
# A fresh machine may have no package lists yet; refresh them only if the install needs it.
if ! apt_get install --no-install-recommends "${packages[@]}"; then
	apt_get update && apt_get install --no-install-recommends "${packages[@]}" || {
		cat "$log" >&2
		echo "ensure-postgres: could not install ${packages[*]}" >&2
		exit 1
	}
fi
