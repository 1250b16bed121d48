#!/usr/bin/env bash
# The demo in one command: a development server with every role, the demo
# arena and hotels seeded, the arena's waiting room open, and the index in
# your browser. Ctrl-C stops it. State lives in ./var (reused next time).
#   bash scripts/demo.sh            # http://127.0.0.1:8080/
#   LISTEN=127.0.0.1:9090 bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

listen=${LISTEN:-127.0.0.1:8080}
url="http://$listen"
port_free "$listen" LISTEN
mkdir -p var
go build -o var/presenced . || die "the build failed (above)"

var/presenced serve --listen "$listen" &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null' EXIT INT TERM
await_ready "$url" "$server"

var/presenced demo >/dev/null || die "seeding the demo failed (above)"
key=$(var/presenced token --api-key 2>/dev/null) || die "no API key from presenced token --api-key"
# A line in front of the arena: 50 checkouts at a time, 10 let in a second.
curl -sf -X PUT -H "X-API-Key: $key" -d '{"capacity":50,"batch":10}' \
  "$url/v1/admin/waitingrooms/demo-arena" >/dev/null || die "opening the arena's waiting room failed"

cat <<INFO

  presenced demo: $url/
    hotels    $url/demo/hotels
    presence  $url/demo/presence      (sign in as anyone; open a second browser as a contact)
    sale      $url/demo/sale/demo-arena
    ops       $url/demo/ops           (API key: $key)

INFO
if command -v xdg-open >/dev/null 2>&1; then xdg-open "$url/" >/dev/null 2>&1 || true
elif command -v open >/dev/null 2>&1; then open "$url/" || true
fi
wait "$server"
