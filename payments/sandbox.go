package payments

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82"
)

// sandbox is the built-in PSP: it plays the provider for development, tests
// and load runs. Its ledger lives in PostgreSQL (sandbox_* tables), so every
// process of a deployment sees the same intents, and a test can count what
// it really charged. It signs webhooks with Stripe's scheme and delivers
// them with retries, and injects the faults real providers have.
type sandbox struct {
	db         *pgxpool.Pool
	secrets    []string
	webhookURL string
	faults     map[string]float64
	attempts   int
	backoff    time.Duration
	lateDelay  time.Duration
	timeout    time.Duration
	client     *http.Client
	log        *slog.Logger
}

var errSandboxDown = errors.New("sandbox: injected provider error")

type sandboxIntent struct {
	ID           string            `json:"id"`
	ClientSecret string            `json:"clientSecret"`
	Amount       int64             `json:"amount"`
	Currency     string            `json:"currency"`
	Status       string            `json:"status"`
	Metadata     map[string]string `json:"metadata"`
	Faults       []string          `json:"faults"`
	CreatedAt    time.Time         `json:"createdAt"`
	ChargedAt    *time.Time        `json:"chargedAt,omitempty"`
}

func (s *sandbox) roll(fault string) bool {
	p := s.faults[fault]
	return p > 0 && rand.Float64() < p
}

func randomID(prefix string) string {
	b := make([]byte, 12)
	_, _ = crand.Read(b)
	return prefix + hex.EncodeToString(b)
}

const sandboxIntentCols = `id, client_secret, amount, currency, status, metadata, faults, created_at, charged_at`

func scanIntent(row pgx.Row) (sandboxIntent, error) {
	var in sandboxIntent
	err := row.Scan(&in.ID, &in.ClientSecret, &in.Amount, &in.Currency, &in.Status, &in.Metadata, &in.Faults, &in.CreatedAt, &in.ChargedAt)
	return in, err
}

// createIntent is idempotent by key: the same key answers the same intent,
// as a real provider does for 24 hours; other parameters under a used key
// are refused.
func (s *sandbox) createIntent(ctx context.Context, key string, amount int64, currency string, meta map[string]string) (sandboxIntent, error) {
	if s.roll("create_error") {
		return sandboxIntent{}, errSandboxDown
	}
	faults := []string{}
	for _, f := range []string{"webhook_twice", "webhook_x100", "webhook_out_of_order", "webhook_late",
		"webhook_wrong_amount", "webhook_wrong_currency", "webhook_early"} {
		if s.roll(f) {
			faults = append(faults, f)
		}
	}
	in, err := scanIntent(s.db.QueryRow(ctx, `
INSERT INTO sandbox_intents (id, idempotency_key, client_secret, amount, currency, metadata, status, faults)
VALUES ($1, $2, $3, $4, $5, $6, 'requires_confirmation', $7)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING `+sandboxIntentCols,
		randomID("pi_sb_"), key, randomID("secret_"), amount, strings.ToLower(currency), meta, faults))
	created := err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		in, err = scanIntent(s.db.QueryRow(ctx, `SELECT `+sandboxIntentCols+` FROM sandbox_intents WHERE idempotency_key = $1`, key))
	}
	if err != nil {
		return sandboxIntent{}, fmt.Errorf("sandbox: create intent: %w", err)
	}
	if in.Amount != amount || !strings.EqualFold(in.Currency, currency) {
		return sandboxIntent{}, errors.New("sandbox: idempotency key reused with other parameters")
	}
	if created && slices.Contains(in.Faults, "webhook_early") {
		// The charge and its webhook go out before the caller can have
		// saved the reference: the receiver must answer 503 until it has.
		if _, err := s.confirm(ctx, in.ID, in.ClientSecret, nil); err != nil {
			return sandboxIntent{}, err
		}
	}
	if created && s.roll("create_timeout") {
		return sandboxIntent{}, fmt.Errorf("sandbox: %w (the intent was created)", errProviderTimeout)
	}
	return in, nil
}

