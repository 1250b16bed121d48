package booking

import (
	"context"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/internal/refusal"
)

// pendingStay is a stay whose nights are locked and checked, ready to be
// written.
type pendingStay struct {
	in        stayInput
	cart      stayCart
	hotel     *hotelInfo
	roomType  roomTypeInfo
	id        string // the reservation's
	expiresAt time.Time
	nights    []lockedNight
}

// freezeNights prices every night (the calendar's price, else the room
// type's base) and the stay: rooms × the sum of the nights.
func freezeNights(p pendingStay) ([]Night, int64, error) {
	out := make([]Night, len(p.nights))
	var perRoom int64
	for i, n := range p.nights {
		price := p.roomType.basePrice
		if n.price != nil {
			price = *n.price
		}
		var err error
		if perRoom, err = addPrice(perRoom, price); err != nil {
			return nil, 0, refusal.New(ErrPriceError, "the stay's total overflows")
		}
		out[i] = Night{Date: n.night.Format(dateLayout), BasePrice: p.roomType.basePrice, Price: price}
	}
	var total int64
	for r := 0; r < p.cart.rooms; r++ {
		var err error
		if total, err = addPrice(total, perRoom); err != nil {
			return nil, 0, refusal.New(ErrPriceError, "the stay's total overflows")
		}
	}
	return out, total, nil
}

// writeStay writes the reservation, the stay, its nights with their frozen
// prices, the inventory counters, the outbox event and the stored response
// in one round trip of the hold transaction. The counters' CHECK refuses
// an overbooking even if the checks before were wrong.
func (s *staysPlane) writeStay(ctx context.Context, tx pgx.Tx, p pendingStay) (holdResult, error) {
	nights, total, err := freezeNights(p)
	if err != nil {
		return holdResult{}, err
	}
	c := p.cart
	res := Reservation{ID: p.id, Kind: KindStay, Hotel: p.hotel.id, Status: StatusPending, ExpiresAt: p.expiresAt.UTC(),
		Total: total, Currency: p.hotel.currency, Stay: &Stay{
			RoomType: c.roomType, RoomTypeName: p.roomType.name, CheckIn: c.checkIn.Format(dateLayout),
			CheckOut: c.out.Format(dateLayout), Rooms: c.rooms, Guests: c.guests, Nights: nights,
		}}
	body := mustJSON(res)
	dates := make([]time.Time, len(p.nights))
	bases, prices := make([]int64, len(nights)), make([]int64, len(nights))
	for i, n := range nights {
		dates[i], bases[i], prices[i] = p.nights[i].night, n.BasePrice, n.Price
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO reservations (id, kind, hotel_id, user_id, status, expires_at, total, currency)
	         VALUES ($1, 'stay', $2, $3, 'PENDING_PAYMENT', $4, $5, $6)`,
		p.id, p.hotel.id, p.in.User, p.expiresAt, total, p.hotel.currency)
	b.Queue(`INSERT INTO stays (reservation_id, hotel_id, room_type_id, check_in, check_out, rooms, guests)
	         VALUES ($1, $2, $3, $4, $5, $6, $7)`, p.id, p.hotel.id, c.roomType, c.checkIn, c.out, c.rooms, c.guests)
	b.Queue(`INSERT INTO stay_nights (reservation_id, night, hotel_id, room_type_id, rooms, base_price, price_at_lock)
	         SELECT $1, u.night, $2, $3, $4, u.base, u.price FROM unnest($5::date[], $6::bigint[], $7::bigint[]) AS u(night, base, price)`,
		p.id, p.hotel.id, c.roomType, c.rooms, dates, bases, prices)
	b.Queue(`UPDATE room_nights SET held = held + $3 WHERE hotel_id = $1 AND room_type_id = $2 AND night >= $4 AND night < $5`,
		p.hotel.id, c.roomType, c.rooms, c.checkIn, c.out)
	b.Queue(`INSERT INTO idempotency_keys (user_id, operation, key, fingerprint, status_code, response)
	         VALUES ($1, $2, $3, $4, $5, $6)`, p.in.User, opHold, p.in.Key, c.fingerprint, http.StatusCreated, body)
	if err := outbox.Queue(b, KindStayInventoryChanged, p.hotel.id, StayInventoryChanged{Hotel: p.hotel.id, City: p.hotel.city,
		RoomType: c.roomType, From: c.checkIn.Format(dateLayout), To: c.out.Format(dateLayout)}); err != nil {
		return holdResult{}, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return holdResult{}, storeError("write stay hold", err)
	}
	return holdResult{Status: http.StatusCreated, Body: body}, nil
}
