package payments

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/outbox"
)

// webhooks receives provider events: the only path on which money moves.
type webhooks struct {
	db        *pgxpool.Pool // the webhook pool
	booking   Booking
	providers map[string]Provider
	cfg       config.Payments
	m         *metrics
	log       *slog.Logger
}

// apply records and acts on one verified event in one transaction: the
// dedupe row, then (for a success) the reservation row locked, then the
// payment, then the sale or the refund obligation.
func (w *webhooks) apply(ctx context.Context, provider string, ev WebhookEvent, fp []byte) (string, error) {
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
		return "", err
	}
	// A concurrent delivery of the same id waits here on the first one's
	// uncommitted row, then finds it: exactly one of them acts.
	tag, err := tx.Exec(ctx, `
INSERT INTO payment_webhook_events (provider, event_id, fingerprint, kind, outcome)
VALUES ($1, $2, $3, $4, 'received') ON CONFLICT DO NOTHING`, provider, ev.ID, fp, ev.Type)
	if err != nil {
		return "", fmt.Errorf("record event: %w", err)
	}
	if tag.RowsAffected() == 0 {
		var seen []byte
		if err := tx.QueryRow(ctx, `SELECT fingerprint FROM payment_webhook_events WHERE provider = $1 AND event_id = $2`,
			provider, ev.ID).Scan(&seen); err != nil {
			return "", fmt.Errorf("read event: %w", err)
		}
		if !bytes.Equal(seen, fp) {
			return "", errWebhookConflict
		}
		return OutcomeDuplicate, nil
	}
	var outcome, paymentID string
	switch ev.Kind {
	case EventSucceeded:
		outcome, paymentID, err = w.succeeded(ctx, tx, provider, ev)
	case EventFailed:
		outcome, paymentID, err = w.failed(ctx, tx, provider, ev)
	case EventRefunded:
		outcome, paymentID, err = w.refunded(ctx, tx, provider, ev)
	default:
		outcome = OutcomeIgnored
	}
	if err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `UPDATE payment_webhook_events SET outcome = $3, payment_id = nullif($4, '')::uuid
		WHERE provider = $1 AND event_id = $2`, provider, ev.ID, outcome, paymentID); err != nil {
		return "", fmt.Errorf("record outcome: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return "", fmt.Errorf("commit: %w", err)
	}
	return outcome, nil
}

type webhookPayment struct {
	id, reservation, provider, status string
	ref                               *string
	amount                            int64
	currency                          string
}

// recordOrphan records money taken for no payment of ours: the backstop
// refunds it after payments.orphan_refund_after unless a payment claims it.
func (w *webhooks) recordOrphan(ctx context.Context, tx pgx.Tx, provider string, ev WebhookEvent) error {
	if _, err := tx.Exec(ctx, `
INSERT INTO payment_orphan_charges (provider, provider_ref, amount, currency, next_attempt_at)
VALUES ($1, $2, $3, $4, clock_timestamp() + make_interval(secs => $5)) ON CONFLICT DO NOTHING`,
		provider, ev.Ref, ev.Amount, ev.Currency, w.cfg.OrphanRefundAfter.Seconds()); err != nil {
		return fmt.Errorf("record orphan charge: %w", err)
	}
	w.log.Warn("charge for no payment of ours; refunded unless claimed", "provider", provider, "event", ev.ID)
	return nil
}

// findPayment looks the event's payment up by reference, else by our id in
// its metadata: the reference names the charge, the metadata is only our
// note on it.
func findPayment(ctx context.Context, tx pgx.Tx, provider string, ev WebhookEvent, lock bool) (webhookPayment, error) {
	q := `SELECT id::text, reservation_id::text, provider, status, provider_ref, amount, currency FROM payments
	      WHERE id = nullif($1, '')::uuid OR (provider = $2 AND provider_ref = $3)
	      ORDER BY (provider = $2 AND provider_ref IS NOT DISTINCT FROM $3) DESC LIMIT 1`
	if lock {
		q = `SELECT id::text, reservation_id::text, provider, status, provider_ref, amount, currency FROM payments WHERE id = $1::uuid FOR UPDATE`
	}
	var p webhookPayment
	arg := []any{ev.PaymentID, provider, ev.Ref}
	if lock {
		arg = []any{ev.PaymentID}
	}
	err := tx.QueryRow(ctx, q, arg...).Scan(&p.id, &p.reservation, &p.provider, &p.status, &p.ref, &p.amount, &p.currency)
	return p, err
}

