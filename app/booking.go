package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/viewers"
	"github.com/presenced/presenced/waitingroom"
)

func bookingPart(start func(*booking.Module, context.Context, module.Host) error) startFunc {
	return func(ctx context.Context, a *App, h module.Host) error {
		m, err := a.booking()
		if err != nil {
			return err
		}
		return start(m, ctx, h)
	}
}

func (a *App) booking() (*booking.Module, error) {
	return a.mods.booking.get(func() (*booking.Module, error) {
		return booking.New(booking.Deps{
			Config: a.Config.Booking, Keys: a.Keys, Admission: admission{waitingroom: a.waitingroom, keys: a.Keys},
			Viewers: viewerCounts{a.viewers}, Metrics: a.Metrics, Log: a.Log.With("module", "booking"),
		})
	})
}

// admission hands the waiting room's pass checks to booking. The modules
// share no types: the waiting room's errors are translated here. The waiting
// room is looked up per call, so a browse plane that builds booking for its
// seat maps does not build a waiting room it never asks.
type admission struct {
	waitingroom func() (*waitingroom.Module, error)
	keys        store.Keyspace
}

func (ad admission) CheckPass(pass, event, user string) error {
	return ad.call(func(wr *waitingroom.Module) error { return wr.CheckPass(pass, event, user) })
}

// The lease's Lua and keys need no waiting room in the process: they are
// the layout's, and the Keyspace is the one the waiting room is built with.
func (ad admission) LeaseLua() string             { return waitingroom.LeaseLua() }
func (ad admission) LeaseKey(event string) string { return waitingroom.LeaseKey(ad.keys, event) }
func (ad admission) LeaseSlot(event string) store.EntityKeys {
	return waitingroom.LeaseSlot(ad.keys, event)
}

func (ad admission) QueueVerify(ctx context.Context, p redis.Pipeliner, pass, event, user string) func() error {
	return ad.queue(func(wr *waitingroom.Module) func() error { return wr.QueueVerify(ctx, p, pass, event, user) })
}

func (ad admission) QueueExtend(ctx context.Context, p redis.Pipeliner, event, user string, d time.Duration) func() error {
	return ad.queue(func(wr *waitingroom.Module) func() error { return wr.QueueExtend(ctx, p, event, user, d) })
}

func (ad admission) Scripts() []*store.Script {
	wr, err := ad.waitingroom()
	if err != nil {
		return nil
	}
	return wr.LeaseScripts()
}

func (ad admission) Timeout() time.Duration {
	wr, err := ad.waitingroom()
	if err != nil {
		return time.Second // nothing is queued then: the check fails closed
	}
	return wr.StoreTimeout()
}

// queue runs f's queueing now and translates its answer's error later.
func (ad admission) queue(f func(*waitingroom.Module) func() error) func() error {
	wr, err := ad.waitingroom()
	if err != nil {
		return func() error { return admissionError(err) }
	}
	answer := f(wr)
	return func() error { return admissionError(answer()) }
}

func (ad admission) Release(ctx context.Context, event, user string) error {
	return ad.call(func(wr *waitingroom.Module) error { return wr.Release(ctx, event, user) })
}

func (ad admission) call(f func(*waitingroom.Module) error) error {
	wr, err := ad.waitingroom()
	if err != nil {
		return admissionError(err)
	}
	return admissionError(f(wr))
}

func admissionError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, waitingroom.ErrNotAdmitted):
		return fmt.Errorf("%w: %v", booking.ErrNotAdmitted, err)
	default:
		// Anything else, ErrUnavailable included, fails closed.
		return fmt.Errorf("%w: %v", booking.ErrAdmissionUnavailable, err)
	}
}

// viewerCounts hands the viewers module's live counts to booking's hotel
// search. The viewers module is looked up per call, like the waiting room.
type viewerCounts struct {
	viewers func() (*viewers.Module, error)
}

func (vc viewerCounts) ViewerCount(ctx context.Context, hotel string) (int64, bool, error) {
	v, err := vc.viewers()
	if err != nil {
		return 0, false, err
	}
	c, err := v.Count(ctx, hotel)
	if err != nil {
		return 0, false, err
	}
	return c.Count, c.Stale, nil
}
