package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The scripts that start servers never take another server's answers for
// their own: with their port taken by a server that answers /readyz (the
// worst case: a presenced of another clone), each exits non-zero before
// building anything, with one line that names the address, and sends that
// server nothing (demo.sh used to seed its database and print its banner).
func TestScriptsRefuseATakenPort(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	var requests atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(other.Close)
	addr := other.Listener.Addr().String()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	stores := []string{"PRESENCED_REDIS_URL=redis://127.0.0.1:1", "PRESENCED_POSTGRES_URL=postgres://127.0.0.1:1/x",
		"PRESENCED_JWT_SECRET=s", "PRESENCED_API_KEY=k"}

	for _, c := range []struct {
		script string
		args   []string
		env    []string
	}{
		{"scripts/demo.sh", nil, []string{"LISTEN=" + addr}},
		{"scripts/reconnect-storm.sh", nil, []string{"PORT=" + port}},
		{"scripts/presence-scale.sh", nil, append([]string{"PORT=" + port}, stores...)},
		{"scripts/presence-bench.sh", []string{"connects", "HEAD"}, append([]string{"PORT=" + port}, stores...)},
	} {
		t.Run(strings.TrimPrefix(c.script, "scripts/"), func(t *testing.T) {
			before := requests.Load()
			stdout, stderr, err := runScript(t, c.script, c.args, c.env)
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "exits non-zero: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
			require.Empty(t, stdout, "no banner, no progress")
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			require.Len(t, lines, 1, "one line: %q", stderr)
			require.Contains(t, lines[0], port, "the line names the port")
			require.Contains(t, lines[0], "in use")
			require.Equal(t, before, requests.Load(), "the other server is left alone")
		})
	}
}

// A tool that does not build ends the script with one line, not with a path
// to a binary that is not there.
func TestToolsStopsOnAToolThatDoesNotBuild(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	script := `set -euo pipefail; . scripts/tools.sh; p=$(presenced_tool nothing example.invalid/nothing v0.0.1); echo "got $p"`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.Error(t, err, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	require.NotContains(t, stdout.String(), "got ")
	require.Contains(t, stderr.String(), "could not build nothing v0.0.1")
}

func runScript(t *testing.T, script string, args, env []string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}
