#!/usr/bin/env bash
# Runs the whole test suite against real Redis and PostgreSQL. The test
# helpers start private servers from redis-server and the PostgreSQL server
# binaries; this script makes sure redis-server, pgbouncer and stripe-mock
# are installed first, and runs presenced.js's Node tests.
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

# pgbouncer, for the tests that run presenced behind a transaction-mode
# pooler (store and app); Debian installs it into /usr/sbin, where the test
# helpers look.
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing pgbouncer (the pooler tests need it)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  else
    echo "the tests need pgbouncer: apt-get install pgbouncer (or brew install pgbouncer)" >&2
    exit 1
  fi
fi

# stripe-mock, Stripe's official API mock, for the Stripe adapter's tests; the
# test helpers start it like redis-server (from PATH or go install's folder).
if ! command -v stripe-mock >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/stripe-mock" ]; then
  echo "installing stripe-mock (the Stripe adapter's tests need it)"
  go install github.com/stripe/stripe-mock@v0.203.0 ||
    { echo "could not build stripe-mock v0.203.0 from the Go module proxy (above)" >&2; exit 1; }
fi

# helm for the chart's tests (deploy/helm) and promtool for the alert rules'
# (deploy/prometheus), built once from the Go module proxy at pinned versions.
. scripts/tools.sh
PRESENCED_TEST_HELM=$(presenced_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION")
PRESENCED_TEST_PROMTOOL=$(presenced_tool promtool github.com/prometheus/prometheus/cmd/promtool "$PROMETHEUS_VERSION")
export PRESENCED_TEST_HELM PRESENCED_TEST_PROMTOOL

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
