#!/bin/sh
# The postgres image's first start, for the Debian stand-in: an empty PGDATA
# becomes a cluster whose superuser is POSTGRES_USER (password
# POSTGRES_PASSWORD, required over the network) with the database
# POSTGRES_DB; the *.sql and *.sh files of /docker-entrypoint-initdb.d run
# once, in name order, on a server reachable only by its socket. Later
# starts find the cluster and skip all of it.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}

if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb -D "$PGDATA" --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$db" != postgres ]; then
    psql -v ON_ERROR_STOP=1 -q --username="$user" --dbname=postgres --set=db="$db" <<'SQL'
CREATE DATABASE :"db";
SQL
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case $f in
      *.sql) echo "running $f"; psql -v ON_ERROR_STOP=1 -q --username="$user" --dbname="$db" -f "$f" ;;
      *.sh) echo "running $f"; . "$f" ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "PostgreSQL init process complete; ready for start up."
fi
exec "$@"
