package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The preStop hook: `presenced drain` signals the serve process, which
// closes every socket with 1012 and its reconnect hint, answers /readyz 503
// draining and refuses new sockets, while plain requests are still served;
// the command returns once no socket is left. SIGTERM comes after.
func TestDrainMovesSocketsBeforeStop(t *testing.T) {
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.Redis.URL = testenv.RedisURL(t)
	cfg.Redis.Prefix = testenv.Prefix(t)
	cfg.Postgres.URL = testenv.PostgresURL(t)
	cfg.Roles = []string{"admit"}
	cfg.HTTP.ShutdownTimeout = 10 * time.Second
	a, err := app.New(cfg, testenv.Logger())
	require.NoError(t, err)
	a.Routes().GET("/test/ws", func(c echo.Context) error {
		conn, err := a.Server.Sockets.Upgrade(c, "test")
		if err != nil {
			return err
		}
		for {
			if _, err := conn.Read(); err != nil {
				return nil
			}
		}
	})
	require.NoError(t, a.Start(context.Background()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, drainSignal)
	defer signal.Stop(sig)
	drainOnSignal(ctx, a, sig)
	go func() { done <- a.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	})
	base := "http://" + ln.Addr().String()
	ws := "ws://" + ln.Addr().String() + "/test/ws"

	conns := make([]*websocket.Conn, 3)
	for i := range conns {
		conns[i], _, err = websocket.DefaultDialer.Dial(ws, nil)
		require.NoError(t, err)
		defer conns[i].Close()
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return a.Server.Sockets.Live() == len(conns) }, "clients connected")

	// The container health check (docker compose): ready until drained.
	require.NoError(t, runHealthcheck(base))

	cmd := DrainCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--pid", strconv.Itoa(os.Getpid()), "--url", base, "--timeout", "20s"})
	drained := make(chan error, 1)
	go func() { drained <- cmd.Execute() }()

	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		_, _, err := c.ReadMessage()
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, websocket.CloseServiceRestart, ce.Code)
		var hint struct{ ReconnectMs int64 }
		require.NoError(t, json.Unmarshal([]byte(ce.Text), &hint), ce.Text)
		require.Positive(t, hint.ReconnectMs)
		_ = c.Close()
	}
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("presenced drain did not return")
	}
	require.Contains(t, out.String(), "drained")

	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	var ready struct {
		Status  string
		Sockets int
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ready))
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "draining", ready.Status)
	require.Zero(t, ready.Sockets)
	err = runHealthcheck(base)
	require.ErrorContains(t, err, "answered 503")
	require.ErrorContains(t, err, "draining", "the failing check is named")

	resp, err = http.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "plain requests are served until SIGTERM")
	_, resp, err = websocket.DefaultDialer.Dial(ws, nil)
	require.Error(t, err, "no new socket on a draining process")
	if resp != nil {
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	}
}

func runHealthcheck(base string) error {
	cmd := HealthcheckCmd()
	cmd.SetArgs([]string{"--url", base + "/readyz", "--timeout", "5s"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	return cmd.Execute()
}
