package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/web/wire"
)

// adminServer is the listener of http.admin_listen: /metrics and pprof
// away from the public port, where only the network that scrapes and
// profiles can reach them.
type adminServer struct {
	echo *echo.Echo
	http *http.Server
	addr string

	mu sync.Mutex
	ln net.Listener
}

func newAdminServer(addr string, readHeaderTimeout time.Duration, log *slog.Logger) *adminServer {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = wire.ErrorHandler(log)
	return &adminServer{echo: e, addr: addr, http: &http.Server{
		Handler:           e,
		ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
}

// ListenAdmin binds http.admin_listen, when set, so a taken port fails the
// start instead of the first scrape. It returns the address bound, or "".
func (s *Server) ListenAdmin() (string, error) {
	if s.admin == nil {
		return "", nil
	}
	ln, err := net.Listen("tcp", s.admin.addr)
	if err != nil {
		return "", fmt.Errorf("http.admin_listen %s: %w", s.admin.addr, err)
	}
	s.admin.mu.Lock()
	s.admin.ln = ln
	s.admin.mu.Unlock()
	return ln.Addr().String(), nil
}

// ServeAdmin serves the admin listener bound by ListenAdmin until Shutdown.
func (s *Server) ServeAdmin() error {
	if s.admin == nil {
		return nil
	}
	s.admin.mu.Lock()
	ln := s.admin.ln
	s.admin.mu.Unlock()
	if ln == nil {
		return errors.New("web: admin listener not bound")
	}
	if err := s.admin.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (a *adminServer) shutdown(ctx context.Context) error {
	err := a.http.Shutdown(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ln != nil {
		_ = a.ln.Close() // bound but never served
	}
	return err
}
