package payments

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/outbox"
)

// refunder gives money back: payments in REFUND_REQUIRED and charges that
// no payment claims. A refund that fails is retried with backoff, forever:
// after refund_manual_after failures it is also put in the manual queue (a
// metric and `presenced check`), never dropped. Several workers may run:
// each claims rows with SKIP LOCKED and pushes their next attempt out while
// it calls the provider.
type refunder struct {
	db     *pgxpool.Pool
	router *router
	cfg    config.Payments
	m      *metrics
	log    *slog.Logger
}

func (r *refunder) Run(ctx context.Context) error {
	return every(ctx, r.cfg.WorkerInterval, func(ctx context.Context) {
		if _, err := r.RefundOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("refunds", "err", err)
		}
		if _, err := r.RefundOrphansOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("orphan refunds", "err", err)
		}
		if err := r.reap(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("reap webhook events", "err", err)
		}
	})
}

// every runs f now and then every period until ctx ends.
func every(ctx context.Context, period time.Duration, f func(context.Context)) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type refundJob struct {
	id, reservation, provider, ref string
	attempts                       int
}

// RefundOnce refunds one batch of due payments and returns how many it
// refunded.
func (r *refunder) RefundOnce(ctx context.Context) (int, error) {
	rows, err := r.db.Query(ctx, `
UPDATE payments SET next_attempt_at = clock_timestamp() + make_interval(secs => $2)
WHERE id IN (SELECT id FROM payments WHERE status = 'REFUND_REQUIRED' AND next_attempt_at <= clock_timestamp()
             ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id::text, reservation_id::text, provider, provider_ref, attempts`, r.cfg.WorkerBatch, (2 * r.cfg.ProviderTimeout).Seconds())
	if err != nil {
		return 0, fmt.Errorf("claim refunds: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (refundJob, error) {
		var j refundJob
		return j, row.Scan(&j.id, &j.reservation, &j.provider, &j.ref, &j.attempts)
	})
	if err != nil {
		return 0, fmt.Errorf("claim refunds: %w", err)
	}
	done := 0
	for _, j := range jobs {
		refundID, err := r.router.refund(ctx, j.provider, "refund:"+j.id, j.ref, 0)
		if err != nil {
			r.failed(ctx, `UPDATE payments SET attempts = attempts + 1, last_error = $2, manual = $3,
				next_attempt_at = clock_timestamp() + make_interval(secs => $4) WHERE id = $1`, j.id, j.attempts, err)
			continue
		}
		if err := pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE payments SET status = 'REFUNDED', refund_ref = $2, manual = false, updated_at = clock_timestamp()
				WHERE id = $1 AND status = 'REFUND_REQUIRED'`, j.id, refundID); err != nil {
				return err
			}
			return outbox.Add(ctx, tx, KindPaymentRefunded, j.reservation, map[string]string{"payment": j.id, "refund": refundID})
		}); err != nil {
			return done, fmt.Errorf("record refund of %s: %w", j.id, err)
		}
		r.m.refunds.WithLabelValues("refunded").Inc()
		done++
	}
	return done, nil
}

// failed records a failed attempt: backoff doubling from refund_backoff up
// to an hour, and the manual queue from refund_manual_after failures on.
func (r *refunder) failed(ctx context.Context, sql, id string, attempts int, cause error) {
	attempts++
	wait := r.cfg.RefundBackoff << min(attempts-1, 10)
	manual := attempts >= r.cfg.RefundManualAfter
	if wait > time.Hour || manual {
		wait = time.Hour
	}
	outcome := "failed"
	if manual {
		outcome = "manual"
		r.log.Error("refund keeps failing: in the manual queue, still retried hourly", "attempts", attempts, "err", cause)
	}
	r.m.refunds.WithLabelValues(outcome).Inc()
	if _, err := r.db.Exec(context.WithoutCancel(ctx), sql, id, cause.Error(), manual, wait.Seconds()); err != nil {
		r.log.Warn("record refund failure", "err", err)
	}
}

// RefundOrphansOnce refunds charges that no payment claimed within the
// grace period (seed 003's backstop for a charge whose booking never
// committed).
func (r *refunder) RefundOrphansOnce(ctx context.Context) (int, error) {
	rows, err := r.db.Query(ctx, `
UPDATE payment_orphan_charges o SET next_attempt_at = clock_timestamp() + make_interval(secs => $2)
WHERE (provider, provider_ref) IN (
	SELECT provider, provider_ref FROM payment_orphan_charges
	WHERE status = 'SEEN' AND next_attempt_at <= clock_timestamp()
	ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING provider, provider_ref, attempts,
	EXISTS (SELECT 1 FROM payments p WHERE p.provider = o.provider AND p.provider_ref = o.provider_ref)`,
		r.cfg.WorkerBatch, (2 * r.cfg.ProviderTimeout).Seconds())
	if err != nil {
		return 0, fmt.Errorf("claim orphan charges: %w", err)
	}
	type orphan struct {
		provider, ref string
		attempts      int
		claimed       bool
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (orphan, error) {
		var o orphan
		return o, row.Scan(&o.provider, &o.ref, &o.attempts, &o.claimed)
	})
	if err != nil {
		return 0, fmt.Errorf("claim orphan charges: %w", err)
	}
	done := 0
	for _, o := range jobs {
		if o.claimed {
			// A payment knows this charge now: its own path decides.
			if _, err := r.db.Exec(ctx, `UPDATE payment_orphan_charges SET status = 'CLAIMED' WHERE provider = $1 AND provider_ref = $2`,
				o.provider, o.ref); err != nil {
				return done, err
			}
			continue
		}
		if _, err := r.router.refund(ctx, o.provider, "refund:"+o.ref, o.ref, 0); err != nil {
			r.failed(ctx, `UPDATE payment_orphan_charges SET attempts = attempts + 1, last_error = $2, manual = $3,
				next_attempt_at = clock_timestamp() + make_interval(secs => $4) WHERE provider_ref = $1`, o.ref, o.attempts, err)
			continue
		}
		if _, err := r.db.Exec(ctx, `UPDATE payment_orphan_charges SET status = 'REFUNDED' WHERE provider = $1 AND provider_ref = $2`,
			o.provider, o.ref); err != nil {
			return done, err
		}
		r.m.refunds.WithLabelValues("refunded").Inc()
		done++
	}
	return done, nil
}

// reap deletes dedupe records past their retention, a bounded batch a round.
func (r *refunder) reap(ctx context.Context) error {
	if _, err := r.db.Exec(ctx, `DELETE FROM payment_webhook_events WHERE ctid IN (
		SELECT ctid FROM payment_webhook_events WHERE received_at < statement_timestamp() - make_interval(secs => $1) LIMIT 1000)`,
		r.cfg.WebhookRetention.Seconds()); err != nil {
		return err
	}
	_, err := r.db.Exec(ctx, `DELETE FROM payment_inbox WHERE ctid IN (
		SELECT ctid FROM payment_inbox WHERE processed_at < statement_timestamp() - make_interval(secs => $1) LIMIT 1000)`,
		r.cfg.WebhookRetention.Seconds())
	return err
}

// recoverer finishes payments whose process died between storing the
// payment and saving its intent: the same payment id is the provider's
// idempotency key, so the provider hands back the same intent.
type recoverer struct {
	db     *pgxpool.Pool
	router *router
	cfg    config.Payments
	m      *metrics
	log    *slog.Logger
}

func (rc *recoverer) Run(ctx context.Context) error {
	return every(ctx, rc.cfg.WorkerInterval, func(ctx context.Context) {
		if _, err := rc.RecoverOnce(ctx); err != nil && ctx.Err() == nil {
			rc.log.Warn("recover payments", "err", err)
		}
	})
}

// RecoverOnce finishes one batch of stale INITIALIZING payments.
func (rc *recoverer) RecoverOnce(ctx context.Context) (int, error) {
	rows, err := rc.db.Query(ctx, `
UPDATE payments SET next_attempt_at = clock_timestamp() + make_interval(secs => $3), attempts = attempts + 1
WHERE id IN (SELECT id FROM payments WHERE status = 'INITIALIZING' AND next_attempt_at <= clock_timestamp()
             AND created_at <= clock_timestamp() - make_interval(secs => $2)
             ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING `+paymentCols, rc.cfg.WorkerBatch, rc.cfg.RecoveryAfter.Seconds(), (2 * rc.cfg.ProviderTimeout).Seconds())
	if err != nil {
		return 0, fmt.Errorf("claim initializing payments: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (payment, error) { return scanPayment(row) })
	if err != nil {
		return 0, fmt.Errorf("claim initializing payments: %w", err)
	}
	done := 0
	for _, p := range jobs {
		if _, err := finishPayment(ctx, rc.db, rc.router, p); err != nil {
			rc.log.Warn("recover payment: retried later", "provider", p.Provider, "err", err)
			continue
		}
		rc.m.recovered.Inc()
		done++
	}
	return done, nil
}
