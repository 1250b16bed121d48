package booking

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/refusal"
)

// staysPlane holds hotel rooms per night. It is the holds plane with a
// hotel catalog: the same pool, rate limit, admission check, idempotency
// table, expiry worker and cancel as seats.
type staysPlane struct {
	*holdsPlane
	hotels *catalog
	sm     *stayMetrics
}

func newStays(h *holdsPlane, sm *stayMetrics) *staysPlane {
	return &staysPlane{holdsPlane: h, hotels: newCatalog(h.db, h.cfg.HotelCacheTTL), sm: sm}
}

// stayInput is one stay hold request.
type stayInput struct {
	User  string
	Hotel string
	Pass  string
	Key   string // Idempotency-Key
	Req   StayHoldRequest
}

// stayCart is a validated stay request.
type stayCart struct {
	roomType      string
	checkIn, out  time.Time
	nights, rooms int
	guests        int
	fingerprint   []byte
}

// HoldStay holds rooms of one type for every night of a stay or for none:
// cheap refusals first (validation, rate, the hotel's settings from the
// catalog, the waiting-room pass of a flash deal), then one READ COMMITTED
// transaction that answers identical retries from the stored response,
// locks the nights' inventory rows in date order, checks every night and
// writes the reservation, its nights, the counters, the outbox event and the
// stored response. Refusals are booking's kinds (errors.go).
func (s *staysPlane) HoldStay(ctx context.Context, in stayInput) (holdResult, error) {
	cart, err := s.checkStay(in)
	if err != nil {
		return holdResult{}, err
	}
	if err := s.rateLimit(ctx, in.User); err != nil {
		return s.holdsPlane.refuseUnlessStored(ctx, holdInput{User: in.User, Key: in.Key}, cart.fingerprint, err)
	}
	hotel, err := s.hotels.get(ctx, in.Hotel)
	if err != nil {
		return holdResult{}, err
	}
	rt, err := checkAgainstHotel(cart, hotel)
	if err != nil {
		return holdResult{}, err
	}
	if hotel.waitingRoom {
		// A flash deal: the same pass and lease check as an event's sale,
		// of the waiting room named like the hotel.
		if err := s.verifyAdmission(ctx, holdInput{User: in.User, Event: in.Hotel, Pass: in.Pass}); err != nil {
			return s.holdsPlane.refuseUnlessStored(ctx, holdInput{User: in.User, Key: in.Key}, cart.fingerprint, err)
		}
	}
	resID := uuid.Must(uuid.NewV7()).String()
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return holdResult{}, storeError("begin stay hold", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	pre, stored, err := s.prepareStay(ctx, tx, in, cart)
	if err != nil || stored != nil {
		if stored != nil {
			s.m.idempotentHits.Inc()
			return *stored, nil
		}
		return holdResult{}, err
	}
	nights, ended, err := s.lockNights(ctx, tx, in.Hotel, cart, pre.reclaim)
	if err != nil {
		return holdResult{}, err
	}
	if err := checkNights(cart, nights); err != nil {
		return holdResult{}, err
	}
	holdFor := time.Duration(hotel.holdMinutes) * time.Minute
	res, err := s.writeStay(ctx, tx, pendingStay{in: in, cart: cart, hotel: hotel, roomType: rt, id: resID,
		expiresAt: pre.now.Add(holdFor), nights: nights})
	if err != nil {
		return holdResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return holdResult{}, storeError("commit stay hold", err)
	}
	if hotel.waitingRoom {
		if err := s.extendLease(ctx, in.Hotel, in.User, holdFor); err != nil {
			s.m.leaseExtendFail.Inc()
			s.log.Warn("stay held but the admission lease was not extended", "err", err)
		}
	}
	for _, r := range ended {
		s.releaseAfter(ctx, r, true)
	}
	return res, nil
}

// checkStay validates what can be checked without the hotel.
func (s *staysPlane) checkStay(in stayInput) (stayCart, error) {
	r := in.Req
	var c stayCart
	var ok1, ok2 bool
	c.checkIn, ok1 = parseDate(r.CheckIn)
	c.out, ok2 = parseDate(r.CheckOut)
	keyErr := checkIdempotencyKey(in.Key)
	switch {
	case !validEventID(in.Hotel):
		return c, ErrHotelNotFound
	case keyErr != nil:
		return c, keyErr
	case !roomTypePattern.MatchString(r.RoomType):
		return c, refusal.Invalid("roomType: a room type id of the hotel")
	case !ok1 || !ok2:
		return c, refusal.Invalid("checkIn and checkOut are dates: YYYY-MM-DD")
	case !c.out.After(c.checkIn):
		return c, refusal.Invalid("checkOut must be after checkIn")
	case nightsBetween(c.checkIn, c.out) > s.cfg.MaxNightsPerStay:
		return c, refusal.Invalid("a stay is 1 to %d nights", s.cfg.MaxNightsPerStay)
	case r.Rooms < 1 || r.Rooms > s.cfg.MaxRoomsPerHold:
		return c, refusal.Invalid("rooms: 1 to %d", s.cfg.MaxRoomsPerHold)
	case r.Guests < 0 || r.Guests > r.Rooms*maxRoomCapacity:
		return c, refusal.Invalid("guests: 1 to %d for %d rooms", r.Rooms*maxRoomCapacity, r.Rooms)
	}
	c.roomType, c.nights, c.rooms, c.guests = r.RoomType, nightsBetween(c.checkIn, c.out), r.Rooms, max(r.Guests, 1)
	c.fingerprint = stayFingerprint(in.Hotel, c)
	return c, nil
}

// stayFingerprint identifies a stay request for the idempotency check. Its
// "stay" prefix can never start a seat request's (an event id has no line
// break), so a key reused across kinds is a different request.
func stayFingerprint(hotel string, c stayCart) []byte {
	var b strings.Builder
	for _, part := range []string{"stay", hotel, c.roomType, c.checkIn.Format(dateLayout), c.out.Format(dateLayout),
		strconv.Itoa(c.rooms), strconv.Itoa(c.guests)} {
		b.WriteString(part)
		b.WriteByte('\n')
	}
	sum := sha256.Sum256([]byte(b.String()))
	return sum[:]
}

// checkAgainstHotel checks the cart against the hotel's settings.
func checkAgainstHotel(c stayCart, h *hotelInfo) (roomTypeInfo, error) {
	rt, ok := h.roomTypes[c.roomType]
	if !ok {
		return rt, refusal.New(ErrUnknownRoomType, "room type %q is not a room type of this hotel", c.roomType)
	}
	if c.guests > c.rooms*rt.capacity {
		return rt, refusal.New(ErrTooManyGuests,
			"%d rooms of %s sleep at most %d guests", c.rooms, rt.id, c.rooms*rt.capacity)
	}
	if c.checkIn.Before(localToday(time.Now(), h.loc)) {
		return rt, refusal.New(ErrDatesUnavailable, "checkIn is in the past at the hotel")
	}
	return rt, nil
}

// stayPrep is what the first round trip of a stay hold reads.
type stayPrep struct {
	now time.Time
	// reclaim: due pending stays to end first, the user's previous checkout
	// at this hotel and holds on the wanted nights whose time is up.
	reclaim []string
}

// prepareStay sets the transaction's timeouts, serialises the user's hold
// attempts (the advisory lock seats use), answers identical retries, and
// reads the user's pending checkout at the hotel and the due holds on the
// wanted nights, in one round trip.
func (s *staysPlane) prepareStay(ctx context.Context, tx pgx.Tx, in stayInput, c stayCart) (stayPrep, *holdResult, error) {
	var p stayPrep
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`,
		itoa(s.cfg.LockTimeout.Milliseconds()), itoa(s.cfg.StatementTimeout.Milliseconds()))
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, in.User+"\n"+opHold)
	b.Queue(`SELECT fingerprint, status_code, response FROM idempotency_keys WHERE user_id = $1 AND operation = $2 AND key = $3`,
		in.User, opHold, in.Key)
	b.Queue(`
SELECT clock_timestamp(), r.id::text, r.expires_at <= clock_timestamp()
FROM (VALUES (1)) v
LEFT JOIN reservations r ON r.hotel_id = $1 AND r.user_id = $2 AND r.status = 'PENDING_PAYMENT' AND r.kind = 'stay'`,
		in.Hotel, in.User)
	// statement_timestamp, not clock_timestamp: it bounds the scan of the
	// partial index on pending expiries, which holds only the few due rows
	// the expiry worker has not reached yet.
	b.Queue(`
SELECT r.id::text FROM reservations r
WHERE r.status = 'PENDING_PAYMENT' AND r.expires_at <= statement_timestamp() AND r.kind = 'stay' AND r.hotel_id = $1
  AND EXISTS (SELECT 1 FROM stay_nights n WHERE n.reservation_id = r.id AND n.room_type_id = $2 AND n.night >= $3 AND n.night < $4)`,
		in.Hotel, c.roomType, c.checkIn, c.out)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	for i := 0; i < 2; i++ {
		if _, err := res.Exec(); err != nil {
			return p, nil, storeError("prepare stay hold", err)
		}
	}
	var storedFP []byte
	var stored holdResult
	err := res.QueryRow().Scan(&storedFP, &stored.Status, &stored.Body)
	switch {
	case err == nil:
		if string(storedFP) != string(c.fingerprint) {
			return p, nil, ErrKeyReused
		}
		stored.Replayed = true
		return p, &stored, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return p, nil, storeError("read idempotency key", err)
	}
	var pendingID *string
	var pendingDue *bool
	if err := res.QueryRow().Scan(&p.now, &pendingID, &pendingDue); err != nil {
		return p, nil, storeError("read pending checkout", err)
	}
	if pendingID != nil {
		if !*pendingDue {
			return p, nil, &PendingCheckoutError{Reservation: *pendingID, Where: atThisHotel}
		}
		p.reclaim = append(p.reclaim, *pendingID)
	}
	rows, err := res.Query()
	if err != nil {
		return p, nil, storeError("find expired stays", err)
	}
	due, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return p, nil, storeError("find expired stays", err)
	}
	for _, id := range due {
		if pendingID == nil || id != *pendingID {
			p.reclaim = append(p.reclaim, id)
		}
	}
	return p, nil, nil
}

// lockedNight is one inventory row of a stay, locked for the hold.
type lockedNight struct {
	night             time.Time
	total, held, sold int
	price             *int64 // the calendar's, when set
}

func (n lockedNight) free() int { return n.total - n.held - n.sold }

// lockNights locks the wanted nights in date order and returns them. Due
// holds to reclaim are ended first, in the order every terminal transition
// takes: their reservation rows, then every night involved (theirs and the
// wanted ones) in one (hotel, room type, night) order, then the changes.
func (s *staysPlane) lockNights(ctx context.Context, tx pgx.Tx, hotel string, c stayCart, reclaim []string) ([]lockedNight, []*released, error) {
	start := time.Now()
	var ended []*released
	if len(reclaim) > 0 {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM reservations WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE`, reclaim); err != nil {
			return nil, nil, storeError("lock expired stays", err)
		}
		if err := lockNightsOf(ctx, tx, reclaim, &nightRange{hotel: hotel, roomType: c.roomType, from: c.checkIn, to: c.out}); err != nil {
			return nil, nil, storeError("lock nights", err)
		}
		for _, id := range reclaim {
			r, err := endReservation(ctx, tx, id, StatusExpired, true, "")
			if errors.Is(err, ErrNotPending) {
				continue // ended by someone else meanwhile
			}
			if err != nil {
				return nil, nil, storeError("expire stay inline", err)
			}
			s.m.reclaimed.WithLabelValues("inline").Inc()
			ended = append(ended, r)
		}
	}
	// ORDER BY night puts the row locks under the sort: every stay locks its
	// nights in ascending date order, so overlapping stays cannot deadlock.
	rows, err := tx.Query(ctx, `
SELECT night, total, held, sold, price FROM room_nights
WHERE hotel_id = $1 AND room_type_id = $2 AND night >= $3 AND night < $4
ORDER BY night FOR NO KEY UPDATE`, hotel, c.roomType, c.checkIn, c.out)
	if err != nil {
		return nil, nil, storeError("lock nights", err)
	}
	nights, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (lockedNight, error) {
		var n lockedNight
		err := row.Scan(&n.night, &n.total, &n.held, &n.sold, &n.price)
		return n, err
	})
	if err != nil {
		return nil, nil, storeError("lock nights", err)
	}
	s.sm.lockWait.Observe(time.Since(start).Seconds())
	return nights, ended, nil
}

