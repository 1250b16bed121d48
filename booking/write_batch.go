package booking

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/batch"
)

// Group commit of holds. A hold's write is one statement and one commit,
// and most of what PostgreSQL spends on it is per statement and per
// commit, not per seat: binding and starting the plan, compiling the
// tables' check constraints, the round trip, the WAL flush it waits for.
// A process therefore runs few writes at once (booking.hold_writers), and
// holds that reach their write while every writer is busy wait for the
// next free one, which writes them all in one statement and one commit
// (internal/batch). The wait for a writer replaces the wait PostgreSQL's own
// commit queue would have made.
//
// A batch is all or nothing: if any of its holds is refused (a seat taken
// since it was read, a key or a checkout written by a concurrent request),
// the whole statement fails and each hold is then written alone, so that
// each gets its own answer. The constraints that make a single hold safe
// make the batch safe; the batch only takes its locks in the same global
// orders (keys and reservations by user, seats by id, counters by event,
// section and shard), so batches and single holds cannot deadlock.

// maxWriteBatch bounds a batch: past it the statement's per-row work
// dominates, and a failed batch is costly to redo one by one.
const maxWriteBatch = 16

// errWriteAlone tells a hold whose batch failed to write itself alone.
var errWriteAlone = errors.New("batch refused: write alone")

// holdWriters writes holds, batched by a group.
type holdWriters struct {
	h *holdsPlane
	*batch.Group[*pendingHold]
}

func newHoldWriters(h *holdsPlane, writers int) *holdWriters {
	w := &holdWriters{h: h}
	w.Group = batch.New(writers, maxWriteBatch, w.run, errWriteAlone)
	return w
}

// write writes p (which ends no reservation first), alone or with the
// holds queued with it, and returns what its own write returned.
func (w *holdWriters) write(ctx context.Context, p *pendingHold) error {
	if p.promo {
		// The batch statement takes no promotion uses.
		return w.h.write(ctx, p)
	}
	err := w.Do(ctx, p)
	if errors.Is(err, batch.ErrLeftQueue) {
		// The request ended while waiting for a writer: nothing was
		// written.
		return storeError("wait for a writer", err)
	}
	if !errors.Is(err, errWriteAlone) {
		return err
	}
	return w.h.write(ctx, p)
}

// run writes a batch and tells each hold its outcome. Its context does not
// end with the request of the caller running it (the batch holds other
// callers' holds); the statement and lock timeouts bound it.
func (w *holdWriters) run(ctx context.Context, calls []*batch.Call[*pendingHold]) {
	h := w.h
	ctx, cancel := context.WithTimeout(ctx, 2*(h.cfg.StatementTimeout+h.cfg.LockTimeout))
	defer cancel()
	h.m.writeBatch.Observe(float64(len(calls)))
	if len(calls) == 1 {
		calls[0].Answer(h.write(ctx, calls[0].Item))
		return
	}
	ps := make([]*pendingHold, len(calls))
	for i, m := range calls {
		ps[i] = m.Item
	}
	err := h.sendWrites(ctx, len(ps), func(b *pgx.Batch) error { return queueHolds(b, ps) })
	if err != nil {
		h.m.writeBatchRefused.Inc()
		err = errWriteAlone
	}
	for _, m := range calls {
		m.Answer(err)
	}
}

