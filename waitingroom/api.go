package waitingroom

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
)

// The module's in-process API: what the app and other modules may call.
// Everything else in the package is the module's own.

// Verify returns nil only when pass is a valid pass of user for event and
// user holds a live checkout lease. Errors wrap ErrNotAdmitted or
// ErrUnavailable; the caller must fail closed on both.
func (m *Module) Verify(ctx context.Context, pass, event, user string) error {
	v, err := m.started()
	if err != nil {
		return err
	}
	return v.Verify(ctx, pass, event, user)
}

// Extend keeps user's lease for event alive for d from now.
func (m *Module) Extend(ctx context.Context, event, user string, d time.Duration) error {
	v, err := m.started()
	if err != nil {
		return err
	}
	return v.Extend(ctx, event, user, d)
}

// Release ends user's lease for event (checkout finished or abandoned).
func (m *Module) Release(ctx context.Context, event, user string) error {
	v, err := m.started()
	if err != nil {
		return err
	}
	return v.Release(ctx, event, user)
}

func (m *Module) started() (*passVerifier, error) {
	if m.verifier == nil {
		return nil, fmt.Errorf("%w: the verify part is not started in this process", ErrUnavailable)
	}
	return m.verifier, nil
}

// QueueVerify is Verify for a caller that sends the lease check in one
// round trip with its own Redis calls: the lease check is queued on p, and
// the returned func, called once p has run, checks the pass and answers as
// Verify would. The caller bounds
// p's run (StoreTimeout) and, after a NOSCRIPT, loads LeaseScripts.
func (m *Module) QueueVerify(ctx context.Context, p redis.Pipeliner, pass, event, user string) func() error {
	v, err := m.started()
	if err != nil {
		return func() error { return err }
	}
	return v.QueueVerify(ctx, p, pass, event, user)
}

// QueueExtend is Extend queued on p, as QueueVerify.
func (m *Module) QueueExtend(ctx context.Context, p redis.Pipeliner, event, user string, d time.Duration) func() error {
	v, err := m.started()
	if err != nil {
		return func() error { return err }
	}
	return v.QueueExtend(ctx, p, event, user, d)
}

// LeaseScripts are the scripts QueueVerify and QueueExtend queue.
func (m *Module) LeaseScripts() []*store.Script {
	return []*store.Script{leaseCheckScript, leaseExtendScript}
}

// StoreTimeout bounds one Redis call of a request, a pipeline carrying
// QueueVerify or QueueExtend included.
func (m *Module) StoreTimeout() time.Duration { return m.cfg.StoreTimeout }

// CheckPass checks a pass itself (its EdDSA signature, expiry, user and
// event) but not its lease: for a caller that checks the lease in a script
// of its own (LeaseLua). Errors wrap ErrNotAdmitted or ErrUnavailable.
func (m *Module) CheckPass(pass, event, user string) error {
	v, err := m.started()
	if err != nil {
		return err
	}
	return v.checkPass(pass, event, user)
}

// LeaseLua is the Lua of the lease rules (lease_now, lease_live and
// lease_extend, see lua/lease_lib.lua), for a caller's script that checks
// or extends a lease together with work of its own on keys in the lease's
// slot (LeaseSlot), in one call. The waiting room's own lease scripts start
// with it too, so a lease means the same to both.
func LeaseLua() string { return leaseLib }

// LeaseKey is the key of event's leases, the one LeaseLua's functions take.
func LeaseKey(ks store.Keyspace, event string) string { return keysOf(ks, event).leases }

// LeaseSlot builds keys in the Redis Cluster slot of event's leases, for a
// caller's keys that its script uses with the lease. A caller's key names
// start with its module's name ("booking"); the waiting room never reads,
// writes or deletes them.
func LeaseSlot(ks store.Keyspace, event string) store.EntityKeys { return ks.Entity("wr", event) }
