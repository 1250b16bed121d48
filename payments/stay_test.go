package payments_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/booking"
)

// A hotel stay pays through the same path as seats: the hold, the payment,
// the sandbox's confirm and webhook, then one voucher per room and the
// nights sold.
func TestStayPaysLikeSeats(t *testing.T) {
	t.Parallel()
	s := startSale(t, 1, nil)
	hotel := fmt.Sprintf("pay-%d", time.Now().UnixNano())
	s.admin(http.MethodPost, "/v1/admin/hotels", map[string]any{
		"id": hotel, "name": "Casa Paga", "city": "porto", "timezone": "Europe/Lisbon", "currency": "EUR", "openNights": 10,
		"roomTypes": []map[string]any{{"id": "dbl", "name": "Double", "capacity": 2, "rooms": 3, "basePrice": 10000}},
	}, http.StatusCreated)
	b := buyer{user: "guest-" + hotel, token: s.token("guest-" + hotel)}
	in := time.Now().UTC().AddDate(0, 0, 2).Format(time.DateOnly)
	out := time.Now().UTC().AddDate(0, 0, 4).Format(time.DateOnly)
	status, body := s.do(http.MethodPost, "/v1/hotels/"+hotel+"/holds", map[string]string{
		"Authorization": "Bearer " + b.token, booking.HeaderIdempotencyKey: "stay-" + hotel,
	}, map[string]any{"roomType": "dbl", "checkIn": in, "checkOut": out, "rooms": 2})
	require.Equal(t, http.StatusCreated, status, body)
	var r booking.Reservation
	require.NoError(t, json.Unmarshal([]byte(body), &r))

	status, v, body := s.pay(b, r.ID, "pay-"+r.ID)
	require.Equal(t, http.StatusCreated, status, body)
	require.Equal(t, int64(40000), v.Amount, "two rooms, two nights")
	s.confirm(v)
	s.waitFulfilled(r.ID, 2)
	require.Equal(t, "PAID", s.reservationStatus(r.ID))
	require.Equal(t, int64(1), s.charges(r.ID))
	require.Equal(t, int64(4), s.scalar(`SELECT coalesce(sum(sold), 0) FROM room_nights WHERE hotel_id = $1`, hotel),
		"two rooms sold on each of two nights")
	require.Zero(t, s.scalar(`SELECT coalesce(sum(held), 0) FROM room_nights WHERE hotel_id = $1`, hotel))
	require.Equal(t, "hotel:"+hotel, s.text(`SELECT event_id FROM tickets WHERE reservation_id = $1 LIMIT 1`, r.ID))
}
