package booking

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

const lockCheckoutSQL = `
SELECT id, kind, coalesce(event_id, ''), coalesce(hotel_id, ''), user_id, status, total, currency, expires_at,
       expires_at <= clock_timestamp()
FROM reservations WHERE id = $1 FOR UPDATE`

func lockCheckout(ctx context.Context, tx pgx.Tx, id string) (Checkout, error) {
	var c Checkout
	err := tx.QueryRow(ctx, lockCheckoutSQL, id).Scan(&c.ID, &c.Kind, &c.Event, &c.Hotel, &c.User, &c.Status, &c.Total, &c.Currency, &c.ExpiresAt, &c.Due)
	if errors.Is(err, pgx.ErrNoRows) {
		return Checkout{}, ErrNoReservation
	}
	if err != nil {
		return Checkout{}, fmt.Errorf("lock reservation: %w", err)
	}
	return c, nil
}

// sellSeats moves a reservation's items and their seats to SOLD. The seats
// are found through the items' (reservation_id, seat_id) key, never by an
// index on seats.reservation_id, so that seat updates stay HOT. Every item
// of a pending reservation is HELD (items change state only as their
// reservation ends, under its row lock), so the items' status is not
// tested: a test of it would let a planner with stale statistics read the
// partial index of live items, which grows with the sale, instead of the
// key.
const sellSeats = `
WITH items AS (
	UPDATE reservation_items SET status = 'SOLD' WHERE reservation_id = $1 RETURNING seat_id)
UPDATE seats s SET status = 'SOLD', version = s.version + 1
FROM items WHERE s.id = items.seat_id AND s.reservation_id = $1 AND s.status = 'HELD'
RETURNING s.section_id`

// markPaid sells a locked pending reservation. The seats stay counted as
// taken (held and sold both are), so the occupancy does not move; the seat
// maps change colour, so each section gets an inventory event.
func markPaid(ctx context.Context, tx pgx.Tx, id string) error {
	c, err := lockCheckout(ctx, tx, id)
	if err != nil {
		return err
	}
	if c.Status != StatusPending || c.Due {
		return fmt.Errorf("%w (%s)", ErrNotPending, c.Status)
	}
	if c.Kind == KindStay {
		return markStayPaid(ctx, tx, c)
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE reservations SET status = 'PAID', updated_at = clock_timestamp() WHERE id = $1`, id)
	b.Queue(sellSeats, id)
	res := tx.SendBatch(ctx, b)
	if _, err := res.Exec(); err != nil {
		res.Close()
		return fmt.Errorf("mark paid: %w", err)
	}
	rows, err := res.Query()
	if err != nil {
		res.Close()
		return fmt.Errorf("sell seats: %w", err)
	}
	perSection := map[string]int{}
	for rows.Next() {
		var section string
		if err := rows.Scan(&section); err != nil {
			rows.Close()
			res.Close()
			return fmt.Errorf("sell seats: %w", err)
		}
		perSection[section]++
	}
	rows.Close()
	if err := errors.Join(rows.Err(), res.Close()); err != nil {
		return fmt.Errorf("sell seats: %w", err)
	}
	changes := &pgx.Batch{}
	if err := queueInventoryEvents(changes, c.Event, perSection); err != nil {
		return err
	}
	if err := tx.SendBatch(ctx, changes).Close(); err != nil {
		return fmt.Errorf("mark paid: record section changes: %w", err)
	}
	return nil
}

const checkoutLinesSQL = `
SELECT r.status, r.kind, i.id, i.section_id, s.row_num, s.seat_num
FROM reservations r
LEFT JOIN reservation_items i ON i.reservation_id = r.id AND i.status IN ('SOLD', 'CHECKED_IN')
LEFT JOIN seats s ON s.id = i.seat_id
WHERE r.id = $1
ORDER BY i.id`

// checkoutLines names what a paid reservation sold. A seat's line id is its
// item id, since an item belongs to exactly one reservation; a stay's lines
// are its rooms, named under the reservation's id.
func checkoutLines(ctx context.Context, tx pgx.Tx, id string) ([]Line, error) {
	rows, err := tx.Query(ctx, checkoutLinesSQL, id)
	if err != nil {
		return nil, fmt.Errorf("read checkout lines: %w", err)
	}
	defer rows.Close()
	var out []Line
	found, stay := false, false
	for rows.Next() {
		var status, kind string
		var item *int64
		var section *string
		var row, seat *int
		if err := rows.Scan(&status, &kind, &item, &section, &row, &seat); err != nil {
			return nil, fmt.Errorf("read checkout lines: %w", err)
		}
		found, stay = true, kind == KindStay
		if status != StatusPaid {
			return nil, fmt.Errorf("%w (%s)", ErrNotPending, status)
		}
		if item == nil {
			continue
		}
		out = append(out, Line{
			ID:    "seat-item:" + itoa(*item),
			Label: fmt.Sprintf("Section %s, row %d, seat %d", *section, *row, *seat),
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read checkout lines: %w", err)
	}
	if !found {
		return nil, ErrNoReservation
	}
	rows.Close()
	if stay {
		return stayLines(ctx, tx, id)
	}
	return out, nil
}

const doubleOwnedSQL = `
SELECT count(*) FROM (
	SELECT seat_id FROM reservation_items WHERE status IN ('HELD', 'SOLD', 'CHECKED_IN')
	GROUP BY seat_id HAVING count(*) > 1) d`

func doubleOwnedSeats(ctx context.Context, tx pgx.Tx) (int, error) {
	var n int
	if err := tx.QueryRow(ctx, doubleOwnedSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("count double-owned seats: %w", err)
	}
	return n, nil
}
