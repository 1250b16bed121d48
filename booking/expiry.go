package booking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// expirer returns unpaid holds to inventory. Several workers may run it:
// each claims a different batch with FOR UPDATE SKIP LOCKED, and a row a
// payment or a cancel is holding is skipped, not waited on.
type expirer struct {
	h *holdsPlane
}

// newExpirer builds the expiry worker over the same dependencies as Holds.
func newExpirer(d holdsDeps) (*expirer, error) {
	h, err := newHolds(d)
	if err != nil {
		return nil, err
	}
	return &expirer{h: h}, nil
}

// Run reclaims expired holds every expiry_interval and deletes stored
// idempotent responses past their time, until ctx ends.
func (e *expirer) Run(ctx context.Context) error {
	t := time.NewTicker(e.h.cfg.ExpiryInterval)
	defer t.Stop()
	lastReap := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for {
			n, err := e.ExpireOnce(ctx)
			if err != nil {
				if ctx.Err() == nil {
					e.h.log.Warn("expire holds", "err", err)
				}
				break
			}
			if n < e.h.cfg.ExpiryBatch {
				break
			}
		}
		if time.Since(lastReap) > time.Minute {
			lastReap = time.Now()
			if err := e.reapIdempotency(ctx); err != nil && ctx.Err() == nil {
				e.h.log.Warn("reap idempotency keys", "err", err)
			}
		}
	}
}

// claimExpired compares with statement_timestamp(), not clock_timestamp():
// a volatile function cannot bound an index scan, and the partial index on
// expires_at would be read whole, every second.
const claimExpired = `
SELECT id::text FROM reservations
WHERE status = 'PENDING_PAYMENT' AND expires_at <= statement_timestamp()
ORDER BY expires_at
FOR UPDATE SKIP LOCKED
LIMIT $1`

// ExpireOnce reclaims one batch and returns how many holds it ended.
func (e *expirer) ExpireOnce(ctx context.Context) (int, error) {
	tx, err := e.h.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("expire: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, itoa(e.h.cfg.LockTimeout.Milliseconds())); err != nil {
		return 0, fmt.Errorf("expire: %w", err)
	}
	rows, err := tx.Query(ctx, claimExpired, e.h.cfg.ExpiryBatch)
	if err != nil {
		return 0, fmt.Errorf("claim expired holds: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("claim expired holds: %w", err)
	}
	// Every reservation row of the batch is locked (the claim); the nights
	// of its stays are locked next, in one global order, before any is
	// ended, so the batch cannot deadlock with a hold of overlapping nights.
	if err := lockStayNights(ctx, tx, ids); err != nil {
		return 0, fmt.Errorf("expire: %w", err)
	}
	var ended []*released
	for _, id := range ids {
		r, err := endReservation(ctx, tx, id, StatusExpired, true, "")
		if errors.Is(err, ErrNotPending) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("expire %s: %w", id, err)
		}
		ended = append(ended, r)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit expiry: %w", err)
	}
	for _, r := range ended {
		e.h.m.reclaimed.WithLabelValues("expired").Inc()
		e.h.releaseAfter(ctx, r, true)
	}
	return len(ids), nil
}

func (e *expirer) reapIdempotency(ctx context.Context) error {
	_, err := e.h.db.Exec(ctx, `
DELETE FROM idempotency_keys WHERE ctid IN (
	SELECT ctid FROM idempotency_keys WHERE created_at < statement_timestamp() - make_interval(secs => $1) LIMIT 10000)`,
		e.h.cfg.IdempotencyTTL.Seconds())
	return err
}
