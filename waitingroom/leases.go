package waitingroom

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Checkout leases, read on Redis's clock; the Verifier's store side.

// LeaseExpiry answers when user's live lease for event ends, or zero.
func (l *lineStore) LeaseExpiry(ctx context.Context, event, user string) (time.Time, error) {
	return leaseExpiry(leaseCheckScript.Run(ctx, l.rdb, []string{keysOf(l.keys, event).leases}, user))
}

// queueLeaseExpiry queues LeaseExpiry on p; its answer is read from the
// returned func once p ran.
func (l *lineStore) queueLeaseExpiry(ctx context.Context, p redis.Pipeliner, event, user string) func() (time.Time, error) {
	cmd := leaseCheckScript.Queue(ctx, p, []string{keysOf(l.keys, event).leases}, user)
	return func() (time.Time, error) { return leaseExpiry(cmd) }
}

func leaseExpiry(cmd *redis.Cmd) (time.Time, error) {
	ms, err := cmd.Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("waitingroom lease: %w", err)
	}
	if ms == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms), nil
}

// ExtendLease moves a live lease's expiry to d from now; it reports false
// when there is no live lease.
func (l *lineStore) ExtendLease(ctx context.Context, event, user string, d time.Duration) (bool, error) {
	return leaseExtended(leaseExtendScript.Run(ctx, l.rdb, []string{keysOf(l.keys, event).leases}, user, d.Milliseconds()))
}

// queueExtendLease queues ExtendLease on p.
func (l *lineStore) queueExtendLease(ctx context.Context, p redis.Pipeliner, event, user string, d time.Duration) func() (bool, error) {
	cmd := leaseExtendScript.Queue(ctx, p, []string{keysOf(l.keys, event).leases}, user, d.Milliseconds())
	return func() (bool, error) { return leaseExtended(cmd) }
}

func leaseExtended(cmd *redis.Cmd) (bool, error) {
	ms, err := cmd.Int64()
	if err != nil {
		return false, fmt.Errorf("waitingroom extend lease: %w", err)
	}
	return ms > 0, nil
}

// ReleaseLease ends user's lease; releasing twice is harmless.
func (l *lineStore) ReleaseLease(ctx context.Context, event, user string) error {
	if err := l.rdb.ZRem(ctx, keysOf(l.keys, event).leases, user).Err(); err != nil {
		return fmt.Errorf("waitingroom release lease: %w", err)
	}
	return nil
}
