package store

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/lease_acquire.lua
	leaseAcquireLua string
	//go:embed lua/lease_release.lua
	leaseReleaseLua string

	leaseAcquire = NewScript("lease_acquire", leaseAcquireLua)
	leaseRelease = NewScript("lease_release", leaseReleaseLua)
)

// Lease is a named lock in Redis with a time to live, held by one owner at
// a time: the tool for "one tick per event per period however many workers
// run". A holder must renew it well within the TTL; a holder that stalls
// past the TTL loses it to the next caller.
type Lease struct {
	rdb   redis.UniversalClient
	key   string
	owner string
	ttl   time.Duration
}

// NewLease returns a lease on key with a fresh random owner token.
func NewLease(rdb redis.UniversalClient, key string, ttl time.Duration) *Lease {
	return &Lease{rdb: rdb, key: key, owner: NewToken(), ttl: ttl}
}

// Owner is this holder's token.
func (l *Lease) Owner() string { return l.owner }

// TryAcquire takes the lease, or renews it when already held, and reports
// whether this owner holds it now.
func (l *Lease) TryAcquire(ctx context.Context) (bool, error) {
	n, err := leaseAcquire.Run(ctx, l.rdb, []string{l.key}, l.owner, l.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("lease %s: %w", l.key, err)
	}
	return n == 1, nil
}

// Release frees the lease if this owner still holds it.
func (l *Lease) Release(ctx context.Context) error {
	if err := leaseRelease.Run(ctx, l.rdb, []string{l.key}, l.owner).Err(); err != nil {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}

// AcquireLeases takes or renews many leases for one owner in one pipeline,
// the keys possibly in different slots, and reports which it holds.
func AcquireLeases(ctx context.Context, rdb redis.UniversalClient, keys []string, owner string, ttl time.Duration) ([]bool, error) {
	cmds := make([]*redis.Cmd, len(keys))
	err := leaseAcquire.Pipelined(ctx, rdb, func(p redis.Pipeliner) {
		for i, k := range keys {
			cmds[i] = leaseAcquire.Queue(ctx, p, []string{k}, owner, ttl.Milliseconds())
		}
	})
	if err != nil {
		return nil, fmt.Errorf("leases: %w", err)
	}
	held := make([]bool, len(keys))
	for i, c := range cmds {
		n, err := c.Int()
		held[i] = err == nil && n == 1
	}
	return held, nil
}

// NewToken returns 128 random bits in hex, for owner tokens and fill leases.
func NewToken() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}
