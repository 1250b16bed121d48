package admission

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
)

var (
	//go:embed lease_lib.lua
	leaseLib string
	//go:embed lease_check.lua
	leaseCheckLua string
	//go:embed lease_extend.lua
	leaseExtendLua string

	// The lease scripts start with lease_lib.lua, as a caller's script
	// that checks a lease with work of its own does (LeaseLua).
	leaseCheck  = store.NewScript("admission_lease_check", leaseLib+leaseCheckLua)
	leaseExtend = store.NewScript("admission_lease_extend", leaseLib+leaseExtendLua)
)

// LeaseLua is the Lua of the lease rules: lease_now(), lease_live(key,
// user, now) (the expiry ms of a live lease, or 0) and lease_extend(key,
// user, now, ms) (the new expiry, or 0 when no lease was live), for a
// script that starts with it and takes LeaseKey among its keys.
func LeaseLua() string { return leaseLib }

// Leases reads, extends and ends checkout leases, each Redis call bounded
// by a timeout.
type Leases struct {
	rdb     redis.UniversalClient
	ks      store.Keyspace
	timeout time.Duration
}

// NewLeases returns the leases kept in rdb under ks; timeout bounds each
// call (0: the caller's context alone).
func NewLeases(rdb redis.UniversalClient, ks store.Keyspace, timeout time.Duration) *Leases {
	return &Leases{rdb: rdb, ks: ks, timeout: timeout}
}

// Scripts are the scripts the Queue methods queue, for a caller to load
// after a NOSCRIPT.
func (l *Leases) Scripts() []*store.Script { return []*store.Script{leaseCheck, leaseExtend} }

// Timeout bounds a pipeline carrying the queued calls.
func (l *Leases) Timeout() time.Duration { return l.timeout }

// Live returns nil when user holds a live lease for event.
func (l *Leases) Live(ctx context.Context, event, user string) error {
	if !named(event, user) {
		return errUnnamed
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	return live(leaseCheck.Run(ctx, l.rdb, []string{LeaseKey(l.ks, event)}, user))
}

// QueueLive queues Live on p; the returned func answers once p ran.
func (l *Leases) QueueLive(ctx context.Context, p redis.Pipeliner, event, user string) func() error {
	if !named(event, user) {
		return func() error { return errUnnamed }
	}
	cmd := leaseCheck.Queue(ctx, p, []string{LeaseKey(l.ks, event)}, user)
	return func() error { return live(cmd) }
}

var errUnnamed = fmt.Errorf("%w: no such event or user", ErrNotAdmitted)

func live(cmd *redis.Cmd) error {
	ms, err := cmd.Int64()
	switch {
	case err != nil:
		return fmt.Errorf("%w: lease: %v", ErrUnavailable, err)
	case ms == 0:
		return fmt.Errorf("%w: no live lease", ErrNotAdmitted)
	}
	return nil
}

// Expiry answers when user's live lease for event ends, or zero.
func (l *Leases) Expiry(ctx context.Context, event, user string) (time.Time, error) {
	ctx, cancel := l.bound(ctx)
	defer cancel()
	ms, err := leaseCheck.Run(ctx, l.rdb, []string{LeaseKey(l.ks, event)}, user).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: lease: %v", ErrUnavailable, err)
	}
	if ms == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms), nil
}

// Extend moves user's live lease for event to end d from now; without a
// live lease it fails with ErrNotAdmitted (a lease is never revived).
func (l *Leases) Extend(ctx context.Context, event, user string, d time.Duration) error {
	if err := checkExtend(event, user, d); err != nil {
		return err
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	return extended(leaseExtend.Run(ctx, l.rdb, []string{LeaseKey(l.ks, event)}, user, d.Milliseconds()))
}

// QueueExtend queues Extend on p; the returned func answers once p ran.
func (l *Leases) QueueExtend(ctx context.Context, p redis.Pipeliner, event, user string, d time.Duration) func() error {
	if err := checkExtend(event, user, d); err != nil {
		return func() error { return err }
	}
	cmd := leaseExtend.Queue(ctx, p, []string{LeaseKey(l.ks, event)}, user, d.Milliseconds())
	return func() error { return extended(cmd) }
}

func checkExtend(event, user string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: cannot extend a lease by %s", ErrNotAdmitted, d)
	}
	if !named(event, user) {
		return errUnnamed
	}
	return nil
}

func extended(cmd *redis.Cmd) error {
	ms, err := cmd.Int64()
	switch {
	case err != nil:
		return fmt.Errorf("%w: extend lease: %v", ErrUnavailable, err)
	case ms == 0:
		return fmt.Errorf("%w: no live lease to extend", ErrNotAdmitted)
	}
	return nil
}

// Release ends user's lease for event, freeing its capacity for the next
// admission; releasing a lease that is gone is not an error.
func (l *Leases) Release(ctx context.Context, event, user string) error {
	if !named(event, user) {
		return nil // nothing can be held there
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	if err := l.rdb.ZRem(ctx, LeaseKey(l.ks, event), user).Err(); err != nil {
		return fmt.Errorf("%w: release lease: %v", ErrUnavailable, err)
	}
	return nil
}

func (l *Leases) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.timeout)
}
