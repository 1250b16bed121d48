package booking

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// A stay holds every night at prices frozen per night (the calendar where
// it sets one, the base elsewhere); an identical retry gets the same bytes,
// a different body under the same key is refused.
func TestStayHoldFreezesNightlyPrices(t *testing.T) {
	t.Parallel()
	b := setupStays(t, setup(t))
	hotel, _ := b.hotel(t, "std:5x2@10000,ste:2x4@30000", func(s *HotelSpec) {
		s.Rates = []RateSpec{{RoomType: "std", From: night(11), To: night(12), Price: 15000}}
	})
	req := StayHoldRequest{RoomType: "std", CheckIn: night(10), CheckOut: night(13), Rooms: 2, Guests: 3}
	status, r, err := b.holdStay(t, hotel, "ana", "k1", req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, KindStay, r.Kind)
	require.Equal(t, hotel, r.Hotel)
	require.Equal(t, StatusPending, r.Status)
	require.Equal(t, int64(2*(10000+15000+10000)), r.Total, "rooms × the nights' prices")
	require.Len(t, r.Stay.Nights, 3)
	require.Equal(t, Night{Date: night(11), BasePrice: 10000, Price: 15000}, r.Stay.Nights[1])
	require.WithinDuration(t, time.Now().Add(10*time.Minute), r.ExpiresAt, time.Minute)
	for d := 10; d < 13; d++ {
		_, held, sold := b.counters(t, hotel, "std", night(d))
		require.Equal(t, 2, held, "night %d", d)
		require.Zero(t, sold)
	}
	_, held, _ := b.counters(t, hotel, "std", night(13))
	require.Zero(t, held, "check-out night is not held")

	got, err := loadReservation(context.Background(), b.db, r.ID, b.uid("ana"))
	require.NoError(t, err)
	require.Equal(t, r.Stay, got.Stay)
	require.Equal(t, r.Total, got.Total)
	_, err = loadReservation(context.Background(), b.db, r.ID, b.uid("mallory"))
	require.ErrorIs(t, err, ErrNoReservation, "owner only")

	replay, err := b.stays.HoldStay(context.Background(), stayInput{User: b.uid("ana"), Hotel: hotel, Key: "k1", Req: req})
	require.NoError(t, err)
	require.True(t, replay.Replayed)
	again, err := b.stays.HoldStay(context.Background(), stayInput{User: b.uid("ana"), Hotel: hotel, Key: "k1", Req: req})
	require.NoError(t, err)
	require.Equal(t, replay.Body, again.Body, "byte for byte")
	req.Guests = 2
	status, _, err = b.holdStay(t, hotel, "ana", "k1", req)
	require.Equal(t, http.StatusUnprocessableEntity, status, "%v", err)
	require.Equal(t, "idempotency_key_reused", answerOf(err).Code)

	var events int
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND kind = $2`, hotel, KindStayInventoryChanged).Scan(&events))
	require.Equal(t, 2, events, "one inventory event for the calendar rate, one for the hold, none for the replays")
	b.requireInventoryAgrees(t, hotel)
}

// Refusals are clear and change nothing.
func TestStayRefusals(t *testing.T) {
	t.Parallel()
	b := setupStays(t, setup(t))
	hotel, _ := b.hotel(t, "std:2x2@10000")
	ok := StayHoldRequest{RoomType: "std", CheckIn: night(5), CheckOut: night(7), Rooms: 1}
	try := func(hotel, key string, mutate func(*StayHoldRequest)) (int, string) {
		req := ok
		if mutate != nil {
			mutate(&req)
		}
		status, _, err := b.holdStay(t, hotel, "bob", key, req)
		if err == nil {
			return status, ""
		}
		return status, answerOf(err).Code
	}
	cases := []struct {
		name   string
		hotel  string
		key    string
		mutate func(*StayHoldRequest)
		status int
		code   string
	}{
		{"unknown hotel", "no-such-hotel", "k", nil, 404, "hotel_not_found"},
		{"malformed hotel id", "bad/id", "k", nil, 404, "hotel_not_found"},
		{"no key", hotel, "", nil, 400, "idempotency_key_required"},
		{"a key that is not UTF-8", hotel, "\xff\xfe", nil, 400, "bad_idempotency_key"},
		{"a key with NUL", hotel, "k\x00", nil, 400, "bad_idempotency_key"},
		{"a key with a tab", hotel, "tab\tkey", nil, 400, "bad_idempotency_key"},
		{"unknown room type", hotel, "k", func(r *StayHoldRequest) { r.RoomType = "penthouse" }, 400, "unknown_room_type"},
		{"bad room type id", hotel, "k", func(r *StayHoldRequest) { r.RoomType = "a b" }, 400, "bad_request"},
		{"not a date", hotel, "k", func(r *StayHoldRequest) { r.CheckIn = "2030-2-1" }, 400, "bad_request"},
		{"a timestamp", hotel, "k", func(r *StayHoldRequest) { r.CheckIn = night(5) + "T00:00:00Z" }, 400, "bad_request"},
		{"not a day", hotel, "k", func(r *StayHoldRequest) { r.CheckIn = "2030-02-30" }, 400, "bad_request"},
		{"check-out first", hotel, "k", func(r *StayHoldRequest) { r.CheckIn, r.CheckOut = night(7), night(5) }, 400, "bad_request"},
		{"zero nights", hotel, "k", func(r *StayHoldRequest) { r.CheckOut = r.CheckIn }, 400, "bad_request"},
		{"31 nights", hotel, "k", func(r *StayHoldRequest) { r.CheckOut = night(36) }, 400, "bad_request"},
		{"no rooms", hotel, "k", func(r *StayHoldRequest) { r.Rooms = 0 }, 400, "bad_request"},
		{"too many rooms", hotel, "k", func(r *StayHoldRequest) { r.Rooms = 9 }, 400, "bad_request"},
		{"negative guests", hotel, "k", func(r *StayHoldRequest) { r.Guests = -1 }, 400, "bad_request"},
		{"too many guests", hotel, "k", func(r *StayHoldRequest) { r.Guests = 3 }, 422, "too_many_guests"},
		{"in the past", hotel, "k", func(r *StayHoldRequest) { r.CheckIn = night(-2) }, 422, "dates_unavailable"},
		{"beyond the opened nights", hotel, "k", func(r *StayHoldRequest) { r.CheckIn, r.CheckOut = night(59), night(62) }, 422, "dates_unavailable"},
		{"more rooms than exist", hotel, "k", func(r *StayHoldRequest) { r.Rooms = 3 }, 409, "rooms_unavailable"},
	}
	for _, c := range cases {
		status, code := try(c.hotel, c.key, c.mutate)
		require.Equal(t, c.status, status, c.name)
		require.Equal(t, c.code, code, c.name)
	}
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT count(*) FROM reservations WHERE hotel_id = $1`, hotel).Scan(&n))
	require.Zero(t, n, "refusals change nothing")

	status, first, err := b.holdStay(t, hotel, "bob", "k1", ok)
	require.NoError(t, err)
	require.Equal(t, 201, status)
	status, code := try(hotel, "k2", func(r *StayHoldRequest) { r.CheckIn, r.CheckOut = night(20), night(21) })
	require.Equal(t, 409, status)
	require.Equal(t, "pending_checkout", code, "one pending checkout per user and hotel")
	b.expireNow(t, first.ID)
	status, _ = try(hotel, "k3", nil)
	require.Equal(t, 201, status, "an expired checkout of the user is ended inline")
	require.Equal(t, StatusExpired, b.status(t, first.ID))
	b.requireInventoryAgrees(t, hotel)
}

