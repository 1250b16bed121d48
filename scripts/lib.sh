# Sourced by the scripts that start servers: each checks what it started
# and, when it did not start, exits non-zero with one line saying why.

# die MESSAGE: the one line, on stderr, and exit 1.
die() {
  echo "$(basename "$0"): $*" >&2
  exit 1
}

# port_free HOST:PORT dies when something already listens there: its
# /readyz would pass for ours, and its database would take our seeding.
port_free() {
  local host=${1%:*} port=${1##*:}
  if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
    die "$1 is already in use (another server?): stop it or pick a free port (${2:-PORT}=...)"
  fi
}

# await_ready URL PID LOG waits up to a minute for URL/readyz, served by
# PID: dies when PID has exited (its log's last line says why) or never
# became ready.
await_ready() {
  local url=$1 pid=$2 log=${3:-}
  for _ in $(seq 1 240); do
    if ! kill -0 "$pid" 2>/dev/null; then
      local why=""
      [ -n "$log" ] && [ -f "$log" ] && why=": $(tail -n 1 "$log")"
      die "the server for $url exited before it was ready$why"
    fi
    if curl -sf "$url/readyz" >/dev/null 2>&1; then
      # Ready, and still ours: a server that lost its port exits at once.
      kill -0 "$pid" 2>/dev/null && return 0
    fi
    sleep 0.25
  done
  die "the server for $url was not ready within 60 s${log:+ (log: $log)}"
}
