package app

import (
	"context"
	"fmt"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/viewers"
	"github.com/presenced/presenced/waitingroom"
)

func bookingPart(start func(*booking.Module, context.Context, module.Host) error) startFunc {
	return func(ctx context.Context, a *App, h module.Host) error {
		m, err := a.Booking()
		if err != nil {
			return err
		}
		return start(m, ctx, h)
	}
}

// Booking is this process's booking module, built on first use.
func (a *App) Booking() (*booking.Module, error) {
	return a.mods.booking.get(func() (*booking.Module, error) {
		return booking.New(booking.Deps{
			Config: a.Config.Booking, Keys: a.Keys, Admission: admission{waitingroom: a.waitingroom},
			LeaseTimeout: a.Config.Waitingroom.StoreTimeout,
			Viewers:      viewerCounts{a.viewers}, Metrics: a.Metrics, Log: a.Log.With("module", "booking"),
		})
	})
}

// admission hands the waiting room's pass check to booking; the leases
// behind passes are internal/admission's, which booking runs itself. The
// waiting room is looked up per call, so a browse plane that builds
// booking for its seat maps does not build a waiting room it never asks.
type admission struct {
	waitingroom func() (*waitingroom.Module, error)
}

func (ad admission) CheckPass(pass, event, user string) error {
	wr, err := ad.waitingroom()
	if err != nil {
		// The check fails closed: nobody is let in by a failure.
		return fmt.Errorf("%w: %v", booking.ErrAdmissionUnavailable, err)
	}
	return wr.CheckPass(pass, event, user)
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
