#!/usr/bin/env bash
# Runs the whole test suite against real Redis and PostgreSQL. The test
# helpers start private servers from redis-server and the PostgreSQL server
# binaries; this script makes sure redis-server and stripe-mock are
# installed first, and runs presenced.js's Node tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing redis-server (the tests need a real Redis)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    echo "the tests need redis-server: apt-get install redis-server (or brew install redis)" >&2
    exit 1
  fi
fi

# stripe-mock, Stripe's official API mock, for the Stripe adapter's tests; the
# test helpers start it like redis-server (from PATH or go install's folder).
if ! command -v stripe-mock >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/stripe-mock" ]; then
  echo "installing stripe-mock (the Stripe adapter's tests need it)"
  go install github.com/stripe/stripe-mock@v0.203.0
fi

# presenced.js, the browser client: its state machine under Node's own
# test runner, with a fake socket.
if ! command -v node >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing nodejs (the browser client's tests need Node 20+)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null
  else
    echo "the browser client's tests need Node 20+: apt-get install nodejs (or brew install node)" >&2
    exit 1
  fi
fi
node --test web/pages/jstest/

# The Go tests; the pages' browser tests need Chromium (apt-get install
# chromium) and skip without it, except on CI (.ci/run installs it).
exec go test -race -count=1 -timeout 40m "$@" ./...
