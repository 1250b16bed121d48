package config

import (
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/internal/stdwebhook"
)

// Payments configures providers, webhooks, fulfillment, refunds, tickets and
// the sandbox PSP.
type Payments struct {
	// Primary takes new intents; Fallback takes them while the primary's
	// breaker is open. Providers: sandbox, stripe. Empty primary: the
	// sandbox in development mode (auth.dev_secrets), an error otherwise.
	Primary  string `yaml:"primary"`
	Fallback string `yaml:"fallback"`
	// Bound of one provider call (seed 003: 3-5 s, never the default 30 s).
	ProviderTimeout time.Duration `yaml:"provider_timeout"`
	// A provider's breaker opens when, within breaker_window, at least
	// breaker_min_requests calls were made and breaker_failure_ratio of
	// them failed; it stays open breaker_open_for, then lets a probe through.
	BreakerWindow       time.Duration `yaml:"breaker_window"`
	BreakerFailureRatio float64       `yaml:"breaker_failure_ratio"`
	BreakerMinRequests  int           `yaml:"breaker_min_requests"`
	BreakerOpenFor      time.Duration `yaml:"breaker_open_for"`
	// Signed webhooks older (or newer) than this are refused.
	WebhookTolerance time.Duration `yaml:"webhook_tolerance"`
	// Webhook events are remembered this long for deduplication (≥ 30 days:
	// providers redeliver for that long).
	WebhookRetention time.Duration `yaml:"webhook_retention"`
	// Largest webhook body accepted.
	WebhookBodyLimit int64 `yaml:"webhook_body_limit"`
	// Payments still INITIALIZING this long after creation are finished by
	// the recovery worker with the same provider key.
	RecoveryAfter time.Duration `yaml:"recovery_after"`
	// Background loops (recovery, refunds, notifications) look for work
	// this often, up to worker_batch rows a round.
	WorkerInterval time.Duration `yaml:"worker_interval"`
	WorkerBatch    int           `yaml:"worker_batch"`
	// A charge reported for no payment of ours is refunded after this.
	OrphanRefundAfter time.Duration `yaml:"orphan_refund_after"`
	// Refund retries back off from refund_backoff; after refund_manual_after
	// failures the refund joins the manual queue (and is still retried,
	// hourly).
	RefundBackoff     time.Duration `yaml:"refund_backoff"`
	RefundManualAfter int           `yaml:"refund_manual_after"`
	// Stream entries of the fulfillment consumer unacknowledged this long
	// are claimed by another consumer.
	ClaimIdle time.Duration `yaml:"claim_idle"`
	// The correctness monitors are evaluated this often.
	MonitorInterval time.Duration `yaml:"monitor_interval"`
	// Ticket secrets are sealed with AES-256-GCM under ticket_key
	// ("kid:base64(32 bytes)"); ticket_old_keys still open older tickets.
	// Empty in development: a key kept in data_dir. Also
	// PRESENCED_PAYMENTS_TICKET_KEY.
	TicketKey     string   `yaml:"ticket_key" env:"PRESENCED_PAYMENTS_TICKET_KEY"`
	TicketOldKeys []string `yaml:"ticket_old_keys"`
	// Gate manifests are sealed with this key (base64, 32 bytes). Empty in
	// development: a key kept in data_dir.
	ManifestKey string `yaml:"manifest_key" env:"PRESENCED_PAYMENTS_MANIFEST_KEY"`
	// How long an exported manifest is accepted by gates.
	ManifestTTL time.Duration `yaml:"manifest_ttl"`

	Fraud   PaymentsFraud   `yaml:"fraud"`
	Notify  PaymentsNotify  `yaml:"notify"`
	Sandbox PaymentsSandbox `yaml:"sandbox"`
	Stripe  PaymentsStripe  `yaml:"stripe"`
}

// PaymentsFraud is the built-in pre-charge check (sandbox rules).
type PaymentsFraud struct {
	Enabled bool `yaml:"enabled"`
	// Budget of one check; slower, failing or a tripped breaker accepts
	// (fail open) and counts it.
	Timeout time.Duration `yaml:"timeout"`
	// Amounts (minor units) at or above which a payment is blocked or sent
	// to review; 0 turns a rule off.
	BlockOver  int64 `yaml:"block_over"`
	ReviewOver int64 `yaml:"review_over"`
	// Users always blocked or reviewed.
	BlockUsers  []string `yaml:"block_users"`
	ReviewUsers []string `yaml:"review_users"`
}

