package booking

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/wire"
)

// storeError maps PostgreSQL failures to booking's refusals: busy (lock
// and statement timeouts, deadlocks, a server starting, stopping or out
// of connections, lost connections: retry) or, for the constraint
// violations that mean "taken", the refusal the constraint stands for.
// Anything else is wrapped with what was being done (a 500).
func storeError(what string, err error) error {
	var known *refusal.Error
	if errors.As(err, &known) {
		return err
	}
	// Connection failures first (refused, reset, cut mid-query, timed
	// out): a refused connection wraps the server's own PgError (57P03
	// "the database system is starting up"), which is no bug of ours.
	if store.Unavailable(err) {
		return refusal.Busy(wire.StoreRetryAfter, "the database is unavailable; retry")
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if retryableState(pgErr.Code) {
			return refusal.Busy(time.Second, "the database is busy; retry")
		}
		if r := constraintRefusal(pgErr); r != nil {
			return r
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// constraintRefusal is the refusal a violated constraint stands for (nil:
// none).
func constraintRefusal(pgErr *pgconn.PgError) error {
	switch pgErr.Code + " " + pgErr.ConstraintName {
	case "23505 one_live_owner_per_seat":
		return ErrSeatsUnavailable
	case "23505 one_active_checkout":
		return &PendingCheckoutError{Where: forThisEvent}
	case "23505 promotion_uses_pkey":
		return ErrPromotionUsed
	case "23505 one_active_stay_checkout":
		return &PendingCheckoutError{Where: atThisHotel}
	case "23514 room_nights_no_overbooking":
		// The database refused an overbooking the code let through.
		return ErrRoomsUnavailable
	case "23514 seat_held_only_when_available":
		// A seat read free was taken (or blocked) before the write.
		if seat, err := strconv.ParseInt(pgErr.Detail, 10, 64); err == nil {
			return seatsTaken([]int64{seat})
		}
		return ErrSeatsUnavailable
	case "23514 promotion_within_cap":
		return ErrPromotionExhausted
	case "PBH01 seats_being_held":
		return seatsBeingHeld()
	}
	return nil
}

// retryableState tells whether a SQLSTATE of a server that answered
// means "try again": a lock timeout, serialization failures and
// deadlocks. (A server out of reach, shutting down, starting or out of
// connections is store.Unavailable.)
func retryableState(code string) bool {
	switch code {
	case "55P03", "40001", "40P01":
		return true
	}
	return false
}
