package payments

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/streams"
	"github.com/presenced/presenced/payments/ticketcode"
	"github.com/presenced/presenced/store"
)

// fulfiller issues the tickets of paid orders. It reads the stream of
// order.paid events (FulfillmentStream) in a consumer group (each entry
// goes to one of the workers), and
// dedupes with an inbox row committed with the tickets, so a redelivered
// event, a relay that published twice or a sweep that raced it is a no-op;
// one ticket per line is a constraint besides. An order whose fulfillment
// fails stays pending and is retried; money events are never dead-lettered.
type fulfiller struct {
	db      *pgxpool.Pool
	rdb     redis.UniversalClient
	booking Booking
	sealer  *ticketcode.Sealer
	stream  string
	group   *streams.Group
	cfg     config.Payments
	m       *metrics
	log     *slog.Logger
}

type fulfillerDeps struct {
	DB      *pgxpool.Pool
	Redis   redis.UniversalClient
	Keys    store.Keyspace
	Booking Booking
	Sealer  *ticketcode.Sealer
	Config  config.Payments
	Metrics *metrics
	Log     *slog.Logger
}

// fulfillmentGroup is the consumer group of the fulfillment workers.
const fulfillmentGroup = "payments-fulfillment"

// inboxConsumer names the inbox rows of fulfillment.
const inboxConsumer = "fulfillment"

func newFulfiller(d fulfillerDeps) *fulfiller {
	return &fulfiller{db: d.DB, rdb: d.Redis, booking: d.Booking, sealer: d.Sealer,
		stream: FulfillmentStream(d.Keys),
		group:  streams.NewGroup(d.Redis, fulfillmentGroup, streams.ConsumerName(store.NewToken()[:8])),
		cfg:    d.Config, m: d.Metrics, log: d.Log}
}

// Run consumes until ctx ends: entries other consumers left unacknowledged
// for claim_idle first, then new ones; and every monitor interval a sweep
// for paid orders without tickets (the stream may have been trimmed, or an
// older relay that did not route order.paid may have published it).
func (f *fulfiller) Run(ctx context.Context) error {
	lastSweep := time.Time{}
	for ctx.Err() == nil {
		if err := f.group.Create(ctx, f.stream); err != nil {
			f.pause(ctx, "create consumer group", err)
			continue
		}
		if err := f.ConsumeOnce(ctx, time.Second); err != nil && ctx.Err() == nil {
			f.pause(ctx, "consume", err)
		}
		if time.Since(lastSweep) > f.cfg.MonitorInterval {
			lastSweep = time.Now()
			if _, err := f.Sweep(ctx); err != nil && ctx.Err() == nil {
				f.log.Warn("fulfillment sweep", "err", err)
			}
		}
	}
	return nil
}

func (f *fulfiller) pause(ctx context.Context, what string, err error) {
	f.log.Warn("fulfillment: "+what, "err", err)
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}

// ConsumeOnce handles reclaimed and new entries once. Money events are
// never dead-lettered: one that keeps failing stays pending, and the
// monitors report its order.
func (f *fulfiller) ConsumeOnce(ctx context.Context, block time.Duration) error {
	claimed, err := f.group.Reclaim(ctx, f.stream, streams.Reclaim{MinIdle: f.cfg.ClaimIdle, Count: 50})
	for _, msg := range claimed.Entries {
		f.handle(ctx, msg)
	}
	if err != nil {
		return err
	}
	read, err := f.group.Read(ctx, 50, block, f.stream)
	for _, msg := range read[f.stream] {
		f.handle(ctx, msg)
	}
	return err
}