// PaymentsNotify configures the ticket notification sender.
type PaymentsNotify struct {
	// log, webhook or smtp.
	Sender string `yaml:"sender"`
	// webhook: POSTed JSON signed like presence webhooks (Standard
	// Webhooks: webhook-id, webhook-timestamp, webhook-signature), with a
	// whsec_ secret.
	WebhookURL    string `yaml:"webhook_url"`
	WebhookSecret string `yaml:"webhook_secret" env:"PRESENCED_PAYMENTS_NOTIFY_WEBHOOK_SECRET"`
	// smtp: host:port of a relay, the sender address and optional login.
	SMTPAddr     string `yaml:"smtp_addr"`
	SMTPFrom     string `yaml:"smtp_from"`
	SMTPUser     string `yaml:"smtp_user"`
	SMTPPassword string `yaml:"smtp_password" env:"PRESENCED_PAYMENTS_NOTIFY_SMTP_PASSWORD"`
	// Where the user's address comes from: "<user>@<smtp_domain>" (the
	// user id when it already is an address).
	SMTPDomain string        `yaml:"smtp_domain"`
	Timeout    time.Duration `yaml:"timeout"`
}

// PaymentsSandbox is the built-in PSP stand-in.
type PaymentsSandbox struct {
	// auto (on in development mode), on or off. Off unmounts its endpoints.
	Enabled string `yaml:"enabled"`
	// Secrets the sandbox signs webhooks with (every one: several v1 during
	// a rotation) and the receiver accepts. Empty in development: one kept
	// in data_dir. Also PRESENCED_PAYMENTS_SANDBOX_WEBHOOK_SECRETS.
	WebhookSecrets []string `yaml:"webhook_secrets"`
	// Where the sandbox delivers webhooks. Empty: this process's own
	// /v1/payments/webhooks/sandbox on the listen address.
	WebhookURL string `yaml:"webhook_url"`
	// Delivery attempts per webhook and the first retry delay (doubling).
	DeliveryAttempts int           `yaml:"delivery_attempts"`
	DeliveryBackoff  time.Duration `yaml:"delivery_backoff"`
	// Delay of a webhook with the "late" fault.
	LateDelay time.Duration `yaml:"late_delay"`
	// Faults injected at random, as name=probability: create_timeout,
	// create_error, webhook_twice, webhook_x100, webhook_out_of_order,
	// webhook_late, webhook_wrong_amount, webhook_wrong_currency,
	// webhook_early. The confirm step can also name faults per intent.
	Faults []string `yaml:"faults"`
}

// PaymentsStripe configures the Stripe adapter.
type PaymentsStripe struct {
	SecretKey string `yaml:"secret_key" env:"PRESENCED_PAYMENTS_STRIPE_SECRET_KEY"`
	// API base URL; empty is Stripe's. Tests point it at stripe-mock.
	APIURL string `yaml:"api_url"`
	// Webhook endpoint secrets (whsec_...); several during a rotation.
	WebhookSecrets []string `yaml:"webhook_secrets"`
}

// SandboxFaults are the fault names the sandbox knows.
var SandboxFaults = []string{
	"create_timeout", "create_error", "webhook_twice", "webhook_x100", "webhook_out_of_order",
	"webhook_late", "webhook_wrong_amount", "webhook_wrong_currency", "webhook_early",
}

// Providers are the payment providers presenced has adapters for.
var Providers = []string{"sandbox", "stripe"}

func defaultPayments() Payments {
	return Payments{
		ProviderTimeout:     4 * time.Second,
		BreakerWindow:       60 * time.Second,
		BreakerFailureRatio: 0.5,
		BreakerMinRequests:  10,
		BreakerOpenFor:      30 * time.Second,
		WebhookTolerance:    300 * time.Second,
		WebhookRetention:    30 * 24 * time.Hour,
		WebhookBodyLimit:    64 << 10,
		RecoveryAfter:       30 * time.Second,
		WorkerInterval:      time.Second,
		WorkerBatch:         50,
		OrphanRefundAfter:   10 * time.Minute,
		RefundBackoff:       10 * time.Second,
		RefundManualAfter:   5,
		ClaimIdle:           30 * time.Second,
		MonitorInterval:     15 * time.Second,
		ManifestTTL:         48 * time.Hour,
		Fraud: PaymentsFraud{
			Enabled: true, Timeout: 200 * time.Millisecond,
		},
		Notify: PaymentsNotify{Sender: "log", Timeout: 10 * time.Second},
		Sandbox: PaymentsSandbox{
			Enabled:          "auto",
			DeliveryAttempts: 12, DeliveryBackoff: time.Second, LateDelay: 11 * time.Minute,
		},
	}
}

