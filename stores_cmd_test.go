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
