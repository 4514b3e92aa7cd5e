#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for the shared-study tests (Debian's postgresql package).
#   .ci/postgres.sh start DIR   -> initialises DIR, starts the server, prints its URL on stdout
#   .ci/postgres.sh stop DIR    -> stops it
# Trust authentication on 127.0.0.1 only: the URL's password is accepted as given (the tests check that it
# never appears in what fusionsearch prints). As root the server runs as the package's `postgres` user.
set -euo pipefail
cmd=$1
dir=$2
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] || { echo "no PostgreSQL server: apt-get install postgresql" >&2; exit 1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case $cmd in
start)
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
  as_pg "$bin/initdb" -D "$dir/data" -A trust -U fusionsearch >"$dir/initdb.log"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200" start >/dev/null
  as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U fusionsearch fusionsearch_test
  echo "postgresql://fusionsearch:ci-secret-pw@127.0.0.1:$port/fusionsearch_test"
  ;;
stop)
  as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
  ;;
*)
  echo "usage: .ci/postgres.sh start|stop DIR" >&2
  exit 2
  ;;
esac