// confirm stands in for hosted checkout / 3-D Secure: it charges the intent
// once and queues its webhooks. Confirming a charged intent changes nothing.
func (s *sandbox) confirm(ctx context.Context, id, secret string, extra []string) (sandboxIntent, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return sandboxIntent{}, fmt.Errorf("sandbox: confirm: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	in, err := scanIntent(tx.QueryRow(ctx, `SELECT `+sandboxIntentCols+` FROM sandbox_intents WHERE id = $1 FOR UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && in.ClientSecret != secret) {
		return sandboxIntent{}, errNoIntent
	}
	if err != nil {
		return sandboxIntent{}, fmt.Errorf("sandbox: confirm: %w", err)
	}
	if in.Status == "succeeded" {
		return in, nil
	}
	for _, f := range extra {
		if !slices.Contains(in.Faults, f) {
			in.Faults = append(in.Faults, f)
		}
	}
	if err := tx.QueryRow(ctx, `UPDATE sandbox_intents SET status = 'succeeded', charged_at = clock_timestamp(), faults = $2
	                             WHERE id = $1 RETURNING charged_at`, id, in.Faults).Scan(&in.ChargedAt); err != nil {
		return sandboxIntent{}, fmt.Errorf("sandbox: charge: %w", err)
	}
	in.Status = "succeeded"
	if err := s.queueChargeEvents(ctx, tx, in); err != nil {
		return sandboxIntent{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return sandboxIntent{}, fmt.Errorf("sandbox: confirm: %w", err)
	}
	return in, nil
}

var errNoIntent = errors.New("sandbox: no such intent (or a wrong client secret)")

// queueChargeEvents queues the webhooks of a charge, shaped by its faults.
func (s *sandbox) queueChargeEvents(ctx context.Context, tx pgx.Tx, in sandboxIntent) error {
	obj := stripeObject{ID: in.ID, Object: "payment_intent", Amount: in.Amount, Currency: in.Currency,
		Status: "succeeded", Metadata: in.Metadata}
	has := func(f string) bool { return slices.Contains(in.Faults, f) }
	if has("webhook_wrong_amount") {
		obj.Amount++
	}
	if has("webhook_wrong_currency") {
		obj.Currency = "usd"
		if strings.EqualFold(in.Currency, "usd") {
			obj.Currency = "eur"
		}
	}
	delay := time.Duration(0)
	if has("webhook_late") {
		delay = s.lateDelay
	}
	copies := 1
	switch {
	case has("webhook_x100"):
		copies = 100
	case has("webhook_twice"):
		copies = 2
	}
	succeeded := sandboxEvent("payment_intent.succeeded", obj, time.Now())
	for i := 0; i < copies; i++ {
		if err := s.queueDelivery(ctx, tx, succeeded, delay); err != nil {
			return err
		}
	}
	if has("webhook_out_of_order") {
		// The earlier event arrives after the later one.
		created := obj
		created.Status = "requires_confirmation"
		early := sandboxEvent("payment_intent.created", created, in.CreatedAt)
		if err := s.queueDelivery(ctx, tx, early, delay+time.Second); err != nil {
			return err
		}
	}
	return nil
}

type sandboxPayload struct {
	id   string
	body []byte
}

func sandboxEvent(typ string, obj stripeObject, at time.Time) sandboxPayload {
	raw, _ := json.Marshal(obj)
	e := stripeEvent{ID: randomID("evt_sb_"), Object: "event", APIVersion: stripe.APIVersion,
		Created: at.Unix(), Type: typ, PendingWebhooks: 1}
	e.Data.Object = raw
	body, _ := json.Marshal(e)
	return sandboxPayload{id: e.ID, body: body}
}

func (s *sandbox) queueDelivery(ctx context.Context, tx pgx.Tx, p sandboxPayload, delay time.Duration) error {
	_, err := tx.Exec(ctx, `INSERT INTO sandbox_deliveries (event_id, url, payload, next_at) VALUES ($1, $2, $3, clock_timestamp() + make_interval(secs => $4))`,
		p.id, s.webhookURL, p.body, delay.Seconds())
	if err != nil {
		return fmt.Errorf("sandbox: queue webhook: %w", err)
	}
	return nil
}

// refund returns an intent's charge once, whatever the key; the same key
// answers the same refund.
func (s *sandbox) refund(ctx context.Context, key, intentID string, amount int64) (string, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("sandbox: refund: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	in, err := scanIntent(tx.QueryRow(ctx, `SELECT `+sandboxIntentCols+` FROM sandbox_intents WHERE id = $1 FOR UPDATE`, intentID))
	if errors.Is(err, pgx.ErrNoRows) {
		return "", errNoIntent
	}
	if err != nil {
		return "", fmt.Errorf("sandbox: refund: %w", err)
	}
	if in.Status != "succeeded" {
		return "", fmt.Errorf("sandbox: intent %s was not charged", intentID)
	}
	var id string
	err = tx.QueryRow(ctx, `SELECT id FROM sandbox_refunds WHERE intent_id = $1`, intentID).Scan(&id)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("sandbox: refund: %w", err)
	}
	if amount <= 0 || amount > in.Amount {
		amount = in.Amount
	}
	id = randomID("re_sb_")
	if _, err := tx.Exec(ctx, `INSERT INTO sandbox_refunds (id, idempotency_key, intent_id, amount) VALUES ($1, $2, $3, $4)`,
		id, key, intentID, amount); err != nil {
		return "", fmt.Errorf("sandbox: refund: %w", err)
	}
	obj := stripeObject{ID: randomID("ch_sb_"), Object: "charge", Amount: in.Amount, Currency: in.Currency,
		Status: "succeeded", PaymentIntent: in.ID, Metadata: in.Metadata}
	if err := s.queueDelivery(ctx, tx, sandboxEvent("charge.refunded", obj, time.Now()), 0); err != nil {
		return "", err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", fmt.Errorf("sandbox: refund: %w", err)
	}
	return id, nil
}

func (s *sandbox) ledger(ctx context.Context, reservation string) (SandboxLedger, error) {
	var l SandboxLedger
	err := s.db.QueryRow(ctx, `
WITH i AS (SELECT * FROM sandbox_intents WHERE $1 = '' OR metadata->>'reservation_id' = $1)
SELECT (SELECT count(*) FROM i),
       (SELECT count(*) FROM i WHERE charged_at IS NOT NULL),
       (SELECT count(*) FROM sandbox_refunds r JOIN i ON i.id = r.intent_id),
       (SELECT count(*) FROM (
           SELECT i.metadata->>'reservation_id' FROM i LEFT JOIN sandbox_refunds r ON r.intent_id = i.id
           WHERE i.charged_at IS NOT NULL AND r.id IS NULL
           GROUP BY 1 HAVING count(*) > 1) d),
       (SELECT count(*) FROM sandbox_deliveries WHERE delivered_at IS NULL)`, reservation).
		Scan(&l.Intents, &l.Charges, &l.Refunds, &l.DoubleCharges, &l.Undelivered)
	if err != nil {
		return l, fmt.Errorf("sandbox: ledger: %w", err)
	}
	return l, nil
}

// deliver runs the webhook deliveries until ctx ends. Several processes may
// run it: each claims due rows with SKIP LOCKED and pushes their next try
// out while sending, so a delivery is in flight in one place at a time.
func (s *sandbox) deliver(ctx context.Context, every time.Duration, batch int) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := s.deliverOnce(ctx, batch)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("sandbox: deliver webhooks", "err", err)
		}
		if n == batch {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *sandbox) deliverOnce(ctx context.Context, batch int) (int, error) {
	rows, err := s.db.Query(ctx, `
UPDATE sandbox_deliveries SET next_at = clock_timestamp() + interval '30 seconds', attempts = attempts + 1
WHERE id IN (SELECT id FROM sandbox_deliveries
             WHERE delivered_at IS NULL AND attempts < $2 AND next_at <= clock_timestamp()
             ORDER BY next_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, url, payload, attempts`, batch, s.attempts)
	if err != nil {
		return 0, fmt.Errorf("claim deliveries: %w", err)
	}
	type job struct {
		id       int64
		url      string
		body     []byte
		attempts int
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (job, error) {
		var j job
		return j, r.Scan(&j.id, &j.url, &j.body, &j.attempts)
	})
	if err != nil {
		return 0, fmt.Errorf("claim deliveries: %w", err)
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status := s.post(ctx, j.url, j.body)
			var err error
			if status >= 200 && status < 300 {
				_, err = s.db.Exec(context.WithoutCancel(ctx), `UPDATE sandbox_deliveries SET delivered_at = clock_timestamp(), last_status = $2 WHERE id = $1`, j.id, status)
			} else {
				wait := s.backoff << min(j.attempts-1, 12)
				_, err = s.db.Exec(context.WithoutCancel(ctx), `UPDATE sandbox_deliveries SET next_at = clock_timestamp() + make_interval(secs => $2), last_status = $3 WHERE id = $1`,
					j.id, wait.Seconds(), status)
			}
			if err != nil {
				s.log.Warn("sandbox: record delivery", "err", err)
			}
		}()
	}
	wg.Wait()
	return len(jobs), nil
}

