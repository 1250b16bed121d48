package booking

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/refusal"
)

// The first round trip of a hold reads, without locking anything, what
// the hold needs: the stored answer of its key, the event and the user's
// pending checkout, the wanted seats with their holders and their
// sections' counters, and the promotion. Every lookup goes by a primary or
// unique key, so the plans do not depend on statistics: a sale that starts
// minutes after its event was created (never analyzed), or one whose
// statistics were taken before it (a growing partial index), is as fast as
// any. TestHoldQueryPlans holds every query here to that.
const (
	selectStored = `SELECT fingerprint, status_code, response FROM idempotency_keys WHERE user_id = $1 AND operation = $2 AND key = $3`

	// The event's row also sets plan_cache_mode to force_generic_plan for
	// the rest of the batch's implicit transaction, saving a statement:
	// PostgreSQL would otherwise keep planning some of the statements
	// after it anew on every execution (a custom plan per array of seats:
	// about a sixth of its CPU per hold), and their generic plans are key
	// lookups whatever the statistics say (TestHoldQueryPlans). This
	// statement's own plans, custom or generic, are the same key lookup.
	// No event, no row: the refusal does not care how it was planned.
	selectHoldEvent = `
SELECT e.currency, e.starts_at, e.hold_minutes, clock_timestamp(),
       e.sale_opens_at <= clock_timestamp() AND (e.sale_closes_at IS NULL OR e.sale_closes_at > clock_timestamp()),
       r.id::text, r.expires_at <= clock_timestamp(),
       set_config('plan_cache_mode', 'force_generic_plan', true)
FROM events e
LEFT JOIN reservations r ON r.user_id = $2 AND r.event_id = $1 AND r.status = 'PENDING_PAYMENT'
WHERE e.id = $1`

	// The wanted seats and the stored answer of the key, in one statement
	// and so in one snapshot: an identical request that committed before
	// it shows in both, and its retry is answered a replay, never told its
	// own seats are taken. One row per seat (the answer repeated on each),
	// or one row of nulls but the answer when no seat matches. The seat
	// columns come from scalar subqueries, not joins: each runs per seat
	// by its key, and the planner cannot turn them into a scan of
	// reservations, sections or counters however wrong its row estimates
	// are. The holder's state is tested outside the lookup's WHERE, which
	// names only the key: the partial index of pending reservations would
	// otherwise look cheaper to a planner that believes it empty, and grow
	// with the sale.
	selectHoldSeats = `
SELECT k.fingerprint, k.status_code, k.response,
       s.id, s.event_id = $2, s.section_id, s.row_num, s.seat_num, s.status, s.base_price,
       (SELECT CASE WHEN r.status = 'PENDING_PAYMENT' AND r.expires_at <= clock_timestamp() THEN r.id::text END
        FROM reservations r WHERE r.id = s.reservation_id),
       (SELECT c.seat_count FROM sections c WHERE c.event_id = s.event_id AND c.id = s.section_id),
       (SELECT coalesce(sum(o.taken), 0) FROM section_occupancy o WHERE o.event_id = s.event_id AND o.section_id = s.section_id)
FROM (VALUES (true)) one (row)
LEFT JOIN idempotency_keys k ON k.user_id = $3 AND k.operation = $4 AND k.key = $5
LEFT JOIN seats s ON s.id = ANY($1)
ORDER BY s.id`

	selectHoldPromotion = `
SELECT discount_bps, max_uses, used, coalesce(valid_until <= clock_timestamp(), false)
FROM promotions WHERE event_id = $1 AND code = $2`
)

// eventRow is what the hold needs of the event.
type eventRow struct {
	currency    string
	startsAt    time.Time
	holdMinutes int
	now         time.Time // the database's clock when it was read
}