// writeHoldsSQL writes several holds of seats, without promotion codes, as
// writeHoldSQL writes one. Each array parameter has one element per hold
// ($1–$9), per seat ($10–$16), per section counter ($17–$20) or per
// inventory event ($22–$23). A seat's reservation is found by its position
// in the seat array: the seats are locked and updated by key, as in a
// single hold, with no join a planner could turn into a scan.
const writeHoldsSQL = `
WITH hold AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::uuid[], $6::text[],
		$7::timestamptz[], $8::bigint[], $9::text[])
		AS h(user_id, key, fingerprint, response, id, event_id, expires_at, total, currency)),
answer AS (
	INSERT INTO idempotency_keys (user_id, operation, key, fingerprint, status_code, response)
	SELECT user_id, $24, key, fingerprint, $25, response FROM hold ORDER BY user_id, key RETURNING 1),
reservation AS (
	INSERT INTO reservations (id, event_id, user_id, status, expires_at, total, currency)
	SELECT id, event_id, user_id, 'PENDING_PAYMENT', expires_at, total, currency FROM hold
	ORDER BY user_id, event_id RETURNING 1),
wanted AS (SELECT id FROM seats WHERE id = ANY($11) ORDER BY id FOR UPDATE SKIP LOCKED),
all_locked AS (SELECT seats_all_locked(cardinality($11::bigint[]), (SELECT count(*) FROM wanted)) AS ok),
held AS (
	UPDATE seats s SET status = 'HELD', reservation_id = ($10::uuid[])[array_position($11::bigint[], s.id)],
		version = s.version + 1
	FROM wanted, all_locked WHERE s.id = wanted.id AND all_locked.ok RETURNING 1),
items AS (
	INSERT INTO reservation_items (reservation_id, seat_id, section_id, base_price, surge_bps, discount, price_at_lock, status)
	SELECT *, 'HELD' FROM unnest($10::uuid[], $11::bigint[], $12::text[], $13::bigint[], $14::int[], $15::bigint[], $16::bigint[])
	RETURNING 1),
counted AS (
	SELECT o.event_id, o.section_id, o.shard, v.n
	FROM unnest($17::text[], $18::text[], $19::int[], $20::int[]) v(event_id, section_id, shard, n)
	JOIN section_occupancy o ON o.event_id = v.event_id AND o.section_id = v.section_id AND o.shard = v.shard
	ORDER BY o.event_id, o.section_id, o.shard FOR UPDATE OF o),
counters AS (
	UPDATE section_occupancy o SET taken = o.taken + c.n FROM counted c
	WHERE o.event_id = c.event_id AND o.section_id = c.section_id AND o.shard = c.shard RETURNING 1),
events AS (
	INSERT INTO outbox (kind, aggregate_id, payload)
	SELECT $21, a, p::jsonb FROM unnest($22::text[], $23::text[]) e(a, p) RETURNING 1)
SELECT (SELECT count(*) FROM answer), (SELECT count(*) FROM reservation), (SELECT count(*) FROM held),
       (SELECT count(*) FROM items), (SELECT count(*) FROM counters), (SELECT count(*) FROM events)`

// sectionKey is a section of an event.
type sectionKey struct{ event, section string }

// sectionCount is what a batch adds to a section: n seats, on one shard.
type sectionCount struct{ shard, n int32 }

// queueHolds adds the writes of several holds without promotion codes to
// b: one statement. Each section of each event gets one counter row (a
// random shard, as for a single hold) and one inventory event, however
// many of the batch's holds took seats in it.
func queueHolds(b *pgx.Batch, ps []*pendingHold) error {
	n := len(ps)
	users, keys, resIDs, events, currencies := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	fps, bodies := make([][]byte, n), make([][]byte, n)
	expires, totals := make([]time.Time, n), make([]int64, n)
	var itemRes, secs []string
	var ids, bases, discounts, prices []int64
	var surges []int32
	counted := map[sectionKey]*sectionCount{}
	for i, p := range ps {
		if p.promo || len(p.reclaim) > 0 {
			return fmt.Errorf("hold %s cannot be written in a batch", p.id)
		}
		users[i], keys[i], resIDs[i], events[i], currencies[i] = p.in.User, p.in.Key, p.id, p.in.Event, p.currency
		fps[i], bodies[i], expires[i], totals[i] = p.fingerprint, p.body, p.expiresAt, p.total
		for _, it := range p.items {
			itemRes, ids, secs = append(itemRes, p.id), append(ids, it.Seat), append(secs, it.Section)
			bases, surges, discounts, prices = append(bases, it.BasePrice), append(surges, int32(it.SurgeBps)), append(discounts, it.Discount), append(prices, it.Price)
			c := counted[sectionKey{p.in.Event, it.Section}]
			if c == nil {
				c = &sectionCount{shard: int32(rand.IntN(occupancyShards))}
				counted[sectionKey{p.in.Event, it.Section}] = c
			}
			c.n++
		}
	}
	cEvents, cSections, cShards, cCounts := counterArrays(counted)
	payloads := make([]string, len(cEvents))
	for i := range cEvents {
		body, err := inventoryPayload(cEvents[i], cSections[i])
		if err != nil {
			return err
		}
		payloads[i] = body
	}
	b.Queue(writeHoldsSQL, users, keys, fps, bodies, resIDs, events, expires, totals, currencies,
		itemRes, ids, secs, bases, surges, discounts, prices,
		cEvents, cSections, cShards, cCounts, KindInventoryChanged, cEvents, payloads,
		opHold, http.StatusCreated)
	return nil
}

// counterArrays lists the counter rows in their lock order.
func counterArrays(counted map[sectionKey]*sectionCount) (events, sections []string, shards, counts []int32) {
	order := slices.SortedFunc(maps.Keys(counted), func(a, b sectionKey) int {
		return cmp.Or(cmp.Compare(a.event, b.event), cmp.Compare(a.section, b.section))
	})
	for _, k := range order {
		events, sections = append(events, k.event), append(sections, k.section)
		shards, counts = append(shards, counted[k].shard), append(counts, counted[k].n)
	}
	return events, sections, shards, counts
}