// handle applies one entry and acknowledges it; a failure leaves it
// pending, to be claimed again after claim_idle.
func (f *fulfiller) handle(ctx context.Context, msg redis.XMessage) {
	kind, _ := msg.Values["kind"].(string)
	if kind != KindOrderPaid {
		f.ack(ctx, msg.ID)
		return
	}
	id, err := strconv.ParseInt(fmt.Sprint(msg.Values["id"]), 10, 64)
	var order OrderPaid
	if err == nil {
		err = json.Unmarshal([]byte(fmt.Sprint(msg.Values["payload"])), &order)
	}
	if err != nil || order.Reservation == "" || order.Payment == "" {
		// Our own relay wrote it; an unreadable one is a bug. It stays
		// pending (never dropped) and the monitors report the order.
		f.m.fulfillErrors.Inc()
		f.log.Error("fulfillment: unreadable order.paid entry", "entry", msg.ID, "err", err)
		return
	}
	if _, err := f.Fulfill(ctx, id, order.Reservation, order.Payment); err != nil {
		f.m.fulfillErrors.Inc()
		f.log.Warn("fulfillment failed; retried", "entry", msg.ID, "err", err)
		return
	}
	f.ack(ctx, msg.ID)
}

func (f *fulfiller) ack(ctx context.Context, id string) {
	if err := f.group.Ack(ctx, f.stream, id); err != nil {
		f.log.Warn("fulfillment: ack", "err", err)
	}
}

// Fulfill issues the tickets of one paid reservation and queues its
// notification, in one transaction with the inbox row of outbox event
// eventID (0: a sweep, no inbox row). It returns the tickets it created.
func (f *fulfiller) Fulfill(ctx context.Context, eventID int64, reservation, paymentID string) (int, error) {
	tx, err := f.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if eventID > 0 {
		tag, err := tx.Exec(ctx, `INSERT INTO payment_inbox (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, inboxConsumer, eventID)
		if err != nil {
			return 0, fmt.Errorf("inbox: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return 0, nil // applied before
		}
	}
	co, err := f.booking.LockCheckout(ctx, tx, reservation)
	if err != nil {
		return 0, fmt.Errorf("lock reservation: %w", err)
	}
	lines, err := f.booking.Lines(ctx, tx, reservation)
	if err != nil {
		return 0, fmt.Errorf("lines: %w", err)
	}
	created := 0
	for _, l := range lines {
		id := uuid.NewString()
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return 0, err
		}
		kid, sealed := f.sealer.Seal(secret, []byte(id))
		tag, err := tx.Exec(ctx, `
INSERT INTO tickets (id, reservation_id, line_id, payment_id, event_id, user_id, label, secret_sealed, key_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (line_id) DO NOTHING`,
			id, reservation, l.ID, paymentID, co.Event, co.User, l.Label, sealed, kid)
		if err != nil {
			return 0, fmt.Errorf("issue ticket: %w", err)
		}
		created += int(tag.RowsAffected())
	}
	if _, err := tx.Exec(ctx, `INSERT INTO payment_notifications (reservation_id, user_id, event_id, tickets)
		VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, reservation, co.User, co.Event, len(lines)); err != nil {
		return 0, fmt.Errorf("queue notification: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	f.m.tickets.Add(float64(created))
	return created, nil
}

// Sweep fulfills paid orders that have no tickets a while after payment,
// whatever happened to their stream entry.
func (f *fulfiller) Sweep(ctx context.Context) (int, error) {
	rows, err := f.db.Query(ctx, `
SELECT p.id::text, p.reservation_id::text FROM payments p
WHERE p.status = 'SUCCEEDED' AND p.charged_at < clock_timestamp() - make_interval(secs => $1)
  AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.payment_id = p.id)
LIMIT 100`, f.cfg.ClaimIdle.Seconds())
	if err != nil {
		return 0, fmt.Errorf("find unfulfilled orders: %w", err)
	}
	type order struct{ payment, reservation string }
	orders, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (order, error) {
		var o order
		return o, r.Scan(&o.payment, &o.reservation)
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, o := range orders {
		c, err := f.Fulfill(ctx, 0, o.reservation, o.payment)
		if err != nil {
			return n, err
		}
		n += c
	}
	return n, nil
}
