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
		return Checkout{}, errNoReservation
	}
	if err != nil {
		return Checkout{}, fmt.Errorf("lock reservation: %w", err)
	}
	return c, nil
}

// markPaid sells a locked pending reservation. The seats stay counted as
// taken (held and sold both are), so the occupancy does not move; the seat
// maps change colour, so each section gets an inventory event.
func markPaid(ctx context.Context, tx pgx.Tx, id string) error {
	c, err := lockCheckout(ctx, tx, id)
	if err != nil {
		return err
	}
	if c.Status != StatusPending || c.Due {
		return fmt.Errorf("%w (%s)", errNotPending, c.Status)
	}
	if c.Kind == KindStay {
		return markStayPaid(ctx, tx, c)
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE reservations SET status = 'PAID', updated_at = clock_timestamp() WHERE id = $1`, id)
	b.Queue(`UPDATE reservation_items SET status = 'SOLD' WHERE reservation_id = $1 AND status = 'HELD'`, id)
	b.Queue(`UPDATE seats SET status = 'SOLD', version = version + 1
	         WHERE reservation_id = $1 AND status = 'HELD' RETURNING section_id`, id)
	res := tx.SendBatch(ctx, b)
	for i := 0; i < 2; i++ {
		if _, err := res.Exec(); err != nil {
			res.Close()
			return fmt.Errorf("mark paid: %w", err)
		}
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
