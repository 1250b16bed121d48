package booking

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

// A hold alone: one round trip. When a writer is free and no hold waits
// for one, the read, the checks, the prices and the write are one
// statement (holdAloneSQL): what the read of holdView and the write of
// writeHoldSQL did in two round trips. The statement writes only when
// everything the read sees lets the hold through (no stored answer of the
// key, the event on sale, no pending checkout of the user, every seat of
// the event and AVAILABLE, the promotion valid, the prices within 63
// bits); otherwise it writes nothing and returns what it read, from
// which holdView.refusal answers without another round trip, or from
// which the hold goes on the way it did before (an expired reservation to
// end first: writeReclaiming). What changed since the statement's snapshot
// is refused by the same constraints as before, as the write runs.
//
// The prices are multiplier and priceSeat in SQL, and the stored response
// is built by the statement, byte for byte what mustJSON(Reservation)
// makes of it: every string in it is an identifier of a restricted
// alphabet (validate's event, section and promotion patterns, a UUID, a
// currency of three capitals) that JSON quotes as is, and the expiry is
// RFC 3339 with the fraction's trailing zeros cut, as time.Time marshals
// it (TestHoldAloneAnswersWhatTheTwoRoundTripsAnswered).
//
// A seat another transaction holds locked right now is skipped (SKIP
// LOCKED) and seats_all_locked then refuses the hold at once, as
// seats_being_held, instead of letting it queue on a hot seat's lock.
//
// Every lookup goes by a key, a holder's state tested outside the
// lookup's WHERE as in selectHoldSeats, so the plans do not depend on
// statistics (TestHoldQueryPlans).
//
// Holds that queue for a writer keep the batched path: group reads, prices
// in Go, group commit (writeHoldsSQL), which costs fewer statements per
// hold when there are many.
const holdAloneSQL = aloneEvent + namedSeat + alonePrices + namedVerdict + aloneAnswer + namedHeld + aloneRest + namedSelect

