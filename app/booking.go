package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/waitingroom"
)

// Booking's parts share one metrics set and, on the browse plane, one seat
// map (its layouts are cached per process).

func (a *App) bookingMetrics() (*booking.Metrics, error) {
	v, err := a.memo("booking.metrics", func() (any, error) { return booking.NewMetrics(a.Metrics) })
	if err != nil {
		return nil, err
	}
	return v.(*booking.Metrics), nil
}

func (a *App) seatMap() (*booking.SeatMap, error) {
	v, err := a.memo("booking.seatmap", func() (any, error) {
		ctx := context.Background()
		ro, err := a.Postgres(ctx, store.PoolReadOnly)
		if err != nil {
			return nil, err
		}
		rdb, err := a.Redis(ctx)
		if err != nil {
			return nil, err
		}
		m, err := a.bookingMetrics()
		if err != nil {
			return nil, err
		}
		return booking.NewSeatMap(booking.SeatMapDeps{ReadOnly: ro, Redis: rdb, Keys: a.Keys,
			Config: a.Config.Booking, Metrics: m, Log: a.Log.With("module", "booking")})
	})
	if err != nil {
		return nil, err
	}
	return v.(*booking.SeatMap), nil
}

func startBookingSeatMap(a *App) error {
	sm, err := a.seatMap()
	if err != nil {
		return err
	}
	sm.RoutesSeats(a.Routes())
	return nil
}

func startBookingLive(a *App) error {
	sm, err := a.seatMap()
	if err != nil {
		return err
	}
	h, err := a.Hub(context.Background())
	if err != nil {
		return err
	}
	sm.RoutesLive(a.Routes(), h, a.Server.Sockets)
	return nil
}

// startOutboxRelay runs the relay with the derived effects of the modules
// that write outbox events.
func startOutboxRelay(a *App) error {
	ctx := context.Background()
	pool, err := a.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	rdb, err := a.Redis(ctx)
	if err != nil {
		return err
	}
	h, err := a.Hub(ctx)
	if err != nil {
		return err
	}
	c := a.Config.Outbox
	relay, err := outbox.NewRelay(outbox.RelayConfig{
		Pool: pool, Redis: rdb, Stream: a.Keys.Global("outbox").Key("events"), StreamMaxLen: c.StreamMaxLen,
		Batch: c.Batch, PollInterval: c.PollInterval, Retention: c.Retention,
		Registerer: a.Metrics, Log: a.Log.With("module", "outbox"),
	})
	if err != nil {
		return err
	}
	relay.Handle(booking.KindInventoryChanged, booking.NewInvalidator(rdb, h, a.Keys).Handle)
	a.Go("outbox.relay", relay.Run)
	return nil
}

// admission hands the waiting room's verifier to booking. The modules share
// no types: the waiting room's errors are translated into booking's here.
type admission struct{ v *waitingroom.Verifier }

func (ad admission) Verify(ctx context.Context, pass, event, user string) error {
	return admissionError(ad.v.Verify(ctx, pass, event, user))
}

func (ad admission) Extend(ctx context.Context, event, user string, d time.Duration) error {
	return admissionError(ad.v.Extend(ctx, event, user, d))
}

func (ad admission) Release(ctx context.Context, event, user string) error {
	return admissionError(ad.v.Release(ctx, event, user))
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

// holdsDeps are the dependencies of the booking plane and the expiry worker.
func (a *App) holdsDeps(ctx context.Context) (booking.HoldsDeps, error) {
	db, err := a.Postgres(ctx, store.PoolMain)
	if err != nil {
		return booking.HoldsDeps{}, err
	}
	rdb, err := a.Redis(ctx)
	if err != nil {
		return booking.HoldsDeps{}, err
	}
	v, err := a.admissionVerifier(ctx)
	if err != nil {
		return booking.HoldsDeps{}, err
	}
	m, err := a.bookingMetrics()
	if err != nil {
		return booking.HoldsDeps{}, err
	}
	return booking.HoldsDeps{DB: db, Redis: rdb, Keys: a.Keys, Admission: admission{v}, Config: a.Config.Booking,
		Metrics: m, Log: a.Log.With("module", "booking")}, nil
}

func startBookingHolds(a *App) error {
	d, err := a.holdsDeps(context.Background())
	if err != nil {
		return err
	}
	h, err := booking.NewHolds(d)
	if err != nil {
		return err
	}
	users, err := a.Users()
	if err != nil {
		return err
	}
	h.Routes(a.Routes(), users.Middleware(), a.RequireAPIKey())
	return nil
}

func startBookingExpiry(a *App) error {
	d, err := a.holdsDeps(context.Background())
	if err != nil {
		return err
	}
	e, err := booking.NewExpirer(d)
	if err != nil {
		return err
	}
	a.Go("booking.expiry", e.Run)
	return nil
}