// seatRow is a wanted seat as the first round trip read it.
type seatRow struct {
	id        int64
	ofEvent   bool // a seat of the event the hold is for
	section   string
	row, num  int
	status    string
	basePrice int64
	// expiredHolder is the reservation still holding the seat although
	// its time is up (to reclaim inline), or "".
	expiredHolder string
	// How many seats the seat's section has and how many are taken.
	sectionSeats, sectionTaken int64
	// liveHolder is the pending reservation holding the seat and the
	// milliseconds left of its hold, "<reservation>:<ms>", as the one
	// statement of a hold alone reads it (holdAloneSQL), or "".
	liveHolder string
}

// storedAnswer is the stored response of an idempotency key.
type storedAnswer struct {
	fingerprint []byte
	result      holdResult
}

// holdView is everything the first round trip read.
type holdView struct {
	stored     *storedAnswer
	event      *eventRow
	open       bool
	pendingID  string // the user's pending checkout of the event
	pendingDue bool   // ... whose time is up
	seats      []seatRow
	promo      *promotionRow // nil without a code or for an unknown one
}

// promotionRow is a promotion as read, unlocked: its cap is enforced when
// the hold writes (promotion_within_cap).
type promotionRow struct {
	discountBps   int64
	maxUses, used int
	expired       bool
}

// read is the first round trip: one pipelined batch of key lookups, alone
// or with the reads of other holds (holdReaders).
func (h *holdsPlane) read(ctx context.Context, in holdInput, seats []int64) (*holdView, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StatementTimeout)
	defer cancel()
	b := &pgx.Batch{}
	queueRead(b, in, seats)
	res := h.db.SendBatch(ctx, b)
	defer res.Close()
	v, err := scanRead(res, in)
	if err != nil {
		return nil, err
	}
	if err := res.Close(); err != nil {
		return nil, storeError("read hold", err)
	}
	return v, nil
}

// queueRead adds a hold's lookups to b. Each statement reads its own
// snapshot; the seats and the stored answer share one (selectHoldSeats).
func queueRead(b *pgx.Batch, in holdInput, seats []int64) {
	b.Queue(selectHoldEvent, in.Event, in.User)
	b.Queue(selectHoldSeats, seats, in.Event, in.User, opHold, in.Key)
	if in.PromoCode != "" {
		b.Queue(selectHoldPromotion, in.Event, in.PromoCode)
	}
}

