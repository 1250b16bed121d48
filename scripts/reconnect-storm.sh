#!/usr/bin/env bash
# The reconnect storm: CLIENTS (2000) Node clients running presenced.js's
# connection layer hold a viewers socket each against a development server;
# the server is restarted (SIGTERM, then started again) and the clients'
# reconnects are measured: accepts per second during the storm. The server
# drains with 1012 and a reconnect delay drawn from [reconnect_min_wait,
# reconnect_max_wait); clients that find it still down back off with full
# jitter. Needs Node 20+ (its WebSocket, behind --experimental-websocket on 20).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

CLIENTS=${CLIENTS:-2000}
PORT=${PORT:-18099}
# MODE=restart: SIGTERM (the server drains with 1012); MODE=crash: SIGKILL,
# and the server stays down DOWN seconds (the clients' own backoff spreads them).
MODE=${MODE:-restart}
DOWN=${DOWN:-15}
# PROTOCOL=viewers (a count subscription each) or presence (a signed-in
# Presence following five others, resubscribed after the reconnect).
PROTOCOL=${PROTOCOL:-viewers}
url="http://127.0.0.1:$PORT"
port_free "127.0.0.1:$PORT"
work=$(mktemp -d)
bin="$work/presenced"
go build -o "$bin" .

start() {
  "$bin" serve --listen "127.0.0.1:$PORT" --data-dir "$work/var" >>"$work/serve.log" 2>&1 &
  echo $! >"$work/pid"
  await_ready "$url" "$(cat "$work/pid")" "$work/serve.log"
}
stop() {
  local pid
  pid=$(cat "$work/pid")
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}
trap 'stop; for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done' EXIT

start
"$bin" demo --data-dir "$work/var" >/dev/null || die "seeding the demo failed; see $work/serve.log"
node --experimental-websocket scripts/reconnect-storm.mjs --url "$url" --clients "$CLIENTS" \
  --hotel lisbon-100 --protocol "$PROTOCOL" --ready "$work/ready" >"$work/storm.out" 2>&1 &
storm=$!
while [ ! -f "$work/ready" ]; do
  if ! kill -0 "$storm" 2>/dev/null; then die "the clients did not connect: $(tail -n 1 "$work/storm.out")"; fi
  sleep 0.2
done
echo "$CLIENTS clients connected; restarting the server ($MODE)"
if [ "$MODE" = crash ]; then
  kill -KILL "$(cat "$work/pid")"
  sleep "$DOWN"
else
  stop
fi
start
echo "server back; waiting for the clients"
rc=0
wait "$storm" || rc=$?
cat "$work/storm.out"
echo "server log: $work/serve.log"
exit $rc
