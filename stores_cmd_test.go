package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/store"
)

// runBinary runs the presenced binary with extra environment and returns
// its stderr and exit code.
func runBinary(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stderr.String(), code
}

// Stores that do not answer: the process says what it waits for while it
// waits, gives up after postgres.connect_wait with one fatal line (no
// shutdown lines before it), and go-redis's complaints arrive as
// structured lines, not its own.
func TestUnreachableStoresAreReportedClearly(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	redisAddr, pgAddr := deadAddr(t), deadAddr(t)
	stderr, code := runBinary(t, bin, []string{
		"PRESENCED_DATA_DIR=" + t.TempDir(),
		"PRESENCED_POSTGRES_CONNECT_WAIT=9s", // a progress line is due after 5 s
	}, "serve", "--roles", "booking", "--listen", "127.0.0.1:0",
		"--redis-url", "redis://"+redisAddr,
		"--postgres-url", "postgres://presenced@"+pgAddr+"/presenced")
	require.Equal(t, 1, code, stderr)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	addr := pgAddr
	require.Contains(t, stderr, `msg="waiting for PostgreSQL" addr=`+addr, "a progress line names the address")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, "presenced: postgres main pool: "+addr), last)
	require.Contains(t, last, "did not answer within 9s (postgres.connect_wait)")
	require.NotContains(t, stderr, "shutting down")
	require.NotContains(t, stderr, "msg=stopped")
	for _, l := range lines {
		require.False(t, strings.HasPrefix(l, "redis: "), "go-redis writes through slog: %s", l)
	}
}

// `presenced demo` beside a running development server reuses its
// PostgreSQL and says so once, without claiming to have started one.
func TestDemoReusesTheRunningPrivatePostgres(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	data := t.TempDir()
	ep, err := store.StartEmbeddedPostgres(context.Background(), filepath.Join(data, "postgres"), "", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = ep.Stop() })
	stderr, code := runBinary(t, bin, []string{"PRESENCED_DATA_DIR=" + data}, "demo", "--event", "reuse-check")
	require.Zero(t, code, stderr)
	require.Contains(t, stderr, "reusing the private PostgreSQL already running")
	require.NotContains(t, stderr, "started a private PostgreSQL")
	_, running := store.DevPostgresURL(data)
	require.True(t, running, "demo leaves the server it found running")
}

// A development server killed without a chance to stop its private
// PostgreSQL leaves it running; the next process on the data folder uses
// it and, the last one to leave, stops it.
func TestPrivatePostgresLeftByACrashIsStoppedByTheNextUser(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	data := t.TempDir()
	t.Cleanup(func() { stopPrivatePostgres(t, data) })
	serve := exec.Command(bin, "serve", "--roles", "all", "--listen", "127.0.0.1:0")
	serve.Env = append(os.Environ(), "PRESENCED_DATA_DIR="+data)
	require.NoError(t, serve.Start())
	require.Eventually(t, func() bool {
		_, running := store.DevPostgresURL(data)
		return running
	}, 2*time.Minute, 50*time.Millisecond, "serve starts its private PostgreSQL")
	require.NoError(t, serve.Process.Kill())
	_ = serve.Wait()
	_, running := store.DevPostgresURL(data)
	require.True(t, running, "a killed process cannot stop it")

	stderr, code := runBinary(t, bin, []string{"PRESENCED_DATA_DIR=" + data}, "demo", "--event", "after-crash")
	require.Zero(t, code, stderr)
	require.Contains(t, stderr, "reusing the private PostgreSQL already running")
	_, running = store.DevPostgresURL(data)
	require.False(t, running, "the last process on the folder stops the server it found: %s", stderr)
}

// stopPrivatePostgres stops a private PostgreSQL a failed test left on
// data/postgres.
func stopPrivatePostgres(t *testing.T, data string) {
	if _, running := store.DevPostgresURL(data); !running {
		return
	}
	ep, err := store.StartEmbeddedPostgres(context.Background(), filepath.Join(data, "postgres"), "", slog.New(slog.DiscardHandler))
	if err == nil {
		err = ep.Stop()
	}
	if err != nil {
		t.Logf("stop the private PostgreSQL left on %s: %v", data, err)
	}
}
