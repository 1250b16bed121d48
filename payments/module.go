package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/internal/promlabels"
	"github.com/presenced/presenced/payments/ticketcode"
	"github.com/presenced/presenced/store"
)

// Deps are what the module is built from. It holds no store: each part
// takes its stores from the host as it starts.
type Deps struct {
	// Config is resolved by the app: a primary provider named, the sandbox
	// "on" or "off", development secrets filled in.
	Config  config.Payments
	Keys    store.Keyspace
	Booking Booking
	// Fraud replaces the built-in rules (config payments.fraud) when set.
	Fraud   FraudChecker
	Metrics prometheus.Registerer
	Log     *slog.Logger
}

// Module is one process's payments module.
type Module struct {
	cfg     config.Payments
	keys    store.Keyspace
	booking Booking
	m       *metrics
	log     *slog.Logger
	fraud   *failOpen

	// router is built by the first part that calls providers.
	router *router
	sealer *ticketcode.Sealer
	// admin is the main pool of the CLI's calls, opened by StartAdmin.
	admin *pgxpool.Pool
}

// New builds the module; nothing runs until a part starts.
func New(d Deps) (*Module, error) {
	if d.Booking == nil || d.Metrics == nil || d.Log == nil {
		return nil, errors.New("payments: a booking port, metrics and a logger are required")
	}
	if d.Config.Primary == "" {
		return nil, errors.New("payments: payments.primary names no provider (sandbox or stripe)")
	}
	m, err := newMetrics(d.Metrics)
	if err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	var checker FraudChecker = sandboxRules{cfg: d.Config.Fraud}
	if d.Fraud != nil {
		checker = d.Fraud
	}
	mod := &Module{cfg: d.Config, keys: d.Keys, booking: d.Booking, m: m, log: d.Log}
	if d.Config.Fraud.Enabled || d.Fraud != nil {
		mod.fraud = newFailOpen(checker, d.Config.Fraud.Timeout, m)
	}
	return mod, nil
}

// StartAPI mounts payment starts, tickets and (when on) the sandbox PSP
// with its webhook deliveries (booking role).
func (m *Module) StartAPI(ctx context.Context, h module.Host) error {
	db, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	r, err := m.openRouter(db)
	if err != nil {
		return err
	}
	sealer, err := m.openSealer()
	if err != nil {
		return err
	}
	users, err := h.Users()
	if err != nil {
		return err
	}
	a := &apiPlane{db: db, booking: m.booking, router: r, fraud: m.fraud, sealer: sealer, m: m.m, log: m.log}
	g := h.Routes()
	a.routes(g, users.Middleware())
	if m.sandboxOn() {
		sb := m.newSandbox(db)
		sb.routes(g, h.RequireAPIKey())
		h.Go("payments.sandbox.deliveries", func(ctx context.Context) error {
			return sb.deliver(ctx, m.cfg.WorkerInterval/4, 50)
		})
	}
	return nil
}

// StartWebhooks mounts the provider webhooks on their own pool, so a hold
// stampede can never take the connections a paying customer needs
// (booking role).
func (m *Module) StartWebhooks(ctx context.Context, h module.Host) error {
	db, err := h.Postgres(ctx, store.PoolWebhook)
	if err != nil {
		return err
	}
	ps, err := m.providers(nil)
	if err != nil {
		return err
	}
	w := &webhooks{db: db, booking: m.booking, providers: map[string]Provider{}, cfg: m.cfg, m: m.m, log: m.log}
	for _, p := range ps {
		w.providers[p.Name()] = p
	}
	h.Routes().POST("/v1/payments/webhooks/:provider", w.post)
	return nil
}

// StartFulfillment runs the fulfillment consumer, the notification sender
// and the correctness monitors (worker role).
func (m *Module) StartFulfillment(ctx context.Context, h module.Host) error {
	db, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	rdb, err := h.Redis(ctx)
	if err != nil {
		return err
	}
	sealer, err := m.openSealer()
	if err != nil {
		return err
	}
	sender, err := newSender(m.cfg.Notify, m.log)
	if err != nil {
		return err
	}
	f := newFulfiller(fulfillerDeps{DB: db, Redis: rdb, Keys: m.keys, Booking: m.booking, Sealer: sealer,
		Config: m.cfg, Metrics: m.m, Log: m.log})
	n := &notifier{db: db, rdb: rdb, sender: sender, deadStream: m.notifyDeadStream(), cfg: m.cfg, m: m.m, log: m.log}
	mon := &monitor{db: db, rdb: rdb, booking: m.booking, stream: f.stream, cfg: m.cfg, m: m.m, log: m.log}
	// Only a process that runs the monitors reports them, at zero until the
	// first pass: a 0 from a process that never checks would read as "all
	// well" and hide a worker plane that is down (the monitors-silent alert).
	promlabels.Init(func(lv ...string) { m.m.monitor.WithLabelValues(lv...) }, monitorChecks())
	h.Go("payments.fulfillment", f.Run)
	h.Go("payments.notifications", n.Run)
	h.Go("payments.monitors", mon.Run)
	return nil
}

