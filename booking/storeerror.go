package booking

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/wire"
)

// storeError maps PostgreSQL failures to a retryable 503 (lock and
// statement timeouts, deadlocks, a server starting, stopping or out of
// connections, lost connections) or, for constraint violations that mean
// "taken", a 409. Anything else is a 500.
func storeError(what string, err error) error {
	var apiErr *wire.Error
	if errors.As(err, &apiErr) {
		return err
	}
	// Connection failures first (refused, reset, cut mid-query, timed
	// out): a refused connection wraps the server's own PgError (57P03
	// "the database system is starting up"), which is no bug of ours.
	if store.Unavailable(err) {
		return wire.Unavailable(wire.StoreRetryAfter, "the database is unavailable; retry")
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if retryableState(pgErr.Code) {
			return wire.Unavailable(time.Second, "the database is busy; retry")
		}
		switch pgErr.Code {
		case "23505":
			switch pgErr.ConstraintName {
			case "one_live_owner_per_seat":
				return wire.Errorf(http.StatusConflict, "seats_unavailable", "a seat of the cart was taken")
			case "one_active_checkout":
				return wire.Errorf(http.StatusConflict, "pending_checkout", "you already have a checkout in progress for this event")
			case "promotion_uses_pkey":
				return wire.Errorf(http.StatusConflict, "promotion_already_used", "you already used this promotion code")
			case "one_active_stay_checkout":
				return wire.Errorf(http.StatusConflict, "pending_checkout", "you already have a checkout in progress at this hotel")
			}
		case "23514":
			switch pgErr.ConstraintName {
			case "room_nights_no_overbooking":
				// The database refused an overbooking the code let through.
				return wire.Errorf(http.StatusConflict, "rooms_unavailable", "not enough rooms free on every night")
			case "seat_held_only_when_available":
				// A seat read free was taken (or blocked) before the write.
				if seat, err := strconv.ParseInt(pgErr.Detail, 10, 64); err == nil {
					return seatsTaken([]int64{seat})
				}
				return wire.Errorf(http.StatusConflict, "seats_unavailable", "a seat of the cart was taken")
			case "promotion_within_cap":
				return wire.Errorf(http.StatusConflict, "promotion_exhausted", "this promotion has no uses left")
			}
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
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
