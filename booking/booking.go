// Package booking sells seats without ever selling one twice. PostgreSQL
// owns ownership (a partial unique index allows one live item per seat, a
// check ties a seat's state to its reservation); Redis only turns obvious
// contention into cheap rejections and serves seat-map snapshots.
//
// The package has one part per plane: Holds (booking: holds, reservations,
// admin), Expirer (worker), SeatMap (browse, read-only login), Live (browse:
// invalidations over SSE and WebSocket) and Invalidator (the outbox relay's
// derived effect).
package booking

import (
	"context"
	"errors"
	"time"

	"github.com/presenced/presenced/store"
)

// Admission checks a buyer's admission pass and its live lease. The waiting
// room provides it; booking never reads the waiting room's keys.
type Admission interface {
	// Verify returns nil only for a valid pass of user for event whose
	// server-side lease is live. Errors wrap ErrNotAdmitted or
	// ErrAdmissionUnavailable.
	Verify(ctx context.Context, pass, event, user string) error
	// Extend keeps the lease alive for d from now (the hold duration).
	Extend(ctx context.Context, event, user string, d time.Duration) error
	// Release ends the lease (checkout finished or abandoned).
	Release(ctx context.Context, event, user string) error
}

// Errors an Admission reports.
var (
	ErrNotAdmitted          = errors.New("not admitted")
	ErrAdmissionUnavailable = errors.New("admission check unavailable")
)

// Seat states.
const (
	SeatAvailable = "AVAILABLE"
	SeatHeld      = "HELD"
	SeatSold      = "SOLD"
	SeatBlocked   = "BLOCKED"
)

// Reservation states.
const (
	StatusPending   = "PENDING_PAYMENT"
	StatusPaid      = "PAID"
	StatusExpired   = "EXPIRED"
	StatusCancelled = "CANCELLED"
)

// KindInventoryChanged is the outbox event of a section whose seats changed.
const KindInventoryChanged = "inventory.changed"

// InventoryChanged is its payload.
type InventoryChanged struct {
	Event   string `json:"event"`
	Section string `json:"section"`
}

// keys builds booking's Redis keys; every key of one event shares its hash tag.
type keys struct{ ks store.Keyspace }

func (k keys) hint(event string, seat int64) string {
	return k.ks.Entity("event", event).Key("hint", itoa(seat))
}
func (k keys) snapshot(event, scope string) string {
	return k.ks.Entity("event", event).Key("map", scope)
}
func (k keys) fillLease(event, scope string) string {
	return k.ks.Entity("event", event).Key("map", scope, "fill")
}
func (k keys) liveTopic(event, section string) string {
	return k.ks.Entity("event", event).Key("live", section)
}
func (k keys) holdRate(user string) string {
	return k.ks.Entity("user", user).Key("rl", "holds")
}

// allScope names the snapshot of a whole event.
const allScope = "_all"
