#!/usr/bin/env bash
# A private PostgreSQL 15 server in a folder of its own, for the tests and scripts/cluster.sh:
#
#   scripts/private_postgres.sh start DIR [TCP_PORT]   initdb DIR/data (once), start the server, wait
#                                                      until it answers; prints its admin URL (a
#                                                      later start without TCP_PORT keeps the first)
#   scripts/private_postgres.sh stop DIR               stop it (fast shutdown), if it runs
#   scripts/private_postgres.sh restart DIR            stop, then start on the same ports
#   scripts/private_postgres.sh url DIR [DB]           the URL of database DB (default postgres)
#
# The server listens on a Unix socket in DIR (always) and, with TCP_PORT, on 127.0.0.1:TCP_PORT.
# Trust authentication for the superuser `postgres` (a private, local server). As root (CI) the
# server runs as the `postgres` user, which must be able to reach DIR. Exit 77 (skip) when the
# PostgreSQL binaries are missing outside CI.
set -euo pipefail
cmd=${1:?usage: private_postgres.sh start|stop|restart|url DIR [PORT|DB]}
dir=${2:?usage: private_postgres.sh start|stop|restart|url DIR [PORT|DB]}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

bindir=""
if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/postgres" ]; then bindir=$(pg_config --bindir); fi
if [ -z "$bindir" ]; then
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/postgres" ] && bindir=$d; done
fi
if [ -z "$bindir" ]; then
  echo "private_postgres: no PostgreSQL server binaries (install postgresql-15: scripts/setup.sh)" >&2
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi

as_owner() {  # runs a command as the server's user: postgres when we are root
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
# The Unix socket names the port even without TCP: 5432 unless TCP_PORT was given at start.
port_of() { cat "$dir/port" 2>/dev/null || echo 5432; }
url() { echo "postgresql://postgres@/${1:-postgres}?host=$dir&port=$(port_of)"; }

start() {
  local tcp_port=${1:-$(cat "$dir/port" 2>/dev/null || true)}  # a restart keeps the TCP port
  if [ "$(id -u)" = 0 ]; then
    if ! as_owner test -x "$dir"; then
      # A folder the user postgres cannot reach (under /root, say): the server's files go to a
      # folder of its own under /tmp, and DIR becomes a link to it (clients, as root, follow it).
      local real
      real=/tmp/inferscale-pg-$(printf '%s' "$dir" | md5sum | cut -c1-12)
      mkdir -p "$real"
      if [ ! -L "$dir" ]; then rmdir "$dir" 2>/dev/null || { echo "private_postgres: user postgres cannot reach $dir" >&2; exit 1; }; ln -s "$real" "$dir"; fi
    fi
    chown postgres: "$dir/"
  fi
  local srv
  srv=$(readlink -f "$dir")  # the server's own path to its folder
  if ! as_owner test -x "$srv"; then
    echo "private_postgres: user postgres cannot reach $srv (a parent folder is not searchable)" >&2
    exit 1
  fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_owner "$bindir/initdb" -D "$srv/data" -U postgres --auth=trust -E UTF8 --no-locale --no-sync >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  if [ -n "$tcp_port" ]; then echo "$tcp_port" >"$dir/port"; fi
  if as_owner "$bindir/pg_ctl" -D "$srv/data" status >/dev/null 2>&1; then url; return; fi  # already up
  local listen=""
  [ -n "$tcp_port" ] && listen=127.0.0.1
  as_owner "$bindir/pg_ctl" -D "$srv/data" -l "$srv/server.log" -w -t 30 start \
    -o "-k $srv -p $(port_of) -c listen_addresses='$listen' -c max_connections=300 -c shared_buffers=32MB" >/dev/null \
    || { tail -20 "$dir/server.log" >&2; exit 1; }
  url
}

stop() {
  [ -f "$dir/data/postmaster.pid" ] || return 0
  as_owner "$bindir/pg_ctl" -D "$(readlink -f "$dir")/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
}

case "$cmd" in
  start) start "${3:-}" ;;
  stop) stop ;;
  restart) stop; start ;;
  url) url "${3:-}" ;;
  *) echo "private_postgres: unknown command '$cmd'" >&2; exit 2 ;;
esac
