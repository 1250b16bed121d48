// Package admission is what a waiting room's admission is made of, shared
// by the module that grants it (waitingroom) and the one that honours it
// (booking), so that neither reaches into the other's keys or scripts:
//
//   - the pass, a short-lived EdDSA token naming a user and an event
//     (Issuer signs it with the admit plane's private key, Checker checks
//     it with public keys only);
//   - the lease, the server-side half: the user's expiry in the event's
//     leases sorted set, read and moved on Redis's clock by the Lua rules
//     of LeaseLua (Leases runs them alone; a caller's script may start
//     with them to check a lease together with work of its own, on keys of
//     the lease's slot).
//
// A pass is good only together with a live lease (Verifier). Every error
// wraps ErrNotAdmitted or ErrUnavailable, and both must be refused: nobody
// is let in by a failure.
package admission

import (
	"errors"

	"github.com/presenced/presenced/internal/validate"
	"github.com/presenced/presenced/store"
)

// The two ways an admission check fails.
var (
	// ErrNotAdmitted: the pass is not good for this user and event (bad
	// signature, wrong algorithm, expired, wrong event or user), or no live
	// lease is behind it.
	ErrNotAdmitted = errors.New("not admitted")
	// ErrUnavailable: the lease store failed, or this process holds no
	// pass keys; the caller must refuse (fail closed) and may retry.
	ErrUnavailable = errors.New("admission check unavailable")
)

// Slot builds keys in the Redis Cluster slot of event's leases: the
// waiting room's keys of the event, and those a caller's script uses with
// the lease. A caller's key names start with its module's name
// ("booking"); the waiting room never touches them.
func Slot(ks store.Keyspace, event string) store.EntityKeys { return ks.Entity("wr", event) }

// LeaseKey is the sorted set of event's leases: user → expiry in ms.
func LeaseKey(ks store.Keyspace, event string) string { return Slot(ks, event).Key("act") }

// maxUserBytes bounds a user id (a pass's subject) kept in a lease.
const maxUserBytes = 200

// named tells whether event and user can name a lease.
func named(event, user string) bool {
	return user != "" && len(user) <= maxUserBytes && validate.EventID.Valid(event)
}
