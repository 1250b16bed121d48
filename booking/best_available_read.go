package booking

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/refusal"
)

// pickBestSeats locks the best free seats of the section
// (best_available_seats) and reads them with what pricing needs: the
// section's size and its occupancy counters. One row per seat picked, or
// one row without a seat when none was; no row when the section does not
// exist. The seats are joined through unnest, one key lookup each: a join
// on "= ANY(picked)" was planned as a scan of every seat.
const pickBestSeats = `
SELECT p.busy, c.seat_count,
       (SELECT coalesce(sum(o.taken), 0) FROM section_occupancy o WHERE o.event_id = $1 AND o.section_id = $2),
       s.id, s.row_num, s.seat_num, s.base_price
FROM sections c
CROSS JOIN LATERAL best_available_seats($1, $2, $3, $4, $5) p
LEFT JOIN LATERAL unnest(p.picked) u(id) ON true
LEFT JOIN seats s ON s.id = u.id
WHERE c.event_id = $1 AND c.id = $2
ORDER BY s.row_num, s.seat_num`

// bestView is what the first round trip of a best-available hold read.
type bestView struct {
	holdView
	sectionFound bool
	busy         bool  // fitting seats were all locked by others
	free         int64 // the section's seats neither held nor sold
}

// pick is the first round trip: BEGIN, the timeouts, the event, the
// stored answer of the key, the promotion, then the seats, locked until
// the transaction ends. PostgreSQL keeps the transaction open after the
// batch: the BEGIN makes it explicit.
func (h *holdsPlane) pick(ctx context.Context, conn *pgx.Conn, in holdInput, best bestInput) (*bestView, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(setHoldTimeouts, itoa(h.cfg.LockTimeout.Milliseconds()), itoa(h.cfg.StatementTimeout.Milliseconds()))
	queueRead(b, in, nil)
	var maxBase *int64
	if best.MaxPrice > 0 {
		maxBase = &best.MaxPrice
	}
	b.Queue(pickBestSeats, in.Event, best.Section, best.Quantity, best.Adjacent, maxBase)
	res := conn.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return nil, storeError("begin best available", err)
	}
	if _, err := res.Exec(); err != nil {
		return nil, storeError("best available timeouts", err)
	}
	read, err := scanRead(res, in)
	if err != nil {
		return nil, err
	}
	v := &bestView{holdView: *read}
	if err := v.scanPicked(res, best.Section); err != nil {
		return nil, err
	}
	if err := res.Close(); err != nil {
		return nil, storeError("best available", err)
	}
	return v, nil
}

// scanPicked reads pickBestSeats' rows into the view's seats.
func (v *bestView) scanPicked(res pgx.BatchResults, section string) error {
	rows, err := res.Query()
	if err != nil {
		return storeError("pick seats", err)
	}
	defer rows.Close()
	for rows.Next() {
		var seatCount, taken int64
		var id, basePrice *int64
		var row, num *int
		if err := rows.Scan(&v.busy, &seatCount, &taken, &id, &row, &num, &basePrice); err != nil {
			return storeError("pick seats", err)
		}
		v.sectionFound = true
		v.free = max(seatCount-taken, 0)
		if id == nil {
			continue
		}
		v.seats = append(v.seats, seatRow{id: *id, ofEvent: true, section: section, row: *row, num: *num,
			status: SeatAvailable, basePrice: *basePrice, sectionSeats: seatCount, sectionTaken: taken})
	}
	if err := rows.Err(); err != nil {
		return storeError("pick seats", err)
	}
	return nil
}

// bestRefusal is the view's answer before anything is written: a replay
// of the stored answer, a refusal, or nil to go on (the user's own due
// checkout is ended by the caller).
func (v *bestView) bestRefusal(in holdInput, best bestInput, fp []byte) (*holdResult, error) {
	if r, err, done := v.saleRefusal(fp); done {
		return r, err
	}
	switch {
	case !v.sectionFound:
		return nil, refusal.New(ErrSectionNotFound, "no section %q in this event", best.Section)
	case v.busy:
		return nil, refusal.Busy(time.Second, "every fitting seat is being held by other buyers; retry")
	case len(v.seats) != best.Quantity:
		return nil, &NoSeatsError{Section: best.Section, Free: v.free}
	}
	return nil, v.promoRefusal(in.PromoCode)
}

// withinMaxPrice refuses seats priced over the buyer's cap (the section's
// multiplier may have risen since the seats were picked by base price).
func (v *bestView) withinMaxPrice(b bestInput, items []Item) error {
	if b.MaxPrice <= 0 {
		return nil
	}
	for _, it := range items {
		if gross := it.Price + it.Discount; gross > b.MaxPrice {
			return &NoSeatsError{Section: b.Section, Free: v.free, OverMaxPrice: true}
		}
	}
	return nil
}