// A flash deal puts the waiting room in front of a hotel: the same pass and
// lease check as an event's sale.
func TestStayBehindAWaitingRoom(t *testing.T) {
	t.Parallel()
	b := setupStays(t, setup(t))
	hotel, _ := b.hotel(t, "std:2x2@10000", func(s *HotelSpec) { s.WaitingRoom = true })
	req := StayHoldRequest{RoomType: "std", CheckIn: night(3), CheckOut: night(4), Rooms: 1}
	_, err := b.stays.HoldStay(context.Background(), stayInput{User: b.uid("cy"), Hotel: hotel, Key: "k", Req: req})
	require.Equal(t, 403, answerOf(err).Status, "no pass")
	status, r, err := b.holdStay(t, hotel, "cy", "k", req)
	require.NoError(t, err)
	require.Equal(t, 201, status)
	require.True(t, b.desk.live(hotel, b.uid("cy")), "the lease is extended to the hold")
	_, err = b.stays.Cancel(context.Background(), r.ID, b.uid("cy"))
	require.NoError(t, err)
	require.False(t, b.desk.live(hotel, b.uid("cy")), "cancel ends the lease")

	open, _ := b.hotel(t, "std:2x2@10000")
	_, err = b.stays.HoldStay(context.Background(), stayInput{User: b.uid("cy"), Hotel: open, Key: "k-open", Req: req})
	require.NoError(t, err, "a hotel without a waiting room needs no pass")
}

