package booking

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/admission"
	"github.com/presenced/presenced/store"
)

var (
	//go:embed lua/hint_lib.lua
	hintLib string
	//go:embed lua/hint_release.lua
	hintReleaseLua string
	//go:embed lua/hold_gate.lua
	holdGateLua string
	//go:embed lua/hold_extend.lua
	holdExtendLua string
	//go:embed lua/hold_undo.lua
	holdUndoLua string
	//go:embed lua/rate.lua
	rateLua string

	hintRelease = store.NewScript("booking_hint_release", hintReleaseLua)
	rateScript  = store.NewScript("booking_rate", rateLua)
)

// holdScripts are a hold's Redis calls: the gate (rate, admission lease,
// seat hints, and the lease moved to the hold's time), the only one of a
// hold that commits; the undo of a hold that took its hints and did not
// commit; and the extension after the commit when the gate could not move
// the lease (the first hold of an event in this process). They start with
// the lease rules of internal/admission.
type holdScripts struct {
	gate, undo, extend *store.Script
}

func newHoldScripts() holdScripts {
	return holdScripts{
		gate:   store.NewScript("booking_hold_gate", admission.LeaseLua()+hintLib+holdGateLua),
		undo:   store.NewScript("booking_hold_undo", admission.LeaseLua()+hintLib+holdUndoLua),
		extend: store.NewScript("booking_hold_extend", admission.LeaseLua()+hintLib+holdExtendLua),
	}
}

// hints are the Redis seat hints of carts. They live in the slot of the
// event's admission leases (admission.Slot), so that a hold checks its
// lease and takes its hints in one script call, also in Redis Cluster.
//
// The layout before (keys under the event's own tag, "{event:<id>}:hint:*")
// is not read: during a rolling upgrade an old and a new process do not see
// each other's hints. Nothing depends on that, since a hint only turns
// obvious contention into a cheap 409 and PostgreSQL decides ownership; an
// old hint lapses with its hold (TestHintsOfTheOldLayoutAreIgnored).
type hints struct {
	rdb redis.UniversalClient
	ks  store.Keyspace
}

// leaseKey is the event's admission leases, which the hold scripts check
// and extend.
func (h hints) leaseKey(event string) string { return admission.LeaseKey(h.ks, event) }

// release drops the hints still owned by owner.
func (h hints) release(ctx context.Context, event string, seats []int64, owner string) error {
	if len(seats) == 0 {
		return nil
	}
	if err := hintRelease.Run(ctx, h.rdb, h.hintKeys(event, seats), owner).Err(); err != nil {
		return fmt.Errorf("release seat hints: %w", err)
	}
	return nil
}

func (h hints) hintKeys(event string, seats []int64) []string {
	slot := admission.Slot(h.ks, event)
	out := make([]string, len(seats))
	for i, s := range seats {
		out[i] = slot.Key("booking", "hint", itoa(s))
	}
	return out
}

// rateKey counts user's hold attempts at event, in the same slot.
func (h hints) rateKey(event, user string) string {
	return admission.Slot(h.ks, event).Key("booking", "rl", user)
}

// holdClaim names a hold request in its seat hints: its user and
// idempotency key, hashed (a user id can be 128 bytes).
func holdClaim(user, key string) string {
	sum := sha256.Sum256([]byte(opHold + "\x00" + user + "\x00" + key))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}
