package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/payments/ticketcode"
)

func paymentsPart(start func(*payments.Module, context.Context, module.Host) error) startFunc {
	return func(ctx context.Context, a *App, h module.Host) error {
		m, err := a.Payments()
		if err != nil {
			return err
		}
		return start(m, ctx, h)
	}
}

// Payments is this process's payments module, built on first use.
func (a *App) Payments() (*payments.Module, error) {
	return a.mods.payments.get(func() (*payments.Module, error) {
		return payments.New(payments.Deps{
			Config: a.Config.Payments, Keys: a.Keys, Booking: checkout{a.Booking},
			Metrics: a.Metrics, Log: a.Log.With("module", "payments"),
		})
	})
}

// checkout hands booking's checkout port to payments, translating states
// and errors: the modules share no types.
type checkout struct {
	booking func() (*booking.Module, error)
}

var _ payments.Booking = checkout{}

func (c checkout) LockCheckout(ctx context.Context, tx pgx.Tx, id string) (payments.Checkout, error) {
	b, err := c.booking()
	if err != nil {
		return payments.Checkout{}, err
	}
	co, err := b.LockCheckout(ctx, tx, id)
	if err != nil {
		return payments.Checkout{}, checkoutError(err)
	}
	return payments.Checkout{ID: co.ID, Event: co.Admits(), User: co.User, State: checkoutState(co.Status),
		Total: co.Total, Currency: co.Currency, ExpiresAt: co.ExpiresAt, Due: co.Due}, nil
}

func checkoutState(s string) payments.CheckoutState {
	switch s {
	case booking.StatusPending:
		return payments.CheckoutPending
	case booking.StatusPaid:
		return payments.CheckoutPaid
	case booking.StatusExpired:
		return payments.CheckoutExpired
	}
	return payments.CheckoutCancelled
}

func (c checkout) MarkPaid(ctx context.Context, tx pgx.Tx, id string) error {
	b, err := c.booking()
	if err != nil {
		return err
	}
	return checkoutError(b.MarkPaid(ctx, tx, id))
}

func (c checkout) ReleaseCheckout(ctx context.Context, tx pgx.Tx, id string) (func(context.Context), error) {
	b, err := c.booking()
	if err != nil {
		return nil, err
	}
	after, err := b.ReleaseCheckout(ctx, tx, id)
	return after, checkoutError(err)
}

func (c checkout) Lines(ctx context.Context, tx pgx.Tx, id string) ([]payments.Line, error) {
	b, err := c.booking()
	if err != nil {
		return nil, err
	}
	lines, err := b.Lines(ctx, tx, id)
	if err != nil {
		return nil, checkoutError(err)
	}
	out := make([]payments.Line, len(lines))
	for i, l := range lines {
		out[i] = payments.Line{ID: l.ID, Label: l.Label}
	}
	return out, nil
}

func (c checkout) DoubleOwnedSeats(ctx context.Context, tx pgx.Tx) (int, error) {
	b, err := c.booking()
	if err != nil {
		return 0, err
	}
	return b.DoubleOwnedSeats(ctx, tx)
}

func checkoutError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, booking.ErrNoReservation):
		return fmt.Errorf("%w: %v", payments.ErrNoReservation, err)
	case errors.Is(err, booking.ErrNotPending):
		return fmt.Errorf("%w: %v", payments.ErrNotPending, err)
	}
	return err
}

// paymentSecrets are the development secrets of payments, generated once
// into the data folder and shared by every process started on it.
type paymentSecrets struct {
	SandboxWebhookSecret string `json:"sandboxWebhookSecret"`
	TicketKey            string `json:"ticketKey"`
	ManifestKey          string `json:"manifestKey"`
}

const paymentSecretsFile = "payments-secrets.json"

