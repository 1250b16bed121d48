// Package apptest runs real presenced processes in tests: the roles a test
// chooses, over the test stores of internal/testenv, serving on a loopback
// port until the test ends.
package apptest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/spectest"
	"github.com/presenced/presenced/internal/testenv"
)

// Config is the default configuration over the test stores: a fresh data
// folder, a key prefix of the test's own, development secrets.
func Config(t testing.TB) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.Redis.URL = testenv.RedisURL(t)
	cfg.Redis.Prefix = testenv.Prefix(t)
	// A database of its own: see testenv.OwnPostgresURL.
	cfg.Postgres.URL = testenv.OwnPostgresURL(t)
	// Generous: under -race on a loaded two-core machine draining and
	// stopping every loop has taken more than 5 s; a loop that ignores its
	// context is still named by the error (App.Shutdown).
	cfg.HTTP.ShutdownTimeout = 15 * time.Second
	return cfg
}

// Server is one running process.
type Server struct {
	App *app.App
	// URL is http://host:port.
	URL string

	stop func()
}

// Start starts a process of cfg and serves it until the test ends or Stop.
// Every answer and frame it sends is checked against docs/openapi.yaml and
// docs/asyncapi.yaml.
func Start(t testing.TB, cfg config.Config) *Server {
	t.Helper()
	return start(t, cfg, true)
}

// StartUnchecked is Start without the document checks, for tests whose
// assertions are about timing (the checks add work to every answer and
// frame, which a loaded -race run turns into late frames).
func StartUnchecked(t testing.TB, cfg config.Config) *Server {
	t.Helper()
	return start(t, cfg, false)
}

func start(t testing.TB, cfg config.Config, checked bool) *Server {
	t.Helper()
	// Listen first, so the process knows its own address (the sandbox PSP
	// delivers webhooks to it).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg.Listen = ln.Addr().String()
	a, err := app.New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	if checked {
		spectest.Validate(t, a.Server.Echo)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ln) }()
	var once sync.Once
	s := &Server{App: a, URL: "http://" + ln.Addr().String()}
	s.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(20 * time.Second):
				t.Error("server did not stop")
			}
		})
	}
	t.Cleanup(s.stop)
	return s
}

// Stop shuts the process down as SIGTERM would and waits for it.
func (s *Server) Stop() { s.stop() }