// 50 buyers race for the last rooms on overlapping stays: different
// check-ins and check-outs that all share one night. Exactly as many win
// as rooms exist on that night, nobody deadlocks, and the counters agree
// with the stays.
func TestLastRoomsRaceOnOverlappingStays(t *testing.T) {
	t.Parallel()
	b := setupStays(t, setup(t))
	const rooms = 3
	hotel, _ := b.hotel(t, fmt.Sprintf("std:%dx2@10000", rooms))
	const buyers = 50
	statuses := race(t, buyers, func(i int) int {
		// Every stay covers night 10: check-in 7..10, check-out 11..13.
		req := StayHoldRequest{RoomType: "std", CheckIn: night(7 + i%4), CheckOut: night(11 + (i/4)%3), Rooms: 1}
		status, _, _ := b.holdStay(t, hotel, fmt.Sprintf("racer%d", i), "k", req)
		return status
	})
	require.Equal(t, rooms, statuses[201], "%v", statuses)
	require.Equal(t, buyers-rooms, statuses[409], "%v", statuses)
	total, held, sold := b.counters(t, hotel, "std", night(10))
	require.Equal(t, rooms, total)
	require.Equal(t, rooms, held+sold, "the shared night is full")
	b.requireInventoryAgrees(t, hotel)
}

// Stays that overlap in every way, some ending while others are held, lock
// nights in one order: no deadlock (a 503) whatever the interleaving.
func TestOverlappingStaysAndExpiryNeverDeadlock(t *testing.T) {
	t.Parallel()
	// Waits for locks may be long on a loaded machine (sixteen holds queue
	// on the same nights); only a deadlock, which PostgreSQL detects within
	// a second, may end one. The lock timeout has its own tests.
	b := setupStays(t, setup(t, func(c *config.Booking) {
		c.LockTimeout, c.StatementTimeout, c.HintClaimTTL = time.Minute, time.Minute, time.Minute
	}))
	hotel, _ := b.hotel(t, "std:100x2@10000")
	for round := 0; round < 5; round++ {
		statuses := race(t, 16, func(i int) int {
			req := StayHoldRequest{RoomType: "std", CheckIn: night(1 + (i*7)%9), CheckOut: night(12 + i%5), Rooms: 1}
			status, r, _ := b.holdStay(t, hotel, fmt.Sprintf("o%d-%d", round, i), "k", req)
			if r != nil && i%2 == 0 {
				b.expireNow(t, r.ID)
			}
			if i%4 == 3 {
				_, err := b.expiry.ExpireOnce(context.Background())
				require.NoError(t, err)
			}
			return status
		})
		require.Zero(t, statuses[503], "round %d: %v", round, statuses)
		require.Equal(t, 16, statuses[201], "round %d: %v", round, statuses)
		_, err := b.expiry.ExpireOnce(context.Background())
		require.NoError(t, err)
		b.requireInventoryAgrees(t, hotel)
	}
}

// Expiry and cancel give every night back, together: a stay's nights have
// no state of their own, so a partly expired stay cannot exist, and the
// counters agree with the stays at every step.
func TestStayExpiryAndCancelGiveEveryNightBack(t *testing.T) {
	b := setupStays(t, setup(t))
	hotel, _ := b.hotel(t, "std:2x2@10000")
	req := StayHoldRequest{RoomType: "std", CheckIn: night(3), CheckOut: night(8), Rooms: 2}
	status, r, err := b.holdStay(t, hotel, "dee", "k", req)
	require.NoError(t, err)
	require.Equal(t, 201, status)
	status, _, _ = b.holdStay(t, hotel, "eve", "k", StayHoldRequest{RoomType: "std", CheckIn: night(7), CheckOut: night(9), Rooms: 1})
	require.Equal(t, 409, status, "night 7 is full")

	b.expireNow(t, r.ID)
	_, err = b.expiry.ExpireOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, StatusExpired, b.status(t, r.ID))
	for d := 3; d < 8; d++ {
		_, held, _ := b.counters(t, hotel, "std", night(d))
		require.Zero(t, held, "night %d given back", d)
	}
	b.requireInventoryAgrees(t, hotel)

	status, r2, err := b.holdStay(t, hotel, "eve", "k2", StayHoldRequest{RoomType: "std", CheckIn: night(2), CheckOut: night(9), Rooms: 2})
	require.NoError(t, err)
	require.Equal(t, 201, status, "the nights are free again")
	cancelled, err := b.stays.Cancel(context.Background(), r2.ID, b.uid("eve"))
	require.NoError(t, err)
	require.Equal(t, StatusCancelled, cancelled.Status)
	require.Equal(t, KindStay, cancelled.Kind)
	for d := 2; d < 9; d++ {
		_, held, _ := b.counters(t, hotel, "std", night(d))
		require.Zero(t, held, "night %d given back", d)
	}
	again, err := b.stays.Cancel(context.Background(), r2.ID, b.uid("eve"))
	require.NoError(t, err, "cancelling a cancelled stay answers its state")
	require.Equal(t, StatusCancelled, again.Status)
	_, err = b.stays.Cancel(context.Background(), r.ID, b.uid("dee"))
	require.Equal(t, 409, answerOf(err).Status, "an expired stay is not cancellable")
	b.requireInventoryAgrees(t, hotel)
}
