#!/usr/bin/env bash
# Presence on several gateway processes of one machine, all on loopback:
# GATEWAYS gateways (role presence) and one worker share a Redis; as many
# loadgen processes as gateways hold USERS_PER_GATEWAY × GATEWAYS users
# between them (user i follows (FOLLOW·i + k) mod population, so followers
# and the users they follow sit on different gateways), spread over every
# gateway, and make CHANGES_PER_GATEWAY × GATEWAYS status changes a second
# for STEADY. The load per gateway stays the same whatever GATEWAYS is, so
# runs with 1, 2 and 4 gateways show how presence scales out:
#
#   for g in 1 2 4; do GATEWAYS=$g scripts/presence-scale.sh; done
#
# and 50,000 sessions × 20 follows at 1,000 changes/s on three gateways:
#
#   GATEWAYS=3 USERS_PER_GATEWAY=16667 CHANGES_PER_GATEWAY=333 DURATION=200s scripts/presence-scale.sh
#
# Needs PRESENCED_REDIS_URL, PRESENCED_POSTGRES_URL, PRESENCED_JWT_SECRET and
# PRESENCED_API_KEY in the environment (see docs/presence.md, Load test).
# Each loadgen prints its own report (connect, memory, CPU of each gateway
# during the changes, send-to-receive for its own users' changes and
# publish-to-receive for the others'); the script keeps them in OUT and
# prints the lines that compare runs. A process holds at most 20,000 open
# files here: keep USERS_PER_GATEWAY under PRESENCED_HTTP_MAX_CONNECTIONS.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

GATEWAYS=${GATEWAYS:-1}
USERS_PER_GATEWAY=${USERS_PER_GATEWAY:-5000}
CHANGES_PER_GATEWAY=${CHANGES_PER_GATEWAY:-250}
FOLLOW=${FOLLOW:-20}
STEADY=${STEADY:-30s}
# bounds each loadgen: setup, connects and checks must end within DURATION + 2m
DURATION=${DURATION:-60s}
PORT=${PORT:-8111}
CONNECT_RATE=${CONNECT_RATE:-1000}
IN_FLIGHT=${IN_FLIGHT:-256}
OUT=${OUT:-$(mktemp -d)}
export PRESENCED_HTTP_MAX_CONNECTIONS=${PRESENCED_HTTP_MAX_CONNECTIONS:-19500}
export PRESENCED_HTTP_MAX_CONNECTIONS_PER_IP=0
for v in PRESENCED_REDIS_URL PRESENCED_POSTGRES_URL PRESENCED_JWT_SECRET PRESENCED_API_KEY; do
  if [ -z "${!v:-}" ]; then
    echo "$v is not set (see docs/presence.md, Load test)" >&2
    exit 2
  fi
done
for p in $(seq $((PORT - 1)) $((PORT + GATEWAYS - 1))); do port_free "127.0.0.1:$p"; done
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
mkdir -p "$OUT"
bin=${BIN:-}
if [ -z "$bin" ]; then
  bin="$OUT/presenced"
  go build -o "$bin" .
fi

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

"$bin" serve --listen "127.0.0.1:$((PORT - 1))" --roles worker >"$OUT/worker.log" 2>&1 &
pids+=($!)
logs=("$OUT/worker.log")
gws=()
for g in $(seq 0 $((GATEWAYS - 1))); do
  "$bin" serve --listen "127.0.0.1:$((PORT + g))" --roles presence >"$OUT/gateway$g.log" 2>&1 &
  pids+=($!)
  logs+=("$OUT/gateway$g.log")
  gws+=("http://127.0.0.1:$((PORT + g))")
done
urls=("http://127.0.0.1:$((PORT - 1))" "${gws[@]}")
for i in "${!urls[@]}"; do await_ready "${urls[i]}" "${pids[i]}" "${logs[i]}"; done
list=$(IFS=,; echo "${gws[*]}")

total=$((USERS_PER_GATEWAY * GATEWAYS))
sources=$(((USERS_PER_GATEWAY + 24999) / 25000))
echo "$GATEWAYS gateway(s), $total users following $FOLLOW each, $((CHANGES_PER_GATEWAY * GATEWAYS)) changes/s for $STEADY; load average before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary"
lgs=()
for k in $(seq 0 $((GATEWAYS - 1))); do
  "$bin" loadgen presence --gateways "$list" \
    --users "$USERS_PER_GATEWAY" --user-offset $((k * USERS_PER_GATEWAY)) --user-total "$total" \
    --follow "$FOLLOW" --follow-shape spread --changes "$CHANGES_PER_GATEWAY" --steady "$STEADY" \
    --connect-rate "$CONNECT_RATE" --in-flight "$IN_FLIGHT" --settle 5s --ping-every 60s \
    --source-base $((2 + k * sources)) --sources "$sources" --max-errors 10 \
    --user-prefix "scale$GATEWAYS" -d "$DURATION" >"$OUT/loadgen$k.txt" 2>"$OUT/loadgen$k.err" &
  lgs+=($!)
done
status=0
for p in "${lgs[@]}"; do wait "$p" || status=1; done
for k in $(seq 0 $((GATEWAYS - 1))); do
  echo "-- loadgen $k" >>"$OUT/summary"
  grep -E '^(connect |CPU during the changes|server RSS per connection|deliveries/expected|send to receive|publish to receive)' \
    "$OUT/loadgen$k.txt" >>"$OUT/summary" || true
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); reports in $OUT" >>"$OUT/summary"
cat "$OUT/summary"
exit $status
