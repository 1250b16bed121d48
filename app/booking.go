package app

import (
	"context"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/store"
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
