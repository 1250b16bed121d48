package booking

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/internal/refusal"
)

// fingerprint identifies a hold request for the idempotency check: the same
// key with another fingerprint is a different request.
func fingerprint(event string, sortedSeats []int64, promo string) []byte {
	var b strings.Builder
	b.WriteString(event)
	b.WriteByte('\n')
	for _, s := range sortedSeats {
		b.WriteString(strconv.FormatInt(s, 10))
		b.WriteByte(',')
	}
	b.WriteByte('\n')
	b.WriteString(promo)
	sum := sha256.Sum256([]byte(b.String()))
	return sum[:]
}

// occupancyShards is the number of section_occupancy rows per section.
const occupancyShards = 16

// seatsPerSection counts a cart's seats by section.
func seatsPerSection(items []Item) map[string]int {
	out := map[string]int{}
	for _, it := range items {
		out[it.Section]++
	}
	return out
}

const addOccupancy = `UPDATE section_occupancy SET taken = taken + $4 WHERE event_id = $1 AND section_id = $2 AND shard = $3`

// queueSectionChanges adds, for every section a change touched, its
// occupancy update (sign × seats, on a random shard) and its inventory
// event. Sections go in id order so that transactions touching several
// sections take the shard rows in one global order.
func queueSectionChanges(b *pgx.Batch, event string, perSection map[string]int, sign int) error {
	for _, sec := range sortedSections(perSection) {
		b.Queue(addOccupancy, event, sec, rand.IntN(occupancyShards), sign*perSection[sec])
	}
	return queueInventoryEvents(b, event, perSection)
}

// queueInventoryEvents adds an inventory event for each section that
// changed, so seat maps and live viewers learn of it.
func queueInventoryEvents(b *pgx.Batch, event string, perSection map[string]int) error {
	for _, sec := range sortedSections(perSection) {
		if err := outbox.Queue(b, KindInventoryChanged, event, InventoryChanged{Event: event, Section: sec}); err != nil {
			return err
		}
	}
	return nil
}

func sortedSections(perSection map[string]int) []string {
	sections := make([]string, 0, len(perSection))
	for sec := range perSection {
		sections = append(sections, sec)
	}
	slices.Sort(sections)
	return sections
}

// freeze prices every seat: the section's scarcity multiplier from its
// committed occupancy (as read: two buyers in the same instant may see the
// same), the promotion discount, integer half-up rounding.
func freeze(ev eventRow, seats []seatRow, occ []occupancy, promo *promotionRow) ([]Item, int64, error) {
	surge := map[string]int64{}
	until := ev.startsAt.Sub(ev.now)
	for _, o := range occ {
		surge[o.section] = multiplier(o.taken, o.total, until)
	}
	var discountBps int64
	if promo != nil {
		discountBps = promo.discountBps
	}
	items := make([]Item, len(seats))
	var total int64
	for i, s := range seats {
		q, err := priceSeat(s.basePrice, surge[s.section], discountBps)
		if err != nil {
			return nil, 0, refusal.New(ErrPriceError, "the price of seat %d cannot be computed", s.id)
		}
		if total, err = addPrice(total, q.Price); err != nil {
			return nil, 0, refusal.New(ErrPriceError, "the cart total overflows")
		}
		items[i] = Item{Seat: s.id, Section: s.section, Row: s.row, Number: s.num, BasePrice: s.basePrice,
			SurgeBps: surge[s.section], Discount: q.Discount, Price: q.Price, Status: SeatHeld}
	}
	return items, total, nil
}

// pendingHold is a priced hold, ready to be written.
type pendingHold struct {
	in        holdInput
	id        string // the reservation's
	expiresAt time.Time
	currency  string
	items     []Item
	total     int64
	promo     bool
	body      []byte // the 201 answer, stored with the reservation
	// fingerprint of the request, stored with the response for replays.
	fingerprint []byte
	// reclaim lists the reservations to end first (holdView.reclaims).
	reclaim []string
}

// price turns what the first round trip read into the hold to write.
func (h *holdsPlane) price(in holdInput, fp []byte, resID string, v *holdView) (*pendingHold, error) {
	items, total, err := freeze(*v.event, v.seats, v.occupancy(), v.promo)
	if err != nil {
		return nil, err
	}
	expiresAt := v.event.now.Add(time.Duration(v.event.holdMinutes) * time.Minute)
	res := Reservation{ID: resID, Kind: KindSeats, Event: in.Event, Status: StatusPending, ExpiresAt: expiresAt.UTC(),
		Total: total, Currency: v.event.currency, PromoCode: in.PromoCode, Items: items}
	return &pendingHold{in: in, id: resID, expiresAt: expiresAt, currency: v.event.currency, items: items, total: total,
		promo: v.promo != nil, body: mustJSON(res), fingerprint: fp, reclaim: v.reclaims()}, nil
}

