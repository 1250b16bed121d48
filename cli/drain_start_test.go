package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// A preStop drain can reach a pod whose serve process is still starting
// (connecting to its stores). A SIGUSR1 that arrives before anyone asked
// for it is discarded by the Go runtime: the real process must catch it
// from the start, survive it, and drain once it serves. The test holds the
// process's first PostgreSQL connection at a gate, signals it there, then
// lets it start. (With the handler installed after startup, as before, the
// drain was lost: /readyz never said draining.)
func TestDrainSignalWhileStartingIsHonouredOnceServing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := testenv.Binary(t)

	pg, err := url.Parse(testenv.PostgresURL(t))
	require.NoError(t, err)
	upstream := pg.Host
	gate, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { gate.Close() })
	connected, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		for {
			c, err := gate.Accept()
			if err != nil {
				return
			}
			once.Do(func() { close(connected) })
			go func() {
				defer c.Close()
				<-release
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	pg.Host = gate.Addr().String()

	port, err := store.FreePort()
	require.NoError(t, err)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cmd := exec.Command(bin, "serve", "--roles", "ingest", "--listen", strings.TrimPrefix(base, "http://"))
	cmd.Env = append(os.Environ(),
		"PRESENCED_DATA_DIR="+dir,
		"PRESENCED_REDIS_URL="+testenv.RedisURL(t),
		"PRESENCED_REDIS_PREFIX="+testenv.Prefix(t),
		"PRESENCED_POSTGRES_URL="+pg.String(),
		"PRESENCED_HTTP_SHUTDOWN_TIMEOUT=5s",
	)
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	require.NoError(t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	logs := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	})

	select {
	case <-connected:
	case err := <-exited:
		t.Fatalf("serve exited before reaching PostgreSQL: %v\n%s", err, logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve never reached PostgreSQL\n%s", logs())
	}
	// Starting, stuck on its first database connection: the drain arrives.
	require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1))
	close(release)

	testenv.Eventually(t, 60*time.Second, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("serve died of the drain signal sent while starting: %v\n%s", err, logs())
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var ready struct{ Status string }
		_ = json.NewDecoder(resp.Body).Decode(&ready)
		return resp.StatusCode == http.StatusServiceUnavailable && ready.Status == "draining"
	}, "serve started and then drained")
	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "a draining process still serves plain requests")
}
