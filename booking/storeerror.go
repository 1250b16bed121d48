package booking

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// Connection failures first: a refused connection wraps the server's
	// own PgError (57P03 "the database system is starting up"), which is
	// no bug of ours.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || pgconn.SafeToRetry(err) || isConnError(err) {
		return wire.Unavailable(time.Second, "the database is unavailable; retry")
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

// retryableState tells whether a SQLSTATE means "try again": lock and
// statement timeouts, serialization failures and deadlocks, a server that
// is shutting down, restarting or starting (57P01-57P03, 57P05 idle
// session timeout), out of connections or resources (class 53), and
// connection exceptions (class 08).
func retryableState(code string) bool {
	switch code {
	case "55P03", "57014", "40001", "40P01", "57P01", "57P02", "57P03", "57P05", "58030":
		return true
	}
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53")
}

func isConnError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || errors.Is(err, pgx.ErrTxClosed)
}