// The hold's writes. Nothing was locked when the hold read, so each
// part of the write refuses what may have changed since, by constraint:
//   - idempotency_keys' key: an identical retry running at the same time
//     waits here for the first and is then answered its stored response;
//   - one_active_checkout: a second checkout of the user;
//   - the seats, locked in id order (overlapping carts cannot deadlock),
//     become HELD only from AVAILABLE (seat_held_only_when_available); a
//     seat another transaction has locked is skipped, and seats_all_locked
//     then refuses the hold at once (seats_being_held) rather than let it
//     queue on a hot seat's lock;
//   - one_live_owner_per_seat, as ever;
//   - promotion_within_cap and promotion_uses' key.
const (
	// The timeouts, and generic plans as in the read (selectHoldEvent).
	setHoldTimeouts = `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true),
	set_config('plan_cache_mode', 'force_generic_plan', true)`

	// writeHoldSQL is the whole hold in one statement: every statement
	// has a fixed cost (bind, executor start and end, snapshot,
	// statistics), paid eight to eleven times per hold when each write
	// was a statement of its own. The counters are locked in section
	// order by counted (ORDER BY comes before the locks): the join of the
	// update alone may scan them in their physical order, and two holds
	// of the same two sections then deadlock. The parts run in the order
	// of the final SELECT, each scalar subquery reading its part to the
	// end: the lock order of the separate statements before it (the key,
	// the reservation, the seats in id order, the items, the promotion,
	// the section counters in section order, the events).
	writeHoldWith = `
WITH answer AS (
	INSERT INTO idempotency_keys (user_id, operation, key, fingerprint, status_code, response)
	VALUES ($1, $2, $3, $4, $5, $6) RETURNING 1),
reservation AS (
	INSERT INTO reservations (id, event_id, user_id, status, expires_at, total, currency, promo_code)
	VALUES ($7, $8, $1, 'PENDING_PAYMENT', $9, $10, $11, $12) RETURNING 1),
wanted AS (SELECT id FROM seats WHERE id = ANY($13) ORDER BY id FOR UPDATE SKIP LOCKED),
all_locked AS (SELECT seats_all_locked(cardinality($13::bigint[]), (SELECT count(*) FROM wanted)) AS ok),
held AS (
	UPDATE seats s SET status = 'HELD', reservation_id = $7, version = s.version + 1
	FROM wanted, all_locked WHERE s.id = wanted.id AND all_locked.ok RETURNING 1),
items AS (
	INSERT INTO reservation_items (reservation_id, seat_id, section_id, base_price, surge_bps, discount, price_at_lock, status)
	SELECT $7, *, 'HELD' FROM unnest($13::bigint[], $14::text[], $15::bigint[], $16::int[], $17::bigint[], $18::bigint[])
	RETURNING 1),
counted AS (
	SELECT o.section_id, o.shard, v.n
	FROM unnest($19::text[], $20::int[], $21::int[]) v(section_id, shard, n)
	JOIN section_occupancy o ON o.event_id = $8 AND o.section_id = v.section_id AND o.shard = v.shard
	ORDER BY o.section_id FOR UPDATE OF o),
counters AS (
	UPDATE section_occupancy o SET taken = o.taken + c.n FROM counted c
	WHERE o.event_id = $8 AND o.section_id = c.section_id AND o.shard = c.shard RETURNING 1),
events AS (
	INSERT INTO outbox (kind, aggregate_id, payload)
	SELECT $22, $8, p::jsonb FROM unnest($23::text[]) p RETURNING 1)`

	writeHoldSQL = writeHoldWith + `
SELECT (SELECT count(*) FROM answer), (SELECT count(*) FROM reservation), (SELECT count(*) FROM held),
       (SELECT count(*) FROM items), (SELECT count(*) FROM counters), (SELECT count(*) FROM events)`

	// writeHoldPromoSQL also takes a use of the promotion $12: its cap
	// and the one use per user are constraints.
	writeHoldPromoSQL = writeHoldWith + `,
promotion AS (UPDATE promotions SET used = used + 1 WHERE event_id = $8 AND code = $12 RETURNING 1),
promotion_use AS (INSERT INTO promotion_uses (event_id, code, user_id, reservation_id) VALUES ($8, $12, $1, $7) RETURNING 1)
SELECT (SELECT count(*) FROM answer), (SELECT count(*) FROM reservation), (SELECT count(*) FROM held),
       (SELECT count(*) FROM items), (SELECT count(*) FROM promotion), (SELECT count(*) FROM promotion_use),
       (SELECT count(*) FROM counters), (SELECT count(*) FROM events)`
)

