package booking

import (
	"context"
	"errors"
	"time"

	"github.com/presenced/presenced/internal/refusal"
)

var nowFunc = time.Now

// Cancel ends a pending reservation of user: seats, promotion use and
// admission lease are released. Cancelling a cancelled reservation answers
// its current state.
func (h *holdsPlane) Cancel(ctx context.Context, id, user string) (*Reservation, error) {
	// The server's lock_timeout ends the waits it sees; a half-open link,
	// where it never sees the query, is ended only by a deadline of ours.
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StatementTimeout+h.cfg.LockTimeout)
	defer cancel()
	tx, err := h.db.Begin(ctx)
	if err != nil {
		return nil, storeError("begin cancel", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, itoa(h.cfg.LockTimeout.Milliseconds())); err != nil {
		return nil, storeError("cancel", err)
	}
	r, err := endReservation(ctx, tx, id, StatusCancelled, false, user)
	switch {
	case errors.Is(err, ErrNoReservation):
		return nil, ErrNoReservation
	case errors.Is(err, ErrNotPending):
		cur, lerr := loadReservation(ctx, tx, id, user)
		if lerr != nil {
			return nil, storeError("read reservation", lerr)
		}
		if cur.Status == StatusCancelled {
			return cur, nil
		}
		return nil, refusal.New(ErrNotCancellable, "the reservation is %s", cur.Status)
	case err != nil:
		return nil, storeError("cancel", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, storeError("commit cancel", err)
	}
	h.m.reclaimed.WithLabelValues("cancelled").Inc()
	h.releaseAfter(ctx, r, true)
	res, err := loadReservation(ctx, h.db, id, user)
	if err != nil {
		return nil, storeError("read reservation", err)
	}
	return res, nil
}
