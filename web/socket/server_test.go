package socket

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/wire"
)

// Server is what the socket tests serve on: an echo with the process's
// error shape and a Sockets, served by net/http. The web package's own
// tests run sockets behind its Server (net/http's refusals in the shape,
// the connection caps).
type Server struct {
	Echo    *echo.Echo
	Sockets *Sockets
}

func NewServer(cfg config.Config, reg prometheus.Registerer, log *slog.Logger) (*Server, error) {
	s, err := NewSockets(cfg.Realtime, reg, log)
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.HTTPErrorHandler = wire.ErrorHandler(log)
	return &Server{Echo: e, Sockets: s}, nil
}

// serving serves routes on a loopback port and returns its address.
func serving(t testing.TB, mutate func(*config.Config), routes func(*Server)) string {
	t.Helper()
	cfg := config.Default()
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
	hs := &http.Server{Handler: s.Echo}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Sockets.CloseAll(ctx)
		_ = hs.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// errorBody is the error shape, as a client decodes it.
type errorBody struct {
	Error map[string]any `json:"error"`
}

func jsonDecode(resp *http.Response, v any) error {
	return json.NewDecoder(resp.Body).Decode(v)
}
