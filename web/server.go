// Package web is the server every module is mounted on: the listener
// with its connection caps, the echo server with its middleware (request
// ids, access log, metrics, body limits and deadlines, client addresses),
// net/http's own refusals in the error shape, readiness, health and
// metrics endpoints and the admin listener. What its handlers speak is web/wire; its WebSocket and SSE
// connections are web/socket's.
package web

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof" // registers on http.DefaultServeMux, mounted only with http.pprof
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// Check reports whether one dependency answers.
type Check func(ctx context.Context) error

// Server is the HTTP server of one process.
type Server struct {
	Echo    *echo.Echo
	Sockets *socket.Sockets

	cfg      config.Config
	log      *slog.Logger
	http     *http.Server
	draining atomic.Bool

	ready *readiness
	// admin is the http.admin_listen listener, when configured.
	admin *adminServer
	conns *connLimit
	// loopbackTrusted: development mode trusts X-Forwarded-For from
	// loopback (NewServer).
	loopbackTrusted bool
}

// NewServer builds the echo server with request ids, access logs, panic
// recovery, the body limit, metrics and the health endpoints.
func NewServer(cfg config.Config, reg *prometheus.Registry, log *slog.Logger) (*Server, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = wire.ErrorHandler(log)
	trusted := cfg.HTTP.TrustedProxies
	if len(trusted) == 0 && cfg.SingleNode() {
		// On a development laptop the clients are this machine's own: a
		// local load generator simulates many networks through
		// X-Forwarded-For, and would otherwise be one network to the
		// per-network limits and the abuse rules.
		trusted = []string{"127.0.0.0/8", "::1/128"}
	}
	e.IPExtractor = ipExtractor(trusted)

	hm, err := newHTTPMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("web: %w", err)
	}
	sockets, err := socket.NewSockets(cfg.Realtime, reg, log)
	if err != nil {
		return nil, fmt.Errorf("web: %w", err)
	}
	conns, err := newConnLimit(cfg.HTTP.MaxConnections, cfg.HTTP.MaxConnectionsPerIP, trusted, cfg.HTTP.TLSCert != "", reg)
	if err != nil {
		return nil, fmt.Errorf("web: %w", err)
	}
	s := &Server{Echo: e, Sockets: sockets, cfg: cfg, log: log, ready: newReadiness(log), conns: conns,
		loopbackTrusted: len(cfg.HTTP.TrustedProxies) == 0 && cfg.SingleNode()}
	// Made here, not in Serve: Shutdown may run before or while Serve
	// starts (a failed start, a signal), and a server shut down first
	// refuses to serve.
	s.http = &http.Server{
		Handler:           e,
		ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout,
		IdleTimeout:       cfg.HTTP.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	if cfg.HTTP.TLSCert != "" {
		s.http.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}

	e.Use((&edge{log: log, slow: cfg.HTTP.SlowRequest, metrics: hm,
		bodyTimeout: cfg.HTTP.BodyReadTimeout, bodyLimit: cfg.HTTP.BodyLimitBytes}).middleware)

	// Public GETs answer HEAD too (net/http drops the body), for probes
	// and caches that only look at the status and headers.
	get := []string{http.MethodGet, http.MethodHead}
	e.Match(get, "/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.Match(get, "/readyz", s.readyz)
	e.Match(get, "/openapi.json", serveOpenAPI)
	// Metrics and the profiler go to the admin listener when there is one.
	ops := e
	if cfg.HTTP.AdminListen != "" {
		s.admin = newAdminServer(cfg.HTTP.AdminListen, cfg.HTTP.ReadHeaderTimeout, log)
		ops = s.admin.echo
	}
	// Scrapers that ask for OpenMetrics get it (exemplars, _created).
	ops.Match(get, "/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})))
	if cfg.HTTP.Pprof {
		ops.GET("/debug/pprof/*", echo.WrapHandler(http.DefaultServeMux))
	}
	return s, nil
}

// AddCheck registers a readiness check, e.g. a store ping.
func (s *Server) AddCheck(name string, check Check) { s.ready.add(name, check, false) }

// AddOptionalCheck registers a check of a store the process fails open
// without: /readyz reports it "degraded" when it fails, and stays ready.
func (s *Server) AddOptionalCheck(name string, check Check) { s.ready.add(name, check, true) }

// Serve accepts connections on ln until Shutdown.
// Connections over http.max_connections (or per address,
// http.max_connections_per_ip) are answered 503 and closed at accept.
// Without TLS, net/http's own refusals go out in the error shape
// (refusals.go).
func (s *Server) Serve(ln net.Listener) error {
	// Said when serving, not when built: the commands that build the app
	// to seed or administer it serve nothing, and the line puzzled them.
	if s.loopbackTrusted {
		s.log.Info("development mode: X-Forwarded-For from loopback is trusted (set http.trusted_proxies to choose)")
	}
	ln = s.conns.wrap(ln)
	var err error
	if s.cfg.HTTP.TLSCert != "" {
		err = s.http.ServeTLS(ln, s.cfg.HTTP.TLSCert, s.cfg.HTTP.TLSKey)
	} else {
		err = s.http.Serve(refusalsInShape(ln, s.log))
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, tells every WebSocket and SSE client to come back
// after a jittered delay, and waits for in-flight requests, all within ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	var httpErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		httpErr = s.http.Shutdown(ctx)
	}()
	sockErr := s.Sockets.CloseAll(ctx)
	<-done
	var adminErr error
	if s.admin != nil {
		adminErr = s.admin.shutdown(ctx)
	}
	return errors.Join(httpErr, sockErr, adminErr)
}

// Drain is the first half of a shutdown, run before the process is told to
// stop (Kubernetes' preStop, through `presenced drain`): /readyz answers 503
// draining so the load balancer stops sending new clients, new sockets are
// refused, and every WebSocket and SSE client is told to reconnect after its
// own jittered delay (1012), to another replica. Plain requests are still
// served until Shutdown. It returns when the sockets are closed or ctx ends.
func (s *Server) Drain(ctx context.Context) error {
	s.draining.Store(true)
	return s.Sockets.CloseAll(ctx)
}

// Draining tells whether a drain or shutdown has begun.
func (s *Server) Draining() bool { return s.draining.Load() }

func ipExtractor(trusted []string) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	return xffExtractor(trustedPrefixes(trusted))
}

// requestID makes the X-Request-Id of a request that came without one: 32
// URL-safe characters from 192 random bits. It correlates log lines and
// guards nothing, so math/rand/v2's per-thread ChaCha8 serves, without
// echo's default's lock and crypto/rand reads on every request.
func requestID() string {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], mrand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], mrand.Uint64())
	binary.LittleEndian.PutUint64(b[16:], mrand.Uint64())
	return base64.RawURLEncoding.EncodeToString(b[:])
}