func (w *webhooks) succeeded(ctx context.Context, tx pgx.Tx, provider string, ev WebhookEvent) (string, string, error) {
	p, err := findPayment(ctx, tx, provider, ev, false)
	if errors.Is(err, pgx.ErrNoRows) {
		return OutcomeOrphan, "", w.recordOrphan(ctx, tx, provider, ev)
	}
	if err != nil {
		return "", "", fmt.Errorf("find payment: %w", err)
	}
	if p.ref == nil {
		return "", "", errNotReady
	}
	// The reservation row first, like every terminal transition; then the
	// payment.
	co, err := w.booking.LockCheckout(ctx, tx, p.reservation)
	if err != nil {
		return "", "", fmt.Errorf("lock reservation: %w", err)
	}
	ev.PaymentID = p.id
	if p, err = findPayment(ctx, tx, provider, ev, true); err != nil {
		return "", "", fmt.Errorf("lock payment: %w", err)
	}
	switch {
	case p.provider != provider || p.ref == nil || *p.ref != ev.Ref:
		// The metadata names a payment of ours, but the charge is not its
		// intent, and no payment has that intent (findPayment prefers the
		// reference): money taken for nothing we sold.
		w.log.Error("webhook reference does not match the payment; the charge is an orphan", "provider", provider, "event", ev.ID)
		return OutcomeMismatch, p.id, w.recordOrphan(ctx, tx, provider, ev)
	case p.status == StatusSucceeded || p.status == StatusRefundRequired || p.status == StatusRefunded:
		return OutcomeDuplicate, p.id, nil
	case p.status == StatusFailed:
		// Money for a payment we gave up on: another payment may own the
		// reservation now. Give it back.
		return OutcomeRefundRequired, p.id, requireRefund(ctx, tx, p, "payment_failed")
	case ev.Amount != p.amount || ev.Currency != p.currency:
		// Never sell on a charge that is not the price: give it back.
		w.log.Error("webhook amount or currency does not match the payment; refunding", "provider", provider, "event", ev.ID)
		return OutcomeMismatch, p.id, requireRefund(ctx, tx, p, "amount_mismatch")
	case co.State == CheckoutPending && !co.Due:
		err := w.booking.MarkPaid(ctx, tx, p.reservation)
		if errors.Is(err, ErrNotPending) {
			return OutcomeRefundRequired, p.id, requireRefund(ctx, tx, p, "not_pending")
		}
		if err != nil {
			return "", "", fmt.Errorf("mark paid: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE payments SET status = 'SUCCEEDED', charged_at = clock_timestamp(), updated_at = clock_timestamp()
			WHERE id = $1`, p.id); err != nil {
			return "", "", fmt.Errorf("mark payment succeeded: %w", err)
		}
		if err := outbox.Add(ctx, tx, KindOrderPaid, p.reservation, OrderPaid{
			Reservation: p.reservation, Payment: p.id, Event: co.Event, User: co.User}); err != nil {
			return "", "", err
		}
		return OutcomePaid, p.id, nil
	default:
		// Paid too late (expired, cancelled, due) or after a failure: the
		// seats may be someone else's now. A late success never resurrects
		// a hold.
		return OutcomeRefundRequired, p.id, requireRefund(ctx, tx, p, "late:"+string(co.State))
	}
}

// requireRefund records the durable obligation to give money back.
func requireRefund(ctx context.Context, tx pgx.Tx, p webhookPayment, reason string) error {
	if _, err := tx.Exec(ctx, `UPDATE payments SET status = 'REFUND_REQUIRED', charged_at = clock_timestamp(),
		next_attempt_at = clock_timestamp(), last_error = $2, updated_at = clock_timestamp() WHERE id = $1`, p.id, reason); err != nil {
		return fmt.Errorf("require refund: %w", err)
	}
	return outbox.Add(ctx, tx, KindRefundRequired, p.reservation, RefundRequired{Reservation: p.reservation, Payment: p.id, Reason: reason})
}

// failed records a failed attempt. The intent stays PENDING: a provider
// lets the buyer try again on the same intent (another card), and the hold
// expires as usual if nobody does.
func (w *webhooks) failed(ctx context.Context, tx pgx.Tx, provider string, ev WebhookEvent) (string, string, error) {
	p, err := findPayment(ctx, tx, provider, ev, false)
	if errors.Is(err, pgx.ErrNoRows) {
		return OutcomeIgnored, "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("find payment: %w", err)
	}
	return OutcomeFailed, p.id, nil
}

func (w *webhooks) refunded(ctx context.Context, tx pgx.Tx, provider string, ev WebhookEvent) (string, string, error) {
	if _, err := tx.Exec(ctx, `UPDATE payment_orphan_charges SET status = 'REFUNDED' WHERE provider = $1 AND provider_ref = $2`,
		provider, ev.Ref); err != nil {
		return "", "", fmt.Errorf("mark orphan refunded: %w", err)
	}
	p, err := findPayment(ctx, tx, provider, ev, false)
	if errors.Is(err, pgx.ErrNoRows) {
		return OutcomeRefunded, "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("find payment: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE payments SET status = 'REFUNDED', updated_at = clock_timestamp()
		WHERE id = $1 AND status = 'REFUND_REQUIRED'`, p.id); err != nil {
		return "", "", fmt.Errorf("mark refunded: %w", err)
	}
	if p.status == StatusSucceeded {
		// Refunded outside presenced (a dashboard): the seats stay sold
		// and a person must look.
		w.log.Error("a paid order was refunded at the provider", "provider", provider, "payment", p.id)
	}
	return OutcomeRefunded, p.id, nil
}