// queueHold adds the hold's writes to b: one statement.
func queueHold(b *pgx.Batch, p *pendingHold) error {
	in := p.in
	n := len(p.items)
	ids, secs := make([]int64, n), make([]string, n)
	bases, surges, discounts, prices := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, it := range p.items {
		ids[i], secs[i], bases[i], surges[i], discounts[i], prices[i] = it.Seat, it.Section, it.BasePrice, it.SurgeBps, it.Discount, it.Price
	}
	perSection := seatsPerSection(p.items)
	sections := sortedSections(perSection) // the counters' lock order
	shards, counts, payloads := make([]int32, len(sections)), make([]int32, len(sections)), make([]string, len(sections))
	for i, sec := range sections {
		shards[i], counts[i] = int32(rand.IntN(occupancyShards)), int32(perSection[sec])
		body, err := inventoryPayload(in.Event, sec)
		if err != nil {
			return err
		}
		payloads[i] = body
	}
	sql, promoCode := writeHoldSQL, (*string)(nil)
	if p.promo {
		sql, promoCode = writeHoldPromoSQL, &in.PromoCode
	}
	b.Queue(sql, in.User, opHold, in.Key, p.fingerprint, http.StatusCreated, p.body,
		p.id, in.Event, p.expiresAt, p.total, p.currency, promoCode,
		ids, secs, bases, surges, discounts, prices,
		sections, shards, counts, KindInventoryChanged, payloads)
	return nil
}

// inventoryPayload is the outbox payload of a section whose seats a hold
// took, as the write statements insert it.
func inventoryPayload(event, section string) (string, error) {
	body, err := json.Marshal(InventoryChanged{Event: event, Section: section})
	if err != nil {
		return "", fmt.Errorf("outbox %s: encode payload: %w", KindInventoryChanged, err)
	}
	return string(body), nil
}

// writeError maps a failed write: the key taken by a concurrent retry, or
// what storeError says.
func writeError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "idempotency_keys_pkey" {
		return errKeyTaken
	}
	return storeError("write hold", err)
}

// write is the second and last round trip of a hold: every write in one
// pipelined batch, which PostgreSQL runs as one implicit transaction and
// commits at its end. No row is locked before it, and none longer than
// it takes.
func (h *holdsPlane) write(ctx context.Context, p *pendingHold) error {
	if err := h.sendWrites(ctx, 1, func(b *pgx.Batch) error { return queueHold(b, p) }); err != nil {
		return writeError(err)
	}
	return nil
}

// sendWrites sends the hold timeouts and the writes queue adds as one
// pipelined batch, which PostgreSQL runs as one implicit transaction, and
// records its time for each of the holds it writes.
func (h *holdsPlane) sendWrites(ctx context.Context, holds int, queue func(*pgx.Batch) error) error {
	b := &pgx.Batch{}
	b.Queue(setHoldTimeouts, itoa(h.cfg.LockTimeout.Milliseconds()), itoa(h.cfg.StatementTimeout.Milliseconds()))
	if err := queue(b); err != nil {
		return err
	}
	start := time.Now()
	err := h.db.SendBatch(ctx, b).Close()
	took := time.Since(start).Seconds()
	for range holds {
		h.m.lockWait.Observe(took)
	}
	return err
}

// writeReclaiming is the hold that must first end reservations (an expired
// hold on a wanted seat, the user's own checkout whose time is up): in one
// transaction, each reservation row locked first and ended (the lock order
// of the expiry worker), then the hold's writes. It takes more round trips,
// and is rare: the expiry worker ends due holds every second.
func (h *holdsPlane) writeReclaiming(ctx context.Context, p *pendingHold) ([]*released, error) {
	tx, err := h.db.Begin(ctx)
	if err != nil {
		return nil, storeError("begin hold", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, setHoldTimeouts, itoa(h.cfg.LockTimeout.Milliseconds()), itoa(h.cfg.StatementTimeout.Milliseconds())); err != nil {
		return nil, storeError("hold", err)
	}
	var ended []*released
	for _, id := range p.reclaim {
		r, err := endReservation(ctx, tx, id, StatusExpired, true, "")
		if errors.Is(err, ErrNotPending) {
			continue // someone else ended it first
		}
		if err != nil {
			return nil, storeError("expire hold inline", err)
		}
		if r.user != p.in.User {
			h.m.reclaimed.WithLabelValues("inline").Inc()
		}
		ended = append(ended, r)
	}
	b := &pgx.Batch{}
	if err := queueHold(b, p); err != nil {
		return nil, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, writeError(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, storeError("commit hold", err)
	}
	return ended, nil
}
