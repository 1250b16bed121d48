package booking

import (
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/web"
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

// queueSectionChanges adds, for every section a change touched, its
// occupancy update (sign × seats, on a random shard) and its inventory
// event. Sections go in id order so that transactions touching several
// sections take the shard rows in one global order.
func queueSectionChanges(b *pgx.Batch, event string, perSection map[string]int, sign int) error {
	for _, sec := range sortedSections(perSection) {
		b.Queue(`UPDATE section_occupancy SET taken = taken + $4 WHERE event_id = $1 AND section_id = $2 AND shard = $3`,
			event, sec, rand.IntN(occupancyShards), sign*perSection[sec])
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

// promotion is a locked promotion row.
type promotion struct {
	discountBps int64
}

// lockPromotion locks the promotion row and checks the global cap; the
// per-user cap is the primary key of promotion_uses, checked on insert.
func lockPromotion(ctx context.Context, tx pgx.Tx, event, code string) (*promotion, error) {
	if code == "" {
		return nil, nil
	}
	var p promotion
	var maxUses, used int
	var expired bool
	err := tx.QueryRow(ctx, `
SELECT discount_bps, max_uses, used, coalesce(valid_until <= clock_timestamp(), false)
FROM promotions WHERE event_id = $1 AND code = $2 FOR UPDATE`, event, code).Scan(&p.discountBps, &maxUses, &used, &expired)
	if errors.Is(err, pgx.ErrNoRows) || expired {
		return nil, web.Errorf(http.StatusUnprocessableEntity, "invalid_promo_code", "no such promotion code for this event")
	}
	if err != nil {
		return nil, storeError("lock promotion", err)
	}
	if used >= maxUses {
		return nil, web.Errorf(http.StatusConflict, "promotion_exhausted", "this promotion has no uses left")
	}
	return &p, nil
}

// freeze prices every seat: the section's scarcity multiplier from its
// committed occupancy, the promotion discount, integer half-up rounding.
func freeze(ev eventRow, seats []lockedSeat, occ []occupancy, promo *promotion) ([]Item, int64, error) {
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
			return nil, 0, web.Errorf(http.StatusUnprocessableEntity, "price_error", "the price of seat %d cannot be computed", s.id)
		}
		if total, err = addPrice(total, q.Price); err != nil {
			return nil, 0, web.Errorf(http.StatusUnprocessableEntity, "price_error", "the cart total overflows")
		}
		items[i] = Item{Seat: s.id, Section: s.section, Row: s.row, Number: s.num, BasePrice: s.basePrice,
			SurgeBps: surge[s.section], Discount: q.Discount, Price: q.Price, Status: SeatHeld}
	}
	return items, total, nil
}

// write prices the cart and writes the reservation, its items, the seats,
// the promotion use, the inventory events and the stored response in one
// round trip of the hold transaction.
// pendingHold is a hold whose seats are locked, ready to be written.
type pendingHold struct {
	in        holdInput
	ev        eventRow
	id        string // the reservation's
	expiresAt time.Time
	seats     []lockedSeat
	occ       []occupancy
	// fingerprint of the request, stored with the response for replays.
	fingerprint []byte
}

func (h *holdsPlane) write(ctx context.Context, tx pgx.Tx, p pendingHold) (holdResult, error) {
	in, ev, resID, expiresAt, fp := p.in, p.ev, p.id, p.expiresAt, p.fingerprint
	promo, err := lockPromotion(ctx, tx, in.Event, in.PromoCode)
	if err != nil {
		return holdResult{}, err
	}
	items, total, err := freeze(ev, p.seats, p.occ, promo)
	if err != nil {
		return holdResult{}, err
	}
	res := Reservation{ID: resID, Kind: KindSeats, Event: in.Event, Status: StatusPending, ExpiresAt: expiresAt.UTC(),
		Total: total, Currency: ev.currency, PromoCode: in.PromoCode, Items: items}
	body := mustJSON(res)

	var promoCode *string
	if promo != nil {
		promoCode = &in.PromoCode
	}
	ids := make([]int64, len(items))
	secs := make([]string, len(items))
	bases, surges, discounts, prices := make([]int64, len(items)), make([]int64, len(items)), make([]int64, len(items)), make([]int64, len(items))
	for i, it := range items {
		ids[i], secs[i], bases[i], surges[i], discounts[i], prices[i] = it.Seat, it.Section, it.BasePrice, it.SurgeBps, it.Discount, it.Price
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO reservations (id, event_id, user_id, status, expires_at, total, currency, promo_code)
	         VALUES ($1, $2, $3, 'PENDING_PAYMENT', $4, $5, $6, $7)`,
		resID, in.Event, in.User, expiresAt, total, ev.currency, promoCode)
	b.Queue(`INSERT INTO reservation_items (reservation_id, seat_id, section_id, base_price, surge_bps, discount, price_at_lock, status)
	         SELECT $1, * , 'HELD' FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::int[], $6::bigint[], $7::bigint[])`,
		resID, ids, secs, bases, surges, discounts, prices)
	b.Queue(`UPDATE seats SET status = 'HELD', reservation_id = $1, version = version + 1 WHERE id = ANY($2)`, resID, ids)
	if promo != nil {
		b.Queue(`INSERT INTO promotion_uses (event_id, code, user_id, reservation_id) VALUES ($1, $2, $3, $4)
		         ON CONFLICT DO NOTHING`, in.Event, in.PromoCode, in.User, resID)
		b.Queue(`UPDATE promotions SET used = used + 1 WHERE event_id = $1 AND code = $2`, in.Event, in.PromoCode)
	}
	b.Queue(`INSERT INTO idempotency_keys (user_id, operation, key, fingerprint, status_code, response)
	         VALUES ($1, $2, $3, $4, $5, $6)`, in.User, opHold, in.Key, fp, http.StatusCreated, body)
	if err := queueSectionChanges(b, in.Event, seatsPerSection(items), +1); err != nil {
		return holdResult{}, err
	}
	results := tx.SendBatch(ctx, b)
	for i := 0; i < b.Len(); i++ {
		tag, err := results.Exec()
		if err != nil {
			_ = results.Close()
			return holdResult{}, storeError("write hold", err)
		}
		if promo != nil && i == 3 && tag.RowsAffected() == 0 {
			_ = results.Close()
			return holdResult{}, web.Errorf(http.StatusConflict, "promotion_already_used", "you already used this promotion code")
		}
	}
	if err := results.Close(); err != nil {
		return holdResult{}, storeError("write hold", err)
	}
	return holdResult{Status: http.StatusCreated, Body: body}, nil
}