// The parts of holdAloneSQL that a best-available hold in one statement
// (bestAloneSQL) shares: what it reads of the event, the key and the
// promotion; the prices of the seats (a CTE seat of id, section_id,
// row_num, seat_num, base_price, section_seats and section_taken, and one
// verdict); the answer and the reservation; the items, the promotion's
// use, the section counters and the outbox events. Parameters $1–$7 and
// $9–$11 mean the same in both.
const (
	aloneEvent = `
WITH clock AS (SELECT clock_timestamp() AS now),
ev AS (
	SELECT e.currency::text AS currency, e.starts_at, e.hold_minutes, c.now,
	       e.sale_opens_at <= c.now AND (e.sale_closes_at IS NULL OR e.sale_closes_at > c.now) AS open,
	       e.starts_at <= c.now + interval '168 hours' AS last_week,
	       r.id::text AS pending_id, r.expires_at <= c.now AS pending_due
	FROM clock c
	JOIN events e ON e.id = $7
	LEFT JOIN reservations r ON r.user_id = $1 AND r.event_id = $7 AND r.status = 'PENDING_PAYMENT'),
stored AS (SELECT fingerprint, status_code, response FROM idempotency_keys WHERE user_id = $1 AND operation = $2 AND key = $3),
`
	alonePrices = `promo AS (
	SELECT discount_bps, max_uses, used, coalesce(valid_until <= clock_timestamp(), false) AS expired
	FROM promotions WHERE event_id = $7 AND code = $9),
surged AS (
	SELECT seat.*, least(
	         CASE WHEN seat.section_taken * 100 / greatest(seat.section_seats, 1) >= 80 THEN 15000
	              WHEN seat.section_taken * 100 / greatest(seat.section_seats, 1) >= 50 THEN 12500
	              ELSE 10000 END
	         + CASE WHEN ev.last_week THEN 500 ELSE 0 END, 15000) AS surge_bps
	FROM seat, ev),
grossed AS (
	SELECT surged.*, div(surged.base_price::numeric * surged.surge_bps + 5000, 10000) AS gross FROM surged),
priced AS (
	SELECT grossed.*, grossed.gross - d.discount AS price, d.discount
	FROM grossed, LATERAL (SELECT div(grossed.gross * coalesce((SELECT discount_bps FROM promo), 0) + 5000, 10000) AS discount) d),
`
	aloneAnswer = `hold AS (
	SELECT ev.currency, ev.now + make_interval(mins => ev.hold_minutes) AS expires_at,
	       (SELECT sum(price)::bigint FROM priced) AS total
	FROM ev, verdict WHERE verdict.ok),
body AS (
	SELECT convert_to('{"id":' || to_json($6::text) || ',"kind":"seats","event":' || to_json($7::text)
	    || ',"status":"PENDING_PAYMENT","expiresAt":"'
	    || to_char(h.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
	    || rtrim(rtrim(to_char(h.expires_at AT TIME ZONE 'UTC', '.US'), '0'), '.') || 'Z"'
	    || ',"total":' || h.total || ',"currency":' || to_json(h.currency)
	    || coalesce(',"promoCode":' || to_json($9::text), '')
	    || ',"items":[' || (SELECT string_agg('{"seat":' || id || ',"section":' || to_json(section_id)
	        || ',"row":' || row_num || ',"number":' || seat_num || ',"basePrice":' || base_price
	        || ',"surgeBps":' || surge_bps || ',"discount":' || discount || ',"price":' || price
	        || ',"status":"HELD"}', ',' ORDER BY id) FROM priced)
	    || ']}', 'UTF8') AS response
	FROM hold h),
answer AS (
	INSERT INTO idempotency_keys (user_id, operation, key, fingerprint, status_code, response)
	SELECT $1, $2, $3, $4, $5, response FROM body RETURNING 1),
reservation AS (
	INSERT INTO reservations (id, event_id, user_id, status, expires_at, total, currency, promo_code)
	SELECT $6::uuid, $7, $1, 'PENDING_PAYMENT', expires_at, total, currency, $9 FROM hold RETURNING 1),
`
	aloneRest = `items AS (
	INSERT INTO reservation_items (reservation_id, seat_id, section_id, base_price, surge_bps, discount, price_at_lock, status)
	SELECT $6::uuid, id, section_id, base_price, surge_bps, discount, price, 'HELD'
	FROM priced WHERE (SELECT ok FROM verdict) RETURNING 1),
promotion AS (
	UPDATE promotions SET used = used + 1 WHERE event_id = $7 AND code = $9 AND (SELECT ok FROM verdict) RETURNING 1),
promotion_use AS (
	INSERT INTO promotion_uses (event_id, code, user_id, reservation_id)
	SELECT $7, $9, $1, $6::uuid FROM verdict WHERE ok AND $9::text IS NOT NULL RETURNING 1),
counted AS (
	SELECT o.section_id, o.shard, v.n
	FROM (SELECT section_id, count(*)::int AS n FROM priced WHERE (SELECT ok FROM verdict) GROUP BY section_id) v
	JOIN section_occupancy o ON o.event_id = $7 AND o.section_id = v.section_id AND o.shard = $10
	ORDER BY o.section_id FOR UPDATE OF o),
counters AS (
	UPDATE section_occupancy o SET taken = o.taken + c.n FROM counted c
	WHERE o.event_id = $7 AND o.section_id = c.section_id AND o.shard = c.shard RETURNING 1),
events AS (
	INSERT INTO outbox (kind, aggregate_id, payload)
	SELECT $11, $7, jsonb_build_object('event', $7::text, 'section', section_id)
	FROM (SELECT DISTINCT section_id FROM priced WHERE (SELECT ok FROM verdict)) s ORDER BY section_id RETURNING 1)`
)

