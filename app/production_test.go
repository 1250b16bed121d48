package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// messages records log messages.
type messages struct {
	mu  sync.Mutex
	all []string
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.all = append(m.all, r.Message)
	return nil
}
func (m *messages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messages) WithGroup(string) slog.Handler      { return m }

func (m *messages) text() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.all, "\n")
}

// productionConfig is one plane of a split: real stores, no development
// secrets, no pass keys.
func productionConfig(t *testing.T, role string) config.Config {
	cfg := testConfig(t)
	cfg.Roles = []string{role}
	cfg.Auth.DevSecrets = false
	cfg.Auth.JWTSecret = "production-secret-production-secret"
	cfg.Auth.APIKey = "production-api-key"
	return cfg
}

// The worker of a production split runs the admission ticker, which never
// touches a pass: it needs no pass key and is not in development mode.
func TestProductionWorkerNeedsNoPassKey(t *testing.T) {
	t.Parallel()
	cfg := productionConfig(t, "worker")
	log := &messages{}
	a, err := New(cfg, slog.New(log))
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	t.Cleanup(func() { _ = a.Shutdown() })
	require.Contains(t, a.Started(), "waitingroom.ticker")
	require.NotContains(t, log.text(), "DEVELOPMENT MODE")
	_, err = os.Stat(filepath.Join(cfg.DataDir, "keys", "waitingroom-pass.json"))
	require.ErrorIs(t, err, os.ErrNotExist, "no development pass key made up")
}

// The planes that sign or check passes refuse to start without keys
// outside development, instead of each inventing its own.
func TestProductionPassPlanesNeedKeys(t *testing.T) {
	t.Parallel()
	for _, role := range []string{"admit", "booking"} {
		t.Run(role, func(t *testing.T) {
			a, err := New(productionConfig(t, role), testenv.Logger())
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Shutdown() })
			err = a.Start(context.Background())
			require.ErrorContains(t, err, "waitingroom.signing_key")
			require.ErrorContains(t, err, "waitingroom.verify_keys")
		})
	}
}

// Readiness checks only the stores of parts that exist: the payment
// webhook pool waits for the payments module.
func TestReadinessChecksOnlyBuiltParts(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"booking"}
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	base := serve(t, a)
	code, body := get(t, base+"/readyz")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"postgres-main":"ok"`)
	require.NotContains(t, body, "webhook")
}

// The ingest plane signs viewer cookies: outside development it refuses to
// start without a configured key, and no other plane makes one up.
func TestProductionCookieKeys(t *testing.T) {
	t.Parallel()
	a, err := New(productionConfig(t, "ingest"), testenv.Logger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown() })
	require.ErrorContains(t, a.Start(context.Background()), "viewers.cookie_signing_key")

	cfg := productionConfig(t, "count")
	b, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Shutdown() })
	require.NoError(t, b.Start(context.Background()))
	_, err = os.Stat(filepath.Join(cfg.DataDir, "keys", "viewers-cookie.json"))
	require.ErrorIs(t, err, os.ErrNotExist, "no development cookie key made up")
}