func (p Payments) validate(bad badFunc) {
	for key, name := range map[string]string{"payments.primary": p.Primary, "payments.fallback": p.Fallback} {
		if name != "" && !slices.Contains(Providers, name) {
			bad(key, "%q is not one of %s", name, strings.Join(Providers, ", "))
		}
	}
	if p.Fallback != "" && p.Fallback == p.Primary {
		bad("payments.fallback", "must differ from payments.primary")
	}
	for key, d := range map[string]time.Duration{
		"payments.provider_timeout": p.ProviderTimeout, "payments.breaker_window": p.BreakerWindow,
		"payments.breaker_open_for": p.BreakerOpenFor, "payments.webhook_tolerance": p.WebhookTolerance,
		"payments.recovery_after": p.RecoveryAfter, "payments.worker_interval": p.WorkerInterval,
		"payments.orphan_refund_after": p.OrphanRefundAfter, "payments.refund_backoff": p.RefundBackoff,
		"payments.claim_idle": p.ClaimIdle, "payments.monitor_interval": p.MonitorInterval,
		"payments.manifest_ttl": p.ManifestTTL, "payments.fraud.timeout": p.Fraud.Timeout,
		"payments.notify.timeout": p.Notify.Timeout, "payments.sandbox.delivery_backoff": p.Sandbox.DeliveryBackoff,
		"payments.sandbox.late_delay": p.Sandbox.LateDelay,
	} {
		if d <= 0 {
			bad(key, "must be a positive duration")
		}
	}
	if p.WebhookRetention < 30*24*time.Hour {
		bad("payments.webhook_retention", "must be at least 720h: providers redeliver events for 30 days")
	}
	if p.BreakerFailureRatio <= 0 || p.BreakerFailureRatio > 1 {
		bad("payments.breaker_failure_ratio", "must be in (0, 1]")
	}
	if p.BreakerMinRequests < 1 {
		bad("payments.breaker_min_requests", "must be positive")
	}
	if p.WebhookBodyLimit < 1024 {
		bad("payments.webhook_body_limit", "must be at least 1024")
	}
	if p.WorkerBatch <= 0 {
		bad("payments.worker_batch", "must be positive")
	}
	if p.RefundManualAfter < 1 {
		bad("payments.refund_manual_after", "must be positive")
	}
	if p.Fraud.BlockOver < 0 || p.Fraud.ReviewOver < 0 {
		bad("payments.fraud.block_over", "amounts must not be negative")
	}
	if p.ManifestKey != "" {
		if raw, err := base64.StdEncoding.DecodeString(p.ManifestKey); err != nil || len(raw) != 32 {
			bad("payments.manifest_key", "want base64 of 32 bytes")
		}
	}
	switch p.Notify.Sender {
	case "log":
	case "webhook":
		if p.Notify.WebhookURL == "" {
			bad("payments.notify.webhook_url", "the webhook sender needs a URL")
		}
		if _, err := stdwebhook.ParseSecret(p.Notify.WebhookSecret); err != nil {
			bad("payments.notify.webhook_secret", "%v (a Standard Webhooks secret: whsec_ and a base64 key of 16+ bytes)", err)
		}
	case "smtp":
		if p.Notify.SMTPAddr == "" || p.Notify.SMTPFrom == "" || p.Notify.SMTPDomain == "" {
			bad("payments.notify.smtp_addr", "the smtp sender needs smtp_addr, smtp_from and smtp_domain")
		}
	default:
		bad("payments.notify.sender", "%q is not one of log, webhook, smtp", p.Notify.Sender)
	}
	switch p.Sandbox.Enabled {
	case "auto", "on", "off":
	default:
		bad("payments.sandbox.enabled", "%q is not one of auto, on, off", p.Sandbox.Enabled)
	}
	for _, s := range p.Sandbox.WebhookSecrets {
		if len(s) < 16 {
			bad("payments.sandbox.webhook_secrets", "each secret needs at least 16 characters")
		}
	}
	if p.Sandbox.DeliveryAttempts < 1 {
		bad("payments.sandbox.delivery_attempts", "must be positive")
	}
	for _, f := range p.Sandbox.Faults {
		name, prob, ok := strings.Cut(f, "=")
		v, err := strconv.ParseFloat(prob, 64)
		if !ok || err != nil || v < 0 || v > 1 || !slices.Contains(SandboxFaults, name) {
			bad("payments.sandbox.faults", "%q: want name=probability (0-1), names %s", f, strings.Join(SandboxFaults, ", "))
		}
	}
	if (p.Primary == "stripe" || p.Fallback == "stripe") && (p.Stripe.SecretKey == "" || len(p.Stripe.WebhookSecrets) == 0) {
		bad("payments.stripe.secret_key", "the stripe provider needs secret_key and webhook_secrets")
	}
}