// The parts of holdAloneSQL that are a named hold's own: the wanted seats
// $8, the verdict on them, their locks and the final row.
const (
	namedSeat = `seat AS (
	SELECT s.id, s.event_id = $7 AS of_event, s.section_id, s.row_num, s.seat_num, s.status, s.base_price, s.reservation_id,
	       (SELECT CASE WHEN r.status = 'PENDING_PAYMENT' AND r.expires_at <= clock_timestamp() THEN r.id::text END
	        FROM reservations r WHERE r.id = s.reservation_id) AS expired_holder,
	       (SELECT c.seat_count FROM sections c WHERE c.event_id = s.event_id AND c.id = s.section_id) AS section_seats,
	       (SELECT coalesce(sum(o.taken), 0)::bigint FROM section_occupancy o
	        WHERE o.event_id = s.event_id AND o.section_id = s.section_id) AS section_taken
	FROM seats s WHERE s.id = ANY($8)),
`
	namedVerdict = `verdict AS (
	SELECT NOT EXISTS (SELECT FROM stored)
	   AND coalesce((SELECT open AND pending_id IS NULL FROM ev), false)
	   AND (SELECT count(*) FROM seat WHERE of_event AND status = 'AVAILABLE') = cardinality($8::bigint[])
	   AND ($9::text IS NULL OR coalesce((SELECT NOT expired AND used < max_uses FROM promo), false))
	   AND coalesce((SELECT bool_and(gross <= 9223372036854775807) AND sum(price) <= 9223372036854775807 FROM priced), false)
	   AS ok),
`
	namedHeld = `wanted AS (SELECT id FROM seats WHERE id = ANY($8) AND (SELECT ok FROM verdict) ORDER BY id FOR UPDATE SKIP LOCKED),
all_locked AS (SELECT CASE WHEN (SELECT ok FROM verdict)
	THEN seats_all_locked(cardinality($8::bigint[]), (SELECT count(*) FROM wanted)) ELSE true END AS ok),
held AS (
	UPDATE seats s SET status = 'HELD', reservation_id = $6::uuid, version = s.version + 1
	FROM wanted, all_locked WHERE s.id = wanted.id AND all_locked.ok RETURNING 1),
`
	namedSelect = `
SELECT ` + aloneColumns + `       CASE WHEN NOT v.ok THEN (SELECT json_agg(json_build_object('id', id, 'ofEvent', of_event, 'section', section_id,
           'row', row_num, 'num', seat_num, 'status', status, 'basePrice', base_price, 'expiredHolder', expired_holder,
           'sectionSeats', section_seats, 'sectionTaken', section_taken,
           'holder', (SELECT CASE WHEN r.status = 'PENDING_PAYMENT' AND r.expires_at > clock_timestamp()
                        THEN r.id::text || ':' || greatest(1, floor(extract(epoch FROM r.expires_at - clock_timestamp()) * 1000))::bigint END
                      FROM reservations r WHERE r.id = seat.reservation_id)) ORDER BY id) FROM seat) END
FROM verdict v
LEFT JOIN ev ON true
LEFT JOIN stored st ON true
LEFT JOIN promo p ON true`
)

// aloneSeat is a seat as holdAloneSQL returns it when it wrote nothing.
type aloneSeat struct {
	ID            int64   `json:"id"`
	OfEvent       bool    `json:"ofEvent"`
	Section       string  `json:"section"`
	Row           int     `json:"row"`
	Num           int     `json:"num"`
	Status        string  `json:"status"`
	BasePrice     int64   `json:"basePrice"`
	ExpiredHolder *string `json:"expiredHolder"`
	SectionSeats  *int64  `json:"sectionSeats"`
	SectionTaken  *int64  `json:"sectionTaken"`
	Holder        *string `json:"holder"`
}

// holdAlone runs the hold in one statement when a writer is free and no
// hold waits for one (ran false otherwise: nothing was sent). It returns
// the 201's body when the statement wrote the hold, or what it read when
// it did not.
func (h *holdsPlane) holdAlone(ctx context.Context, in holdInput, seats []int64, fp []byte, resID string) (body []byte, view *holdView, ran bool, err error) {
	ran = h.writers.TryAlone(func() {
		h.m.writeBatch.Observe(1)
		body, view, err = h.runAlone(ctx, in, seats, fp, resID)
	})
	return body, view, ran, err
}

// runAlone sends the timeouts and holdAloneSQL in one pipelined batch,
// one implicit transaction. Like a batch of writes, it does not end with
// the request: the statement and lock timeouts bound it.
func (h *holdsPlane) runAlone(ctx context.Context, in holdInput, seats []int64, fp []byte, resID string) ([]byte, *holdView, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*(h.cfg.StatementTimeout+h.cfg.LockTimeout))
	defer cancel()
	var promo *string
	if in.PromoCode != "" {
		promo = &in.PromoCode
	}
	var body []byte
	var view *holdView
	err := h.runStatement(ctx, func(row pgx.Row) (err error) {
		body, view, err = scanAlone(row)
		return err
	}, holdAloneSQL, in.User, opHold, in.Key, fp, http.StatusCreated, resID, in.Event, seats, promo,
		int32(rand.IntN(occupancyShards)), KindInventoryChanged)
	return body, view, err
}

