package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/module"
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
			Config: a.Config.Booking, Keys: a.Keys, Admission: admission{a.waitingroom},
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
}

func (ad admission) Verify(ctx context.Context, pass, event, user string) error {
	return ad.call(func(wr *waitingroom.Module) error { return wr.Verify(ctx, pass, event, user) })
}

func (ad admission) Extend(ctx context.Context, event, user string, d time.Duration) error {
	return ad.call(func(wr *waitingroom.Module) error { return wr.Extend(ctx, event, user, d) })
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
