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
	// Payments run on the booking and worker planes; outside development
	// they need a provider and keys configured.
	cfg.Payments.Primary, cfg.Payments.Sandbox.Enabled = "sandbox", "on"
	cfg.Payments.Sandbox.WebhookSecrets = []string{"whsec_production_tests_00000"}
	cfg.Payments.TicketKey = "t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	cfg.Payments.ManifestKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
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

// Readiness checks only the stores of parts that exist: a part not built
// yet opens no pool and adds no check, whatever its role's plane.
func TestReadinessChecksOnlyBuiltParts(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"admit"}
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	a.table = map[string]part{
		"waitingroom.admit": parts["waitingroom.admit"],
		"future.part":       {needs: deps(needReadOnly)},
	}
	a.parts = []string{"waitingroom.admit", "future.part"}
	require.NoError(t, a.Start(context.Background()))
	base := serve(t, a)
	code, body := get(t, base+"/readyz")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"redis":"ok"`)
	require.NotContains(t, body, "postgres")
}
