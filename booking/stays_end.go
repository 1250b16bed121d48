package booking

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/outbox"
)

// settleStay moves a locked pending stay to status: every night together,
// since nights have no state of their own. Its nights are locked in date
// order first (no-ops when the caller already holds them), then held goes
// down by the stay's rooms and, for a sale, sold goes up by as many. It
// returns the stay's hotel, city and whether the hotel has a waiting room.
func settleStay(ctx context.Context, tx pgx.Tx, id, status string, sell bool) (stayChange, error) {
	soldDelta := 0
	if sell {
		soldDelta = 1
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE reservations SET status = $2, updated_at = clock_timestamp() WHERE id = $1`, id, status)
	b.Queue(`
SELECT 1 FROM room_nights
WHERE (hotel_id, room_type_id, night) IN (SELECT hotel_id, room_type_id, night FROM stay_nights WHERE reservation_id = $1)
ORDER BY hotel_id, room_type_id, night FOR NO KEY UPDATE`, id)
	b.Queue(`
UPDATE room_nights rn SET held = rn.held - n.rooms, sold = rn.sold + $2 * n.rooms
FROM stay_nights n
WHERE n.reservation_id = $1 AND rn.hotel_id = n.hotel_id AND rn.room_type_id = n.room_type_id AND rn.night = n.night`,
		id, soldDelta)
	b.Queue(`
SELECT s.hotel_id, h.city, h.waiting_room, s.room_type_id, s.check_in, s.check_out
FROM stays s JOIN hotels h ON h.id = s.hotel_id WHERE s.reservation_id = $1`, id)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	var ch stayChange
	for i := 0; i < 3; i++ {
		if _, err := res.Exec(); err != nil {
			return ch, fmt.Errorf("settle stay: %w", err)
		}
	}
	var in, out time.Time
	if err := res.QueryRow().Scan(&ch.hotel, &ch.city, &ch.waitingRoom, &ch.roomType, &in, &out); err != nil {
		return ch, fmt.Errorf("settle stay: %w", err)
	}
	if err := res.Close(); err != nil {
		return ch, fmt.Errorf("settle stay: %w", err)
	}
	ch.from, ch.to = in.Format(dateLayout), out.Format(dateLayout)
	if err := queueStayChange(ctx, tx, StayInventoryChanged{Hotel: ch.hotel, City: ch.city, RoomType: ch.roomType, From: ch.from, To: ch.to}); err != nil {
		return ch, err
	}
	return ch, nil
}

// stayChange is the stay a settlement touched.
type stayChange struct {
	hotel, city, roomType string
	from, to              string
	waitingRoom           bool
}

// queueStayChange records the inventory event of changed nights.
func queueStayChange(ctx context.Context, tx pgx.Tx, p StayInventoryChanged) error {
	if err := outbox.Add(ctx, tx, KindStayInventoryChanged, p.Hotel, p); err != nil {
		return fmt.Errorf("record stay change: %w", err)
	}
	return nil
}

// endStay is endReservation for a stay whose row r's caller locked: every
// night goes back. What is left to clean up is the buyer's admission lease,
// and only for a hotel behind a waiting room.
func endStay(ctx context.Context, tx pgx.Tx, r *released, status string) (*released, error) {
	ch, err := settleStay(ctx, tx, r.id, status, false)
	if err != nil {
		return nil, fmt.Errorf("end reservation: %w", err)
	}
	r.event = ch.hotel // the waiting room named like the hotel
	if !ch.waitingRoom {
		r.user = "" // no lease to end
	}
	return r, nil
}

// markStayPaid sells a locked pending stay: its nights move from held to
// sold.
func markStayPaid(ctx context.Context, tx pgx.Tx, c Checkout) error {
	if _, err := settleStay(ctx, tx, c.ID, StatusPaid, true); err != nil {
		return fmt.Errorf("mark paid: %w", err)
	}
	return nil
}

const selectStay = `
SELECT r.id, r.user_id, r.hotel_id, r.status, r.expires_at, r.total, r.currency,
       s.room_type_id, rt.name, s.check_in, s.check_out, s.rooms, s.guests, n.night, n.base_price, n.price_at_lock
FROM reservations r
JOIN stays s ON s.reservation_id = r.id
JOIN room_types rt ON rt.hotel_id = s.hotel_id AND rt.id = s.room_type_id
JOIN stay_nights n ON n.reservation_id = r.id
WHERE r.id = $1
ORDER BY n.night`

// loadStay reads a stay reservation of user (ErrNoReservation otherwise).
func loadStay(ctx context.Context, q querier, id, user string) (*Reservation, error) {
	rows, err := q.Query(ctx, selectStay, id)
	if err != nil {
		return nil, fmt.Errorf("read stay: %w", err)
	}
	defer rows.Close()
	var res *Reservation
	for rows.Next() {
		var r Reservation
		var st Stay
		var owner string
		var in, out, night time.Time
		var n Night
		if err := rows.Scan(&r.ID, &owner, &r.Hotel, &r.Status, &r.ExpiresAt, &r.Total, &r.Currency,
			&st.RoomType, &st.RoomTypeName, &in, &out, &st.Rooms, &st.Guests, &night, &n.BasePrice, &n.Price); err != nil {
			return nil, fmt.Errorf("read stay: %w", err)
		}
		if owner != user {
			return nil, ErrNoReservation
		}
		if res == nil {
			st.CheckIn, st.CheckOut = in.Format(dateLayout), out.Format(dateLayout)
			r.Kind, r.Stay = KindStay, &st
			res = &r
		}
		n.Date = night.Format(dateLayout)
		res.Stay.Nights = append(res.Stay.Nights, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read stay: %w", err)
	}
	if res == nil {
		return nil, ErrNoReservation
	}
	return res, nil
}

// stayLines are a paid stay's lines: one per room.
func stayLines(ctx context.Context, tx pgx.Tx, id string) ([]Line, error) {
	var hotel, roomType string
	var rooms int
	var in, out time.Time
	if err := tx.QueryRow(ctx, `
SELECT h.name, rt.name, s.rooms, s.check_in, s.check_out
FROM stays s JOIN hotels h ON h.id = s.hotel_id JOIN room_types rt ON rt.hotel_id = s.hotel_id AND rt.id = s.room_type_id
WHERE s.reservation_id = $1`, id).Scan(&hotel, &roomType, &rooms, &in, &out); err != nil {
		return nil, fmt.Errorf("read checkout lines: %w", err)
	}
	lines := make([]Line, rooms)
	for i := range lines {
		lines[i] = Line{
			ID: "stay:" + id + ":room-" + strconv.Itoa(i+1),
			Label: fmt.Sprintf("%s, %s, %s to %s (%d nights), room %d of %d",
				hotel, roomType, in.Format(dateLayout), out.Format(dateLayout), nightsBetween(in, out), i+1, rooms),
		}
	}
	return lines, nil
}
