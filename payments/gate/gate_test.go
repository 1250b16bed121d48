package gate

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/spectest"
	"github.com/presenced/presenced/payments/ticketcode"
	"github.com/presenced/presenced/web/wire"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func manifest(t *testing.T, n int) (ticketcode.Manifest, [][]byte) {
	t.Helper()
	m := ticketcode.Manifest{Event: "ev", IssuedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
	var secrets [][]byte
	for i := 0; i < n; i++ {
		s := make([]byte, 32)
		_, _ = rand.Read(s)
		secrets = append(secrets, s)
		m.Tickets = append(m.Tickets, ticketcode.ManifestTicket{ID: uuid.NewString(), Label: fmt.Sprintf("seat %d", i), Secret: s})
	}
	return m, secrets
}

func serve(t *testing.T, g *Gate) string {
	t.Helper()
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = wire.ErrorHandler(quiet())
	spectest.Validate(t, e) // every answer of the gate as docs/openapi.yaml says
	g.Routes(e)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: e}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func scan(t *testing.T, base, payload string) int {
	t.Helper()
	body, _ := json.Marshal(ScanRequest{Payload: payload})
	resp, err := http.Post(base+"/v1/gate/scan", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestScanOutcomes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gate.sqlite")
	g, err := Open(path, "north", 2*time.Second, quiet())
	require.NoError(t, err)
	defer g.Close()
	m, secrets := manifest(t, 2)
	n, err := g.Load(context.Background(), m)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = g.Load(context.Background(), m)
	require.NoError(t, err)
	require.Equal(t, 2, n, "loading a manifest twice changes nothing")
	base := serve(t, g)
	now := time.Now()
	first := ticketcode.Payload(secrets[0], m.Tickets[0].ID, ticketcode.Window(now))
	require.Equal(t, 200, scan(t, base, first))
	require.Equal(t, 409, scan(t, base, first), "a replay")
	require.Equal(t, 409, scan(t, base, ticketcode.Payload(secrets[0], m.Tickets[0].ID, ticketcode.Window(now)-1)),
		"a fresh code of a used ticket")
	stale := ticketcode.Payload(secrets[1], m.Tickets[1].ID, ticketcode.Window(now)-3)
	require.Equal(t, 422, scan(t, base, stale), "expired code")
	forged := ticketcode.Payload(secrets[0], m.Tickets[1].ID, ticketcode.Window(now))
	require.Equal(t, 422, scan(t, base, forged), "another ticket's secret")
	require.Equal(t, 422, scan(t, base, ticketcode.Payload(secrets[0], uuid.NewString(), ticketcode.Window(now))), "unknown ticket")
	require.Equal(t, 422, scan(t, base, "junk"))
	resp, err := http.Post(base+"/v1/gate/scan", "application/json", strings.NewReader(`{"payload":"x","extra":1}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode, "unknown fields are refused")
}

// A gate that cannot write the ledger refuses entry: another connection
// holds the write lock past the busy timeout, and the scan answers 503 and
// admits nobody; once the lock is gone the same code is admitted.
func TestScanFailsClosed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gate.sqlite")
	g, err := Open(path, "south", 200*time.Millisecond, quiet())
	require.NoError(t, err)
	defer g.Close()
	m, secrets := manifest(t, 1)
	_, err = g.Load(context.Background(), m)
	require.NoError(t, err)
	locker, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer locker.Close()
	conn, err := locker.Conn(context.Background())
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), "BEGIN IMMEDIATE")
	require.NoError(t, err)
	base := serve(t, g)
	code := ticketcode.Payload(secrets[0], m.Tickets[0].ID, ticketcode.Window(time.Now()))
	require.Equal(t, 503, scan(t, base, code))
	_, err = conn.ExecContext(context.Background(), "ROLLBACK")
	require.NoError(t, err)
	conn.Close()
	require.Equal(t, 200, scan(t, base, code))
}

// TestHelperGateProcess is not a test: it is a gate process the next test
// starts from this test binary.
func TestHelperGateProcess(t *testing.T) {
	path := os.Getenv("GATE_HELPER_DB")
	if path == "" {
		t.Skip("started by TestTwoGateProcessesAdmitOnce")
	}
	g, err := Open(path, os.Getenv("GATE_HELPER_NAME"), 10*time.Second, quiet())
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = wire.ErrorHandler(quiet())
	g.Routes(e)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(1)
	}
	fmt.Println("LISTEN", ln.Addr().String())
	_ = http.Serve(ln, e)
}

// Two gate processes on one ledger scan the same ticket at the same moment,
// 100 times over: every round one admits (200) and the other refuses (409).
func TestTwoGateProcessesAdmitOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gate.sqlite")
	loader, err := Open(path, "loader", 2*time.Second, quiet())
	require.NoError(t, err)
	const rounds = 100
	m, secrets := manifest(t, rounds)
	_, err = loader.Load(context.Background(), m)
	require.NoError(t, err)
	require.NoError(t, loader.Close())

	var bases []string
	for _, name := range []string{"east", "west"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperGateProcess$", "-test.v")
		cmd.Env = append(os.Environ(), "GATE_HELPER_DB="+path, "GATE_HELPER_NAME="+name)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				bases = append(bases, "http://"+addr)
				break
			}
		}
		go func() { _, _ = io.Copy(io.Discard, out) }()
	}
	require.Len(t, bases, 2)
	for i := 0; i < rounds; i++ {
		code := ticketcode.Payload(secrets[i], m.Tickets[i].ID, ticketcode.Window(time.Now()))
		statuses := make([]int, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j := range bases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				statuses[j] = scan(t, bases[j], code)
			}()
		}
		close(start)
		wg.Wait()
		require.ElementsMatch(t, []int{200, 409}, statuses, "round %d", i)
	}
}
