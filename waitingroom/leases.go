package waitingroom

import (
	"context"
	"fmt"
	"time"
)

// Checkout leases, read on Redis's clock; the Verifier's store side.

// LeaseExpiry answers when user's live lease for event ends, or zero.
func (l *lineStore) LeaseExpiry(ctx context.Context, event, user string) (time.Time, error) {
	ms, err := leaseCheckScript.Run(ctx, l.rdb, []string{keysOf(l.keys, event).leases}, user).Int64()
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
	ms, err := leaseExtendScript.Run(ctx, l.rdb, []string{keysOf(l.keys, event).leases}, user, d.Milliseconds()).Int64()
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
