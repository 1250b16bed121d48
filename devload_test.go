package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The newcomer's first load: a zero-config server and the viewers load
// generator on the same machine, with no setting changed. Every heartbeat
// is accepted (no per-network 429s: the development server believes the
// generator's X-Forwarded-For), the run exits 0, and the server's log at
// info holds no line per request.
func TestZeroConfigServerTakesLocalLoad(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	data := t.TempDir()
	srv := exec.Command(bin, "serve", "--listen", "127.0.0.1:0")
	// Slow-request lines are off: slowness has its own test
	// (web.TestSlowRequestsAreLoggedAtInfo), and on a loaded machine one
	// count read of thousands took 1.1 s and was rightly logged at info.
	srv.Env = append(os.Environ(), "PRESENCED_DATA_DIR="+data, "PRESENCED_HTTP_SLOW_REQUEST=0")
	var serverLog lockedBuffer
	srv.Stderr = &serverLog
	require.NoError(t, srv.Start())
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	stop := func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = srv.Process.Kill()
			<-exited
			t.Error("the server did not stop on SIGTERM")
		}
	}
	t.Cleanup(func() {
		if srv.ProcessState == nil {
			stop()
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	var base string
	for base == "" {
		_, addr, ok := strings.Cut(serverLog.String(), "msg=listening addr=")
		if ok && strings.Contains(addr, "\n") {
			base = "http://" + strings.TrimSpace(strings.SplitN(addr, "\n", 2)[0])
			break
		}
		require.True(t, time.Now().Before(deadline), "the server did not start: %s", serverLog.String())
		time.Sleep(50 * time.Millisecond)
	}
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "the server did not become ready: %s", serverLog.String())
		time.Sleep(100 * time.Millisecond)
	}

	// --data-dir: the generator signs with the server's development secrets.
	// 10 s, so that a loaded machine still sends past one network's
	// allowance (2,236 heartbeats in 3 s were seen at load 28, under it).
	lg := exec.Command(bin, "loadgen", "viewers", "--target", base, "--data-dir", data,
		"-d", "10s", "-c", "64", "--viewers", "3000", "--interval", "2s", "--count-rate", "50", "--json")
	lg.Env = append(os.Environ(), "PRESENCED_DATA_DIR="+data) // as the server's: its secrets
	var out, progress strings.Builder
	lg.Stdout, lg.Stderr = &out, &progress
	require.NoError(t, lg.Run(), "loadgen: %s\n%s", progress.String(), out.String())
	var sum struct {
		Ops        int64            `json:"ops"`
		Errors     int64            `json:"errors"`
		ErrorKinds map[string]int64 `json:"errorKinds"`
		Seconds    float64          `json:"seconds"`
	}
	require.NoError(t, json.Unmarshal([]byte(out.String()), &sum), out.String())
	allowance := 1000 + 500*sum.Seconds // one network's: a burst of 1,000, then 500/s
	require.Greater(t, float64(sum.Ops), allowance, "more than one network may send in %.1f s", sum.Seconds)
	require.Zero(t, sum.Errors, "%v", sum.ErrorKinds)

	stop()
	var perRequest int
	for _, line := range strings.Split(serverLog.String(), "\n") {
		if strings.Contains(line, "msg=http ") {
			perRequest++
		}
	}
	require.Zero(t, perRequest, "%d heartbeats and count reads write no access-log line at info:\n%s", sum.Ops, serverLog.String())
	require.Less(t, strings.Count(serverLog.String(), "\n"), 100, "the server's whole log at info stays short:\n%s", serverLog.String())
}
