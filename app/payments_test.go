package app

import (
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// Development mode fills the payment secrets into the data folder once and
// reuses them; outside it a missing provider or key stops the start with
// the setting's name; a process without payment parts needs neither.
func TestResolvePayments(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	filled, err := ResolvePayments(&cfg)
	require.NoError(t, err)
	require.NotEmpty(t, filled)
	require.Equal(t, "sandbox", cfg.Payments.Primary)
	require.Equal(t, "on", cfg.Payments.Sandbox.Enabled)
	require.Len(t, cfg.Payments.Sandbox.WebhookSecrets, 1)
	require.Equal(t, "http://127.0.0.1:8080/v1/payments/webhooks/sandbox", cfg.Payments.Sandbox.WebhookURL)
	again := config.Default()
	again.DataDir = cfg.DataDir
	_, err = ResolvePayments(&again)
	require.NoError(t, err)
	require.Equal(t, cfg.Payments.TicketKey, again.Payments.TicketKey, "reused")
	require.Equal(t, cfg.Payments.ManifestKey, again.Payments.ManifestKey)

	prod := config.Default()
	prod.DataDir = t.TempDir()
	prod.Auth.DevSecrets = false
	_, err = ResolvePayments(&prod)
	require.ErrorContains(t, err, "payments.primary")
	prod.Payments.Primary = "stripe"
	_, err = ResolvePayments(&prod)
	require.ErrorContains(t, err, "payments.ticket_key")
	prod.Payments.TicketKey, prod.Payments.ManifestKey = cfg.Payments.TicketKey, cfg.Payments.ManifestKey
	_, err = ResolvePayments(&prod)
	require.NoError(t, err)
	require.Equal(t, "off", prod.Payments.Sandbox.Enabled, "the sandbox is off outside development unless switched on")

	edge := config.Default()
	edge.DataDir = t.TempDir()
	edge.Auth.DevSecrets = false
	edge.Auth.APIKey, edge.Auth.JWTSecret = "k", "s"
	edge.Roles = []string{"ingest,admit"}
	_, err = New(edge, testLogger())
	require.NoError(t, err, "no payment parts, no payment settings needed")
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