// StartRefunds runs the refund worker, the intent recovery worker and the
// reaping of old dedupe records (worker role).
func (m *Module) StartRefunds(ctx context.Context, h module.Host) error {
	db, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	r, err := m.openRouter(db)
	if err != nil {
		return err
	}
	rf := &refunder{db: db, router: r, cfg: m.cfg, m: m.m, log: m.log}
	rc := &recoverer{db: db, router: r, cfg: m.cfg, m: m.m, log: m.log}
	h.Go("payments.refunds", rf.Run)
	h.Go("payments.recovery", rc.Run)
	return nil
}

// StartAdmin opens what the CLI's calls of the in-process API (Check,
// ExportManifest) read: the main pool. It mounts no route and runs no loop.
func (m *Module) StartAdmin(ctx context.Context, h module.Host) error {
	db, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	m.admin = db
	return nil
}

func (m *Module) sandboxOn() bool { return m.cfg.Sandbox.Enabled == "on" }

func (m *Module) newSandbox(db *pgxpool.Pool) *sandbox {
	faults := map[string]float64{}
	for _, f := range m.cfg.Sandbox.Faults {
		name, p, _ := cutFault(f)
		faults[name] = p
	}
	return &sandbox{
		db: db, secrets: m.cfg.Sandbox.WebhookSecrets, webhookURL: m.cfg.Sandbox.WebhookURL, faults: faults,
		attempts: m.cfg.Sandbox.DeliveryAttempts, backoff: m.cfg.Sandbox.DeliveryBackoff,
		lateDelay: m.cfg.Sandbox.LateDelay, timeout: m.cfg.ProviderTimeout,
		client: &http.Client{Timeout: m.cfg.ProviderTimeout}, log: m.log,
	}
}

// providers builds the configured providers (primary first), and the
// sandbox for its webhooks whenever it is on. db is the sandbox's ledger;
// nil builds providers that only parse webhooks.
func (m *Module) providers(db *pgxpool.Pool) ([]Provider, error) {
	names := []string{m.cfg.Primary}
	if m.cfg.Fallback != "" {
		names = append(names, m.cfg.Fallback)
	}
	if m.sandboxOn() && !slices.Contains(names, "sandbox") {
		names = append(names, "sandbox")
	}
	var out []Provider
	for _, name := range names {
		switch name {
		case "sandbox":
			if !m.sandboxOn() {
				return nil, errors.New("payments: the sandbox provider is configured but payments.sandbox.enabled is off")
			}
			if len(m.cfg.Sandbox.WebhookSecrets) == 0 {
				return nil, errors.New("payments: payments.sandbox.webhook_secrets is empty")
			}
			out = append(out, &sandboxProvider{s: m.newSandbox(db), tolerance: m.cfg.WebhookTolerance})
		case "stripe":
			out = append(out, newStripeProvider(stripeConfig{
				SecretKey: m.cfg.Stripe.SecretKey, APIURL: m.cfg.Stripe.APIURL, WebhookSecrets: m.cfg.Stripe.WebhookSecrets,
				Tolerance: m.cfg.WebhookTolerance, Timeout: m.cfg.ProviderTimeout,
			}))
		default:
			return nil, fmt.Errorf("payments: unknown provider %q", name)
		}
	}
	return out, nil
}

// openRouter builds the provider router once per process: its breakers
// must see every call the process makes.
func (m *Module) openRouter(db *pgxpool.Pool) (*router, error) {
	if m.router != nil {
		return m.router, nil
	}
	ps, err := m.providers(db)
	if err != nil {
		return nil, err
	}
	n := 1
	if m.cfg.Fallback != "" {
		n = 2
	}
	m.router = newRouter(ps, n, breakerConfig{
		Window: m.cfg.BreakerWindow, FailureRatio: m.cfg.BreakerFailureRatio,
		MinRequests: m.cfg.BreakerMinRequests, OpenFor: m.cfg.BreakerOpenFor,
	}, m.cfg.ProviderTimeout, m.m)
	return m.router, nil
}

func (m *Module) openSealer() (*ticketcode.Sealer, error) {
	if m.sealer != nil {
		return m.sealer, nil
	}
	if m.cfg.TicketKey == "" {
		return nil, errors.New("payments: payments.ticket_key is not set")
	}
	s, err := ticketcode.ParseSealer(m.cfg.TicketKey, m.cfg.TicketOldKeys)
	if err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	m.sealer = s
	return s, nil
}

// notifyDeadStream holds notifications that ran out of retries.
func (m *Module) notifyDeadStream() string { return m.keys.Global("payments").Key("notify", "dead") }
