package booking

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
)

var (
	//go:embed lua/hint_hold.lua
	hintHoldLua string
	//go:embed lua/hint_release.lua
	hintReleaseLua string
	//go:embed lua/hint_extend.lua
	hintExtendLua string
	//go:embed lua/rate.lua
	rateLua string

	hintHold    = store.NewScript("booking_hint_hold", hintHoldLua)
	hintRelease = store.NewScript("booking_hint_release", hintReleaseLua)
	hintExtend  = store.NewScript("booking_hint_extend", hintExtendLua)
	rateScript  = store.NewScript("booking_rate", rateLua)
)

// hints are the Redis seat hints of carts.
type hints struct {
	rdb  redis.UniversalClient
	keys keys
}

// take hints every seat for owner, or none. claim names the request
// (holdClaim): hints of the same claim do not refuse it. It returns the
// seat another request already hints (0 when all were taken).
func (h hints) take(ctx context.Context, event string, seats []int64, owner, claim string, ttl time.Duration) (int64, error) {
	n, err := hintHold.Run(ctx, h.rdb, h.hintKeys(event, seats), owner, claim, max(ttl.Milliseconds(), 1)).Int64()
	if err != nil {
		return 0, fmt.Errorf("seat hints: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	return seats[n-1], nil
}

// queueExtend queues on p the new time to live (the hold's, once it
// committed) of the hints still owned by owner.
func (h hints) queueExtend(ctx context.Context, p redis.Pipeliner, event string, seats []int64, owner string, ttl time.Duration) *redis.Cmd {
	return hintExtend.Queue(ctx, p, h.hintKeys(event, seats), owner, max(ttl.Milliseconds(), 1))
}

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
	out := make([]string, len(seats))
	for i, s := range seats {
		out[i] = h.keys.hint(event, s)
	}
	return out
}

// holdClaim names a hold request in its seat hints: its user and
// idempotency key, hashed (a user id can be 128 bytes).
func holdClaim(user, key string) string {
	sum := sha256.Sum256([]byte(opHold + "\x00" + user + "\x00" + key))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}
