// Package testenv gives tests real stores: a private redis-server, a
// three-node Redis Cluster and a private PostgreSQL, started once per test
// binary on free ports and stopped when it exits. PRESENCED_TEST_REDIS_URL,
// PRESENCED_TEST_REDIS_CLUSTER_URL and PRESENCED_TEST_POSTGRES_URL (an admin
// DSN; each package gets a fresh database in it) use servers already running.
//
// Every package using it calls testenv.Main from TestMain.
package testenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/presenced/presenced/store"
)

var (
	mu       sync.Mutex
	cleanups []func()
	seq      atomic.Int64
)

// Main runs the package's tests, then stops every server they started.
// go-redis's own log lines (tests stop Redis on purpose) go where Logger's
// do.
func Main(m *testing.M) {
	store.RouteRedisLog(Logger())
	code := m.Run()
	mu.Lock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	mu.Unlock()
	os.Exit(code)
}

func atExit(f func()) {
	mu.Lock()
	cleanups = append(cleanups, f)
	mu.Unlock()
}

// Prefix is a key prefix unique to this test, so tests may share a Redis.
func Prefix(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_", "{", "", "}", "").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t%d_%d_%s:", os.Getpid(), seq.Add(1), name)
}

// Logger discards logs unless PRESENCED_TEST_LOG=1.
func Logger() *slog.Logger {
	if os.Getenv("PRESENCED_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Context is canceled when the test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %s", timeout, fmt.Sprintf(format, args...))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