// post sends one signed delivery and returns the status (0: no answer).
func (s *sandbox) post(ctx context.Context, url string, body []byte) int {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderSignature, signHeader(s.secrets, time.Now(), body))
	resp, err := s.client.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sandboxProvider is the Provider face of the sandbox, called in process.
type sandboxProvider struct {
	s         *sandbox
	tolerance time.Duration
}

var _ Provider = (*sandboxProvider)(nil)

func (p *sandboxProvider) Name() string { return "sandbox" }

func (p *sandboxProvider) CreateIntent(ctx context.Context, req IntentRequest) (Intent, error) {
	in, err := p.s.createIntent(ctx, req.PaymentID, req.Amount, req.Currency,
		map[string]string{metaPayment: req.PaymentID, metaReservation: req.Reservation})
	if err != nil {
		return Intent{}, err
	}
	return Intent{Ref: in.ID, ClientSecret: in.ClientSecret, ConfirmURL: "/v1/sandbox/psp/intents/" + in.ID + "/confirm"}, nil
}

func (p *sandboxProvider) Refund(ctx context.Context, key, ref string, amount int64) (string, error) {
	return p.s.refund(ctx, key, ref, amount)
}

func (p *sandboxProvider) ParseWebhook(body []byte, header http.Header, now time.Time) (WebhookEvent, error) {
	if err := verifySignature(header.Get(HeaderSignature), body, p.s.secrets, p.tolerance, now); err != nil {
		return WebhookEvent{}, err
	}
	return decodeEnvelope(body)
}

// cutFault reads "name=probability" (validated by config).
func cutFault(f string) (string, float64, bool) {
	name, p, ok := strings.Cut(f, "=")
	v, err := strconv.ParseFloat(p, 64)
	return name, v, ok && err == nil
}
