package booking

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// stayBundle is a bundle with the stays plane on it.
type stayBundle struct {
	*bundle
	stays *staysPlane
	sm    *stayMetrics
}

func setupStays(t testing.TB, b *bundle) *stayBundle {
	t.Helper()
	sm, err := newStayMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	return &stayBundle{bundle: b, stays: newStays(b.holds, sm), sm: sm}
}

// hotel creates a fresh hotel in a city of its own and returns its id and
// city. roomTypes is "std:3x2@10000,..." (rooms × guests @ price).
func (b *stayBundle) hotel(t testing.TB, roomTypes string, mutate ...func(*HotelSpec)) (string, string) {
	t.Helper()
	rts, err := ParseRoomTypes(roomTypes)
	require.NoError(t, err)
	n := eventSeq.Add(1)
	spec := HotelSpec{
		ID: fmt.Sprintf("h%d-%d", time.Now().UnixNano()%1e9, n), Name: "Hotel", City: fmt.Sprintf("city-%d-%d", time.Now().UnixNano()%1e9, n),
		Timezone: "Europe/Lisbon", Currency: "EUR", OpenNights: 60, RoomTypes: rts,
	}
	for _, f := range mutate {
		f(&spec)
	}
	_, err = createHotel(context.Background(), b.db, spec)
	require.NoError(t, err)
	return spec.ID, spec.City
}

// night is the date d days from the hotel's today (Lisbon).
func night(d int) string {
	loc, _ := time.LoadLocation("Europe/Lisbon")
	return localToday(time.Now(), loc).AddDate(0, 0, d).Format(dateLayout)
}

// holdStay holds a stay for user (the test's name for them) with key.
func (b *stayBundle) holdStay(t testing.TB, hotel, user, key string, req StayHoldRequest) (int, *Reservation, error) {
	t.Helper()
	user = b.uid(user)
	res, err := b.stays.HoldStay(context.Background(), stayInput{User: user, Hotel: hotel, Key: key, Req: req,
		Pass: b.desk.admit(hotel, user)})
	if err != nil {
		if e := answerOf(err); e != nil {
			return e.Status, nil, err
		}
		return http.StatusInternalServerError, nil, err
	}
	var r Reservation
	require.NoError(t, json.Unmarshal(res.Body, &r))
	return res.Status, &r, nil
}

// counters reads held and sold of a room type's night.
func (b *stayBundle) counters(t testing.TB, hotel, roomType, date string) (total, held, sold int) {
	t.Helper()
	require.NoError(t, b.db.QueryRow(context.Background(), `
SELECT total, held, sold FROM room_nights WHERE hotel_id = $1 AND room_type_id = $2 AND night = $3`,
		hotel, roomType, date).Scan(&total, &held, &sold))
	return
}

// requireInventoryAgrees is the stays' invariant: on every night of the
// hotel, held is the rooms of its pending stays and sold those of its paid
// ones, and never more than total; every stay has exactly its nights.
func (b *stayBundle) requireInventoryAgrees(t testing.TB, hotel string) {
	t.Helper()
	var drift, over, gaps int
	require.NoError(t, b.db.QueryRow(context.Background(), `
SELECT
  (SELECT count(*) FROM room_nights rn
   LEFT JOIN LATERAL (
     SELECT coalesce(sum(n.rooms) FILTER (WHERE r.status = 'PENDING_PAYMENT'), 0) AS held,
            coalesce(sum(n.rooms) FILTER (WHERE r.status = 'PAID'), 0) AS sold
     FROM stay_nights n JOIN reservations r ON r.id = n.reservation_id
     WHERE n.hotel_id = rn.hotel_id AND n.room_type_id = rn.room_type_id AND n.night = rn.night) x ON true
   WHERE rn.hotel_id = $1 AND (rn.held <> x.held OR rn.sold <> x.sold)),
  (SELECT count(*) FROM room_nights WHERE hotel_id = $1 AND held + sold > total),
  (SELECT count(*) FROM stays s WHERE s.hotel_id = $1
     AND (SELECT count(*) FROM stay_nights n WHERE n.reservation_id = s.reservation_id
          AND n.night >= s.check_in AND n.night < s.check_out) <> s.check_out - s.check_in)`, hotel).
		Scan(&drift, &over, &gaps))
	require.Zero(t, drift, "nights whose counters disagree with their stays")
	require.Zero(t, over, "nights overbooked")
	require.Zero(t, gaps, "stays missing a night")
}