// nightRange is a room type's nights from up to to (exclusive).
type nightRange struct {
	hotel, roomType string
	from, to        time.Time
}

// lockNightsOf locks the inventory rows of the stays among reservations
// ids, and of extra when given, in one global (hotel, room type, night)
// order. A transaction ending several stays, or ending some and holding
// another, takes every night this way before changing any.
func lockNightsOf(ctx context.Context, tx pgx.Tx, ids []string, extra *nightRange) error {
	if len(ids) == 0 && extra == nil {
		return nil
	}
	var hotel, roomType *string
	var from, to *time.Time
	if extra != nil {
		hotel, roomType, from, to = &extra.hotel, &extra.roomType, &extra.from, &extra.to
	}
	_, err := tx.Exec(ctx, `
SELECT 1 FROM room_nights rn
WHERE (rn.hotel_id, rn.room_type_id, rn.night) IN (
	SELECT hotel_id, room_type_id, night FROM stay_nights WHERE reservation_id = ANY($1::uuid[])
	UNION ALL
	SELECT $2::text, $3::text, d::date FROM generate_series($4::date, $5::date - 1, interval '1 day') d WHERE $2::text IS NOT NULL)
ORDER BY rn.hotel_id, rn.room_type_id, rn.night
FOR NO KEY UPDATE`, ids, hotel, roomType, from, to)
	if err != nil {
		return fmt.Errorf("lock nights: %w", err)
	}
	return nil
}

// lockStayNights locks the nights of the stays among a batch of
// reservations whose rows the caller has locked (the expiry worker's).
func lockStayNights(ctx context.Context, tx pgx.Tx, ids []string) error {
	return lockNightsOf(ctx, tx, ids, nil)
}

// checkNights refuses a stay unless every night is open and has the rooms.
func checkNights(c stayCart, nights []lockedNight) error {
	if len(nights) != c.nights {
		return refusal.New(ErrDatesUnavailable,
			"the hotel does not sell every night from %s to %s yet", c.checkIn.Format(dateLayout), c.out.Format(dateLayout))
	}
	var full []string
	for _, n := range nights {
		if n.free() < c.rooms {
			full = append(full, n.night.Format(dateLayout))
		}
	}
	if len(full) > 0 {
		return &RoomsFullError{RoomType: c.roomType, Nights: full}
	}
	return nil
}
