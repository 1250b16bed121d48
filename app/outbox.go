package app

import (
	"context"
	"fmt"

	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/store"
)

// startOutboxRelay runs the relay of committed outbox events to the event
// stream, with the derived effects each module registers for its own kinds.
func startOutboxRelay(ctx context.Context, a *App, h module.Host) error {
	pool, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	rdb, err := h.Redis(ctx)
	if err != nil {
		return err
	}
	c := a.Config.Outbox
	relay, err := outbox.NewRelay(outbox.RelayConfig{
		Pool: pool, Redis: rdb, Stream: outbox.Stream(a.Keys), StreamMaxLen: c.StreamMaxLen,
		Batch: c.Batch, PollInterval: c.PollInterval, Retention: c.Retention,
		Registerer: a.Metrics, Log: a.Log.With("module", "outbox"),
	})
	if err != nil {
		return err
	}
	b, err := a.Booking()
	if err != nil {
		return err
	}
	if err := b.RegisterEffects(ctx, h, relay); err != nil {
		return err
	}
	// Fulfillment reads only paid orders, from a stream of their own.
	relay.Route(payments.KindOrderPaid, payments.FulfillmentStream(a.Keys))
	h.Go("outbox.relay", relay.Run)
	return nil
}

// startOutboxAge exports the age of the oldest unpublished outbox event,
// read at scrape time: the booking plane (which writes the outbox) and the
// workers (which relay it) export it, so it is there when the relay is not.
func startOutboxAge(ctx context.Context, a *App, h module.Host) error {
	pool, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	if err := outbox.RegisterAgeMetric(a.Metrics, pool); err != nil {
		return fmt.Errorf("outbox: age metric: %w", err)
	}
	return nil
}
