package web

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// serving runs a Server through Serve (the listener caps included) and
// returns its address.
func serving(t testing.TB, mutate func(*config.Config), routes func(*Server)) string {
	t.Helper()
	cfg := config.Default()
	cfg.Redis.URL = "redis://127.0.0.1:1" // not single-node: loopback is an ordinary client here
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := NewServer(cfg, prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	if routes != nil {
		routes(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// drip opens a connection and sends a POST whose body never finishes.
func drip(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", path)
	require.NoError(t, err)
	return c
}

// A client dripping a body is cut at http.body_read_timeout, whether the
// handler reads the body (408) or refuses first (the unread rest is not
// waited for); a stream without a body outlives that time.
func TestDrippedBodiesAreCutButStreamsAreNot(t *testing.T) {
	t.Parallel()
	addr := serving(t, func(c *config.Config) { c.HTTP.BodyReadTimeout = 300 * time.Millisecond }, func(s *Server) {
		s.Echo.POST("/read", func(c echo.Context) error {
			var v map[string]any
			if err := wire.DecodeBody(c, &v); err != nil {
				return err
			}
			return c.NoContent(http.StatusNoContent)
		})
		// Refuses before reading the body, as the API-key guard does.
		s.Echo.POST("/admin", func(c echo.Context) error { return wire.Errorf(http.StatusUnauthorized, "unauthorized", "no key") })
		s.Echo.GET("/stream", func(c echo.Context) error {
			st, err := s.Sockets.OpenSSE(c, "test")
			if err != nil {
				return err
			}
			for i := 0; i < 10; i++ {
				time.Sleep(100 * time.Millisecond)
				if err := st.Send(socket.SSEEvent{Event: "tick", Data: []byte("{}")}); err != nil {
					return nil
				}
			}
			return nil
		})
	})
	for _, path := range []string{"/read", "/admin"} {
		c := drip(t, addr, path)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c) // the server answers and closes
		require.NoError(t, err, "%s: closed by the server, not by our own deadline", path)
		if path == "/read" {
			require.Contains(t, string(got), "408", path)
			require.Contains(t, string(got), "request_timeout", path)
		} else {
			require.Contains(t, string(got), "401", path)
		}
	}

	resp, err := http.Get("http://" + addr + "/stream")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	ticks := 0
	for sc.Scan() {
		if sc.Text() == "event: tick" {
			ticks++
		}
	}
	require.Equal(t, 10, ticks, "a second-long stream is not cut at the body timeout")
}

// Connections over the per-address cap are told so and closed; others
// (and the process) keep being served.
func TestConnectionCaps(t *testing.T) {
	t.Parallel()
	addr := serving(t, func(c *config.Config) {
		c.HTTP.MaxConnectionsPerIP = 3
		c.HTTP.MaxConnections = 100
	}, nil)
	for i := 0; i < 3; i++ {
		drip(t, addr, "/nowhere")
	}
	resp, body := getOnNewConnection(t, addr, "/healthz")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"), "every answer carries a request id, this one too")
	require.Contains(t, body, `"code":"too_many_connections"`)

	// The process cap, from another loopback address.
	addr2 := serving(t, func(c *config.Config) { c.HTTP.MaxConnections = 2; c.HTTP.MaxConnectionsPerIP = 0 }, nil)
	drip(t, addr2, "/nowhere")
	drip(t, addr2, "/nowhere")
	resp2, _ := getOnNewConnection(t, addr2, "/healthz")
	require.Equal(t, http.StatusServiceUnavailable, resp2.StatusCode)
}

// getOnNewConnection sends one GET on a connection of its own and reads the
// answer. A refused connection is answered at accept, often before the
// request is written: net/http's client calls that an unsolicited response
// and fails, so the request is written and read by hand.
func getOnNewConnection(t *testing.T, addr, path string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, _ = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// A development server trusts loopback as a proxy, and a proxy carries many
// clients: it is not capped per address.
func TestTrustedProxiesAreNotCappedPerAddress(t *testing.T) {
	t.Parallel()
	addr := serving(t, func(c *config.Config) {
		c.HTTP.MaxConnectionsPerIP = 1
		c.HTTP.TrustedProxies = []string{"127.0.0.0/8"}
	}, nil)
	drip(t, addr, "/nowhere")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestHeadHealthz(t *testing.T) {
	t.Parallel()
	addr := serving(t, nil, nil)
	resp, err := http.Head("http://" + addr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json"))
}