// scanRead reads the results of a hold's lookups, in queueRead's order.
func scanRead(res pgx.BatchResults, in holdInput) (*holdView, error) {
	v := &holdView{}
	var ev eventRow
	var pendingID *string
	var pendingDue *bool
	var planMode string
	err := res.QueryRow().Scan(&ev.currency, &ev.startsAt, &ev.holdMinutes, &ev.now, &v.open, &pendingID, &pendingDue, &planMode)
	switch {
	case err == nil:
		v.event = &ev
		if pendingID != nil {
			v.pendingID, v.pendingDue = *pendingID, *pendingDue
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, storeError("read event", err)
	}

	rows, err := res.Query()
	if err != nil {
		return nil, storeError("read seats", err)
	}
	for rows.Next() {
		var st storedAnswer
		var status *int
		var id *int64
		var s seatRow
		var ofEvent *bool
		var section, seatStatus, holder *string
		var row, num *int
		var basePrice, seatCount, taken *int64
		if err := rows.Scan(&st.fingerprint, &status, &st.result.Body,
			&id, &ofEvent, &section, &row, &num, &seatStatus, &basePrice, &holder, &seatCount, &taken); err != nil {
			rows.Close()
			return nil, storeError("read seats", err)
		}
		if status != nil && v.stored == nil {
			st.result.Status = *status
			v.stored = &st
		}
		if id == nil {
			continue // no seat matched: the row carries only the answer
		}
		s.id, s.ofEvent, s.section, s.row, s.num, s.status, s.basePrice = *id, *ofEvent, *section, *row, *num, *seatStatus, *basePrice
		if holder != nil {
			s.expiredHolder = *holder
		}
		if seatCount != nil {
			s.sectionSeats = *seatCount
		}
		if taken != nil {
			s.sectionTaken = *taken
		}
		v.seats = append(v.seats, s)
	}
	if err := rows.Err(); err != nil {
		return nil, storeError("read seats", err)
	}

	if in.PromoCode != "" {
		var p promotionRow
		err := res.QueryRow().Scan(&p.discountBps, &p.maxUses, &p.used, &p.expired)
		switch {
		case err == nil:
			v.promo = &p
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, storeError("read promotion", err)
		}
	}
	return v, nil
}

// saleRefusal is what a hold of either kind meets before its seats: a
// replay of the key's stored answer, or the event, its sale window or the
// user's pending checkout refusing it (done: nothing more to check).
func (v *holdView) saleRefusal(fp []byte) (r *holdResult, err error, done bool) {
	if v.stored != nil {
		if string(v.stored.fingerprint) != string(fp) {
			return nil, ErrKeyReused, true
		}
		r := v.stored.result
		r.Replayed = true
		return &r, nil, true
	}
	switch {
	case v.event == nil:
		return nil, ErrEventNotFound, true
	case !v.open:
		return nil, ErrSaleClosed, true
	case v.pendingID != "" && !v.pendingDue:
		return nil, &PendingCheckoutError{Reservation: v.pendingID, Where: forThisEvent}, true
	}
	return nil, nil, false
}

// refusal is what the view says about the hold before anything is
// written: a replay of the stored answer, a client error, or nil to go on.
// The order is the one a locking hold would meet them in.
func (v *holdView) refusal(in holdInput, seats []int64, fp []byte) (*holdResult, error) {
	if r, err, done := v.saleRefusal(fp); done {
		return r, err
	}
	var unknown, taken []int64
	for _, id := range seats {
		i := slices.IndexFunc(v.seats, func(s seatRow) bool { return s.id == id })
		switch {
		case i < 0 || !v.seats[i].ofEvent:
			unknown = append(unknown, id)
		case v.seats[i].status != SeatAvailable && v.seats[i].expiredHolder == "":
			taken = append(taken, id)
		}
	}
	if len(unknown) > 0 {
		return nil, &UnknownSeatsError{Seats: unknown}
	}
	if len(taken) > 0 {
		return nil, seatsTaken(taken)
	}
	return nil, v.promoRefusal(in.PromoCode)
}

// promoRefusal refuses a promotion code the event does not have, or one
// that expired or is used up ("" asks for none).
func (v *holdView) promoRefusal(code string) error {
	if code == "" {
		return nil
	}
	switch p := v.promo; {
	case p == nil || p.expired:
		return refusal.New(ErrInvalidPromoCode, "no such promotion code for this event")
	case p.used >= p.maxUses:
		return ErrPromotionExhausted
	}
	return nil
}

// rehints are the seats a refusal says are taken whose live holder the
// view knows, as undo hints them again (seat → "<reservation>:<ms>").
func (v *holdView) rehints(err error) map[int64]string {
	var taken *SeatsTakenError
	if !errors.As(err, &taken) {
		return nil
	}
	out := map[int64]string{}
	for _, s := range v.seats {
		if s.liveHolder != "" && slices.Contains(taken.Seats, s.id) {
			out[s.id] = s.liveHolder
		}
	}
	return out
}

// reclaims lists the reservations the hold must end first, in id order:
// expired holds on wanted seats and the user's own checkout whose time is
// up.
func (v *holdView) reclaims() []string {
	var ids []string
	if v.pendingID != "" && v.pendingDue {
		ids = append(ids, v.pendingID)
	}
	for _, s := range v.seats {
		if s.expiredHolder != "" {
			ids = append(ids, s.expiredHolder)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// occupancy is how full the wanted seats' sections were when read.
func (v *holdView) occupancy() []occupancy {
	var out []occupancy
	for _, s := range v.seats {
		if !slices.ContainsFunc(out, func(o occupancy) bool { return o.section == s.section }) {
			out = append(out, occupancy{section: s.section, total: s.sectionSeats, taken: s.sectionTaken})
		}
	}
	return out
}

// occupancy is how many seats of a section are held or sold.
type occupancy struct {
	section      string
	total, taken int64
}

func seatsTaken(seats []int64) error { return &SeatsTakenError{Seats: seats} }
