package booking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/outbox"
)

// released is what a reservation that just ended leaves to clean up after
// the commit: its seat hints and its buyer's admission lease.
type released struct {
	id    string
	event string
	user  string
	seats []int64
}

const lockReservation = `
SELECT coalesce(event_id, hotel_id), user_id, status, expires_at <= clock_timestamp(), coalesce(promo_code, ''), kind
FROM reservations WHERE id = $1 FOR UPDATE`

// releaseSeats gives a pending reservation's seats back: items RELEASED,
// seats AVAILABLE, found through the items' key (see sellSeats).
const releaseSeats = `
WITH items AS (
	UPDATE reservation_items SET status = 'RELEASED' WHERE reservation_id = $1 RETURNING seat_id)
UPDATE seats s SET status = 'AVAILABLE', reservation_id = NULL, version = s.version + 1
FROM items WHERE s.id = items.seat_id AND s.reservation_id = $1 AND s.status = 'HELD'
RETURNING s.id, s.section_id`

// endReservation moves a pending reservation to status (EXPIRED or
// CANCELLED): seats back to AVAILABLE, items RELEASED, the promotion use
// returned, one inventory event per section. Like every terminal transition
// it locks the reservation row first, so an expiry, a cancel and a payment
// can never both win. onlyIfExpired refuses reservations not yet due.
func endReservation(ctx context.Context, tx pgx.Tx, id, status string, onlyIfExpired bool, user string) (*released, error) {
	var r released
	var current, promo, kind string
	var due bool
	err := tx.QueryRow(ctx, lockReservation, id).Scan(&r.event, &r.user, &current, &due, &promo, &kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNoReservation
	}
	if err != nil {
		return nil, fmt.Errorf("lock reservation: %w", err)
	}
	if user != "" && r.user != user {
		return nil, ErrNoReservation // not yours: indistinguishable from absent
	}
	if current != StatusPending || (onlyIfExpired && !due) {
		return nil, fmt.Errorf("%w (%s)", ErrNotPending, current)
	}
	r.id = id
	if kind == KindStay {
		return endStay(ctx, tx, &r, status)
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE reservations SET status = $2, updated_at = clock_timestamp() WHERE id = $1`, id, status)
	b.Queue(releaseSeats, id)
	if promo != "" {
		b.Queue(`WITH gone AS (DELETE FROM promotion_uses WHERE reservation_id = $1 RETURNING event_id, code)
		         UPDATE promotions p SET used = p.used - 1 FROM gone WHERE p.event_id = gone.event_id AND p.code = gone.code`, id)
	}
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return nil, fmt.Errorf("end reservation: %w", err)
	}
	rows, err := res.Query()
	if err != nil {
		return nil, fmt.Errorf("release seats: %w", err)
	}
	perSection := map[string]int{}
	for rows.Next() {
		var seat int64
		var section string
		if err := rows.Scan(&seat, &section); err != nil {
			rows.Close()
			return nil, fmt.Errorf("release seats: %w", err)
		}
		r.seats = append(r.seats, seat)
		perSection[section]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("release seats: %w", err)
	}
	slices.Sort(r.seats)
	if promo != "" {
		if _, err := res.Exec(); err != nil {
			return nil, fmt.Errorf("return promotion use: %w", err)
		}
	}
	if err := res.Close(); err != nil {
		return nil, fmt.Errorf("end reservation: %w", err)
	}
	changes := &pgx.Batch{}
	if err := queueSectionChanges(changes, r.event, perSection, -1); err != nil {
		return nil, err
	}
	// The hints are released right after the commit; this event releases
	// them again, durably, should this process die first or Redis fail:
	// a hint must not block seats for the hold's time after it ended.
	if len(r.seats) > 0 {
		if err := outbox.Queue(changes, KindHintsReleased, id, HintsReleased{Event: r.event, Reservation: id, Seats: r.seats}); err != nil {
			return nil, err
		}
	}
	if err := tx.SendBatch(ctx, changes).Close(); err != nil {
		return nil, fmt.Errorf("end reservation: record section changes: %w", err)
	}
	return &r, nil
}

// querier is a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const selectReservation = `
SELECT r.id, r.event_id, r.user_id, r.status, r.expires_at, r.total, r.currency, coalesce(r.promo_code, ''),
       i.seat_id, i.section_id, s.row_num, s.seat_num, i.base_price, i.surge_bps, i.discount, i.price_at_lock, i.status
FROM reservations r
JOIN reservation_items i ON i.reservation_id = r.id
JOIN seats s ON s.id = i.seat_id
WHERE r.id = $1
ORDER BY i.seat_id`

// loadReservation reads a reservation of user (ErrNoReservation otherwise).
func loadReservation(ctx context.Context, q querier, id, user string) (*Reservation, error) {
	rows, err := q.Query(ctx, selectReservation, id)
	if err != nil {
		return nil, fmt.Errorf("read reservation: %w", err)
	}
	defer rows.Close()
	var res *Reservation
	for rows.Next() {
		var r Reservation
		var owner string
		var it Item
		if err := rows.Scan(&r.ID, &r.Event, &owner, &r.Status, &r.ExpiresAt, &r.Total, &r.Currency, &r.PromoCode,
			&it.Seat, &it.Section, &it.Row, &it.Number, &it.BasePrice, &it.SurgeBps, &it.Discount, &it.Price, &it.Status); err != nil {
			return nil, fmt.Errorf("read reservation: %w", err)
		}
		if owner != user {
			return nil, ErrNoReservation
		}
		if res == nil {
			r.Kind = KindSeats
			res = &r
		}
		res.Items = append(res.Items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read reservation: %w", err)
	}
	if res == nil {
		// No seats: a stay, or nothing.
		return loadStay(ctx, q, id, user)
	}
	return res, nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are encoded here
	}
	return b
}