// runStatement sends the hold's timeouts and one statement in one
// pipelined batch, one implicit transaction, and scans its one row.
func (h *holdsPlane) runStatement(ctx context.Context, scan func(pgx.Row) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(setHoldTimeouts, itoa(h.cfg.LockTimeout.Milliseconds()), itoa(h.cfg.StatementTimeout.Milliseconds()))
	b.Queue(sql, args...)
	start := time.Now()
	res := h.db.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return writeError(err)
	}
	if err := scan(res.QueryRow()); err != nil {
		return writeError(err)
	}
	if err := res.Close(); err != nil {
		return writeError(err)
	}
	h.m.lockWait.Observe(time.Since(start).Seconds())
	return nil
}

// aloneColumns are the first columns of both one-statement holds' row,
// in aloneRow's order (aloneRow.dest).
const aloneColumns = `(SELECT count(*) FROM answer), (SELECT count(*) FROM reservation), (SELECT count(*) FROM held),
       (SELECT count(*) FROM items), (SELECT count(*) FROM promotion), (SELECT count(*) FROM promotion_use),
       (SELECT count(*) FROM counters), (SELECT count(*) FROM events),
       v.ok, (SELECT response FROM body),
       ev.currency, ev.starts_at, ev.hold_minutes, ev.now, ev.open, ev.pending_id, ev.pending_due,
       st.fingerprint, st.status_code, st.response,
       p.discount_bps, p.max_uses, p.used, p.expired,
`

// aloneRow is what both one-statement holds (holdAloneSQL, bestAloneSQL)
// return first: the counts of what they wrote, whether they wrote, the
// body, and what they read of the event, the key and the promotion.
type aloneRow struct {
	counts            [8]int64
	ok                bool
	body              []byte
	currency          *string
	startsAt, now     *time.Time
	holdMinutes       *int
	open              *bool
	pendingID         *string
	pendingDue        *bool
	storedFP          []byte
	storedStatus      *int
	storedBody        []byte
	discount, maxUses *int64
	used              *int64
	expired           *bool
}

// dest is where a row's columns are scanned: the shared ones, then more.
func (r *aloneRow) dest(more ...any) []any {
	d := make([]any, 0, 24+len(more))
	for i := range r.counts {
		d = append(d, &r.counts[i])
	}
	d = append(d, &r.ok, &r.body, &r.currency, &r.startsAt, &r.holdMinutes, &r.now, &r.open, &r.pendingID,
		&r.pendingDue, &r.storedFP, &r.storedStatus, &r.storedBody, &r.discount, &r.maxUses, &r.used, &r.expired)
	return append(d, more...)
}

// fill puts what the statement read into v.
func (r *aloneRow) fill(v *holdView) {
	if r.currency != nil {
		v.event = &eventRow{currency: *r.currency, startsAt: *r.startsAt, holdMinutes: *r.holdMinutes, now: *r.now}
		v.open = *r.open
		if r.pendingID != nil {
			v.pendingID, v.pendingDue = *r.pendingID, *r.pendingDue
		}
	}
	if r.storedStatus != nil {
		v.stored = &storedAnswer{fingerprint: r.storedFP, result: holdResult{Status: *r.storedStatus, Body: r.storedBody}}
	}
	if r.discount != nil {
		v.promo = &promotionRow{discountBps: *r.discount, maxUses: int(*r.maxUses), used: int(*r.used), expired: *r.expired}
	}
}

// scanAlone reads holdAloneSQL's row: the body when it wrote, else the view.
func scanAlone(row pgx.Row) ([]byte, *holdView, error) {
	var r aloneRow
	var seatsJSON []byte
	if err := row.Scan(r.dest(&seatsJSON)...); err != nil {
		return nil, nil, err
	}
	v := &holdView{}
	r.fill(v)
	if r.ok {
		return r.body, v, nil
	}
	var rows []aloneSeat
	if len(seatsJSON) > 0 {
		if err := json.Unmarshal(seatsJSON, &rows); err != nil {
			return nil, nil, err
		}
	}
	for _, r := range rows {
		s := seatRow{id: r.ID, ofEvent: r.OfEvent, section: r.Section, row: r.Row, num: r.Num, status: r.Status, basePrice: r.BasePrice}
		if r.ExpiredHolder != nil {
			s.expiredHolder = *r.ExpiredHolder
		}
		if r.SectionSeats != nil {
			s.sectionSeats = *r.SectionSeats
		}
		if r.SectionTaken != nil {
			s.sectionTaken = *r.SectionTaken
		}
		if r.Holder != nil {
			s.liveHolder = *r.Holder
		}
		v.seats = append(v.seats, s)
	}
	return nil, v, nil
}