// ResolvePayments fills what development mode (auth.dev_secrets) may: the
// sandbox as the primary provider and switched on, its webhook secret, the
// ticket and manifest keys, and the sandbox's delivery address. Outside
// development a missing setting is an error naming it.
func ResolvePayments(cfg *config.Config) ([]string, error) {
	p := &cfg.Payments
	dev := cfg.Auth.DevSecrets
	if p.Sandbox.Enabled == "auto" {
		p.Sandbox.Enabled = map[bool]string{true: "on", false: "off"}[dev]
	}
	if p.Primary == "" {
		if !dev {
			return nil, errors.New("payments.primary: name the payment provider (sandbox or stripe)")
		}
		p.Primary = "sandbox"
	}
	if p.Sandbox.WebhookURL == "" {
		p.Sandbox.WebhookURL = sandboxWebhookURL(cfg.Listen)
	}
	needSandboxSecret := p.Sandbox.Enabled == "on" && len(p.Sandbox.WebhookSecrets) == 0
	if !needSandboxSecret && p.TicketKey != "" && p.ManifestKey != "" {
		return nil, nil
	}
	if !dev {
		return nil, errors.New("payments: outside development mode set payments.ticket_key, payments.manifest_key " +
			"and (with the sandbox on) payments.sandbox.webhook_secrets")
	}
	s, err := loadOrCreatePaymentSecrets(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var filled []string
	if needSandboxSecret {
		p.Sandbox.WebhookSecrets = []string{s.SandboxWebhookSecret}
		filled = append(filled, "sandbox webhook secret")
	}
	if p.TicketKey == "" {
		p.TicketKey = s.TicketKey
		filled = append(filled, "ticket key ("+filepath.Join(cfg.DataDir, paymentSecretsFile)+")")
	}
	if p.ManifestKey == "" {
		p.ManifestKey = s.ManifestKey
		filled = append(filled, "manifest key")
	}
	return filled, nil
}

// sandboxWebhookURL is where the sandbox delivers when nothing is
// configured: this process's own receiver.
func sandboxWebhookURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/v1/payments/webhooks/sandbox"
}

func loadOrCreatePaymentSecrets(dataDir string) (paymentSecrets, error) {
	path := filepath.Join(dataDir, paymentSecretsFile)
	read := func() (paymentSecrets, error) {
		var s paymentSecrets
		data, err := os.ReadFile(path)
		if err != nil {
			return s, err
		}
		if err := json.Unmarshal(data, &s); err != nil || s.TicketKey == "" || s.ManifestKey == "" || s.SandboxWebhookSecret == "" {
			return s, fmt.Errorf("%s: unreadable or incomplete (delete it to regenerate)", path)
		}
		return s, nil
	}
	if s, err := read(); err == nil || !errors.Is(err, os.ErrNotExist) {
		return s, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return paymentSecrets{}, fmt.Errorf("payment secrets: %w", err)
	}
	raw := make([]byte, 32)
	secret := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return paymentSecrets{}, err
	}
	if _, err := rand.Read(secret); err != nil {
		return paymentSecrets{}, err
	}
	s := paymentSecrets{
		SandboxWebhookSecret: "whsec_" + base64.RawURLEncoding.EncodeToString(secret),
		TicketKey:            ticketcode.NewKey("dev1"),
		ManifestKey:          base64.StdEncoding.EncodeToString(raw),
	}
	data, _ := json.MarshalIndent(s, "", "  ")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		// Another process is writing it: read the winner's.
		for i := 0; i < 50; i++ {
			if s, err := read(); err == nil {
				return s, nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return read()
	}
	if err != nil {
		return paymentSecrets{}, fmt.Errorf("payment secrets: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return paymentSecrets{}, fmt.Errorf("payment secrets: %w", err)
	}
	return s, nil
}

// ManifestKey is the resolved gate manifest key.
func (a *App) ManifestKey() ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(a.Config.Payments.ManifestKey)
	if err != nil || len(raw) != 32 {
		return nil, errors.New("payments.manifest_key: want base64 of 32 bytes")
	}
	return raw, nil
}
