#!/usr/bin/env bash
# Compare presence builds on a two-core machine the fair way: the server of
# each build (roles presence,worker) on core 0 with Redis, one load
# generator on core 1, the builds alternated A B B A in every round (the
# second of two back-to-back runs tends to be the worse one, whichever
# build it is). One line per run; the load generator's full reports stay
# in OUT.
#
#   scripts/presence-bench.sh connects be57c8b HEAD   # 10,000 connects following 20
#   scripts/presence-bench.sh fanout main HEAD        # the issue-17 fan-out shape
#   ROUNDS=2 IN_FLIGHT=1000 scripts/presence-bench.sh connects HEAD
#
# connects: --users 10000 --follow 20 --in-flight IN_FLIGHT (500), uncapped;
# prints the connect time, refusals and the server's and Redis's CPU per
# connect. fanout: 2,000 users, user i follows (20i+k) mod 2,000, 1,000
# changes/s for 20 s; prints send-to-receive, CPU and lost deliveries.
#
# Needs PRESENCED_REDIS_URL (a redis-server of its own, pinned to core 0:
# taskset -c 0 redis-server --port 6390 --save ''), PRESENCED_POSTGRES_URL,
# PRESENCED_JWT_SECRET and PRESENCED_API_KEY (see docs/presence.md, Load
# test). Each run uses its own user prefix, so runs do not see each
# other's sessions. Compare builds within one run of this script, never
# across sittings: the same build measured on different days differed by
# half.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

usage() { echo "usage: $0 connects|fanout REV [REV...]" >&2; exit 2; }
[ $# -ge 2 ] || usage
shape=$1; shift
case $shape in connects|fanout) ;; *) usage ;; esac
for v in PRESENCED_REDIS_URL PRESENCED_POSTGRES_URL PRESENCED_JWT_SECRET PRESENCED_API_KEY; do
  if [ -z "${!v:-}" ]; then
    echo "$v is not set (see docs/presence.md, Load test)" >&2
    exit 2
  fi
done
ROUNDS=${ROUNDS:-1}
IN_FLIGHT=${IN_FLIGHT:-500}
PORT=${PORT:-8111}
OUT=${OUT:-$(mktemp -d)}
export PRESENCED_HTTP_MAX_CONNECTIONS=${PRESENCED_HTTP_MAX_CONNECTIONS:-19500}
export PRESENCED_HTTP_MAX_CONNECTIONS_PER_IP=0
port_free "127.0.0.1:$PORT"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
mkdir -p "$OUT"

# Each revision is built from its own tree; the last one's load generator
# measures every build.
revs=()
for rev in "$@"; do
  revs+=("${rev//\//_}")
  src="$OUT/src-${revs[-1]}"
  rm -rf "$src" && mkdir -p "$src"
  git archive "$rev" | tar -x -C "$src"
  (cd "$src" && go build -o "$OUT/presenced-${revs[-1]}" .)
done
loadgen="$OUT/presenced-${revs[-1]}"

srv=
stop() {
  if [ -n "$srv" ]; then kill -INT "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; srv=; fi
}
trap stop EXIT

# quiet waits (up to QUIET_WAIT seconds, 300) until the one-minute load
# average is under QUIET (1.5): a figure taken on a busy machine measures
# the machine. A run that had to start anyway says so.
QUIET=${QUIET:-1.5}
QUIET_WAIT=${QUIET_WAIT:-300}
quiet() {
  local waited=0 load
  while load=$(cut -d' ' -f1 /proc/loadavg) && awk -v l="$load" -v q="$QUIET" 'BEGIN { exit !(l >= q) }'; do
    if [ "$waited" -ge "$QUIET_WAIT" ]; then
      echo "warning: load average $load is still >= $QUIET after ${QUIET_WAIT}s; measuring anyway" >&2
      return
    fi
    sleep 5
    waited=$((waited + 5))
  done
}

run() { # run REV N
  local rev=$1 n=$2 log="$OUT/$shape-$1-$2.txt"
  quiet
  taskset -c 0 "$OUT/presenced-$rev" serve --listen "127.0.0.1:$PORT" --roles presence,worker >"$OUT/server-$rev-$n.log" 2>&1 &
  srv=$!
  await_ready "http://127.0.0.1:$PORT" "$srv" "$OUT/server-$rev-$n.log"
  local args=(--target "http://127.0.0.1:$PORT" --user-prefix "bench$RANDOM$n" --connect-rate 0 --in-flight "$IN_FLIGHT")
  if [ "$shape" = connects ]; then
    args+=(--users 10000 --follow 20 --changes 0 --steady 1s --settle 1s -d 60s)
  else
    args+=(--users 2000 --follow 20 --follow-shape spread --changes 1000 --steady 20s -d 30s)
  fi
  taskset -c 1 "$loadgen" loadgen presence "${args[@]}" >"$log" 2>&1 || true
  stop
  if [ "$shape" = connects ]; then
    local secs cpu
    secs=$(sed -nE 's/^connect  .* in ([0-9.]+)(m?s) .*/\1 \2/p' "$log" | awk '{print ($2=="ms") ? $1/1000 : $1}')
    cpu=$(sed -nE 's/^CPU while connecting +server ([0-9.]+) %, Redis ([0-9.]+) %.*load average (.*)/\1 \2 \3/p' "$log")
    read -r s r load <<<"$cpu"
    awk -v rev="$rev" -v t="${secs:-0}" -v s="${s:-0}" -v r="${r:-0}" -v load="$load" \
      -v refused="$(sed -nE 's/^connect refusals +([0-9]+) upgrades.*/\1/p' "$log")" \
      'BEGIN { printf "%-12s %6.3f s  server %.3f ms  Redis %.3f ms per connect  refused %s  load %s\n", rev, t, s*t/1000, r*t/1000, refused, load }'
  else
    printf '%-12s %s | %s | %s\n' "$rev" \
      "$(sed -nE 's/^send to receive +(.*) over.*/\1/p' "$log")" \
      "$(sed -nE 's/^CPU during the changes +(.*) of one core.*load average (.*)/\1 load \2/p' "$log")" \
      "$(grep -oE '[0-9]+ lost' "$log" | head -1)"
  fi
}

n=0
for _ in $(seq 1 "$ROUNDS"); do
  order=("${revs[@]}")
  for ((i = ${#revs[@]} - 1; i >= 0; i--)); do order+=("${revs[i]}"); done
  for rev in "${order[@]}"; do
    n=$((n + 1))
    run "$rev" "$n"
  done
done
echo "reports in $OUT"
