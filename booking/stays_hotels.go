package booking

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	_ "time/tzdata" // hotel time zones resolve even on hosts without a zoneinfo database

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/internal/validate"
)

// Limits of one hotel.
const (
	maxRoomTypes      = 50
	maxOpenNights     = 730
	defaultOpenNights = 365
	maxRoomCapacity   = 20
	maxRoomsPerType   = 10_000
	maxPrice          = 1_000_000_000_000
)

var (
	cityPattern     = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
	roomTypePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$`)
)

// dateLayout is how nights are written on the wire: the hotel's local date.
const dateLayout = "2006-01-02"

// parseDate reads a YYYY-MM-DD date strictly (no time, no offset, no
// single-digit fields) as midnight UTC, the way PostgreSQL's date is read.
func parseDate(s string) (time.Time, bool) {
	if len(s) != len(dateLayout) {
		return time.Time{}, false
	}
	t, err := time.Parse(dateLayout, s)
	if err != nil || t.Format(dateLayout) != s {
		return time.Time{}, false
	}
	return t, true
}

// localToday is the date it is now at the hotel, as midnight UTC.
func localToday(now time.Time, loc *time.Location) time.Time {
	y, m, d := now.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// nightsBetween is the number of nights from check-in to check-out.
func nightsBetween(in, out time.Time) int { return int(out.Sub(in).Hours() / 24) }

// validText tells whether s is 1 to max characters of valid UTF-8 without
// control characters: a name shown to people.
func validText(s string, maxBytes int) bool {
	return s != "" && strings.TrimSpace(s) == s && validate.Text("name", s, maxBytes) == nil
}

func (r RateSpec) validate(roomTypes map[string]bool) error {
	from, ok1 := parseDate(r.From)
	to, ok2 := parseDate(r.To)
	switch {
	case !roomTypes[r.RoomType]:
		return fmt.Errorf("rate: unknown room type %q", r.RoomType)
	case !ok1 || !ok2 || !to.After(from):
		return fmt.Errorf("rate of %s: from and to are dates (YYYY-MM-DD), from before to", r.RoomType)
	case nightsBetween(from, to) > maxOpenNights:
		return fmt.Errorf("rate of %s: at most %d nights", r.RoomType, maxOpenNights)
	case r.Price < 0 || r.Price > maxPrice:
		return fmt.Errorf("rate of %s: price out of range", r.RoomType)
	}
	return nil
}

// createHotel writes the hotel, its room types and one inventory row per
// room type and night for OpenNights nights from the hotel's today, then
// its calendar rates, in one transaction.
func createHotel(ctx context.Context, pool *pgxpool.Pool, spec HotelSpec) (HotelSummary, error) {
	if err := spec.Validate(); err != nil {
		return HotelSummary{}, err
	}
	loc, _ := time.LoadLocation(spec.Timezone) // checked by Validate
	first := localToday(time.Now(), loc)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return HotelSummary{}, fmt.Errorf("create hotel: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `
INSERT INTO hotels (id, name, city, timezone, currency, hold_minutes, waiting_room) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		spec.ID, spec.Name, spec.City, spec.Timezone, spec.Currency, spec.HoldMinutes, spec.WaitingRoom)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return HotelSummary{}, ErrHotelExists
	}
	if err != nil {
		return HotelSummary{}, fmt.Errorf("create hotel: %w", err)
	}
	var nights [][]any
	rooms := 0
	for pos, rt := range spec.RoomTypes {
		if _, err := tx.Exec(ctx, `
INSERT INTO room_types (hotel_id, id, name, position, capacity, base_price, rooms) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			spec.ID, rt.ID, rt.Name, pos, rt.Capacity, rt.BasePrice, rt.Rooms); err != nil {
			return HotelSummary{}, fmt.Errorf("create room type %s: %w", rt.ID, err)
		}
		rooms += rt.Rooms
		for n := 0; n < spec.OpenNights; n++ {
			nights = append(nights, []any{spec.ID, rt.ID, first.AddDate(0, 0, n), rt.Rooms})
		}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"room_nights"}, []string{"hotel_id", "room_type_id", "night", "total"},
		pgx.CopyFromRows(nights)); err != nil {
		return HotelSummary{}, fmt.Errorf("open room nights: %w", err)
	}
	if _, err := applyRates(ctx, tx, spec.ID, spec.City, spec.Rates); err != nil {
		return HotelSummary{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return HotelSummary{}, fmt.Errorf("create hotel: %w", err)
	}
	return HotelSummary{ID: spec.ID, City: spec.City, RoomTypes: len(spec.RoomTypes), Rooms: rooms,
		FirstNight: first.Format(dateLayout), LastNight: first.AddDate(0, 0, spec.OpenNights-1).Format(dateLayout)}, nil
}

// setRates sets calendar prices of an existing hotel; nights outside the
// opened inventory are left alone. It answers how many nights changed.
func setRates(ctx context.Context, pool *pgxpool.Pool, hotel string, rates []RateSpec) (int64, error) {
	if len(rates) == 0 || len(rates) > 1000 {
		return 0, refusal.New(ErrInvalidRates, "%v: 1 to 1000 rates", ErrInvalidRates)
	}
	var changed int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var city string
		rows, err := tx.Query(ctx, `SELECT h.city, rt.id FROM hotels h JOIN room_types rt ON rt.hotel_id = h.id WHERE h.id = $1`, hotel)
		if err != nil {
			return fmt.Errorf("read hotel: %w", err)
		}
		types := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&city, &id); err != nil {
				rows.Close()
				return fmt.Errorf("read hotel: %w", err)
			}
			types[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read hotel: %w", err)
		}
		if len(types) == 0 {
			return ErrHotelNotFound
		}
		for _, r := range rates {
			if err := r.validate(types); err != nil {
				return refusal.New(ErrInvalidRates, "%v: %v", ErrInvalidRates, err)
			}
		}
		changed, err = applyRates(ctx, tx, hotel, city, rates)
		return err
	})
	return changed, err
}

// applyRates writes calendar prices, one room type's nights in date order
// (the inventory lock order), with an inventory event per rate so cached
// searches drop the old prices.
func applyRates(ctx context.Context, tx pgx.Tx, hotel, city string, rates []RateSpec) (int64, error) {
	var changed int64
	for _, r := range rates {
		tag, err := tx.Exec(ctx, `
WITH locked AS (
	SELECT night FROM room_nights WHERE hotel_id = $1 AND room_type_id = $2 AND night >= $3 AND night < $4
	ORDER BY night FOR NO KEY UPDATE)
UPDATE room_nights rn SET price = $5 FROM locked
WHERE rn.hotel_id = $1 AND rn.room_type_id = $2 AND rn.night = locked.night`,
			hotel, r.RoomType, r.From, r.To, r.Price)
		if err != nil {
			return 0, fmt.Errorf("set rate of %s: %w", r.RoomType, err)
		}
		changed += tag.RowsAffected()
		if err := queueStayChange(ctx, tx, StayInventoryChanged{Hotel: hotel, City: city, RoomType: r.RoomType, From: r.From, To: r.To}); err != nil {
			return 0, err
		}
	}
	return changed, nil
}

// hotelsSince lists hotels registered after cursor, in registration order.
func hotelsSince(ctx context.Context, db *pgxpool.Pool, cursor int64, limit int) ([]string, int64, error) {
	rows, err := db.Query(ctx, selectHotelsSince, cursor, limit, hotelSettle.Seconds())
	if err != nil {
		return nil, cursor, fmt.Errorf("list hotels: %w", err)
	}
	defer rows.Close()
	var ids []string
	next := cursor
	for rows.Next() {
		var seq int64
		var id string
		var settled bool
		if err := rows.Scan(&seq, &id, &settled); err != nil {
			return nil, cursor, fmt.Errorf("list hotels: %w", err)
		}
		if seq != next+1 && !settled {
			// A registration that drew a lower number may not have
			// committed yet: stop before the gap, or its hotel would
			// be behind the cursor when it does.
			break
		}
		ids = append(ids, id)
		next = seq
	}
	if err := rows.Err(); err != nil {
		return nil, cursor, fmt.Errorf("list hotels: %w", err)
	}
	return ids, next, nil
}

// Registration numbers are drawn before a registration commits, so they
// commit out of order, and one that fails (a duplicate id, a rollback)
// leaves a gap forever. The listing goes past a gap only once the hotel
// after it was registered hotelSettle ago: far longer than a registration
// takes, so by then the missing number's registration has committed (and
// been listed) or never will.
const hotelSettle = 5 * time.Second

const selectHotelsSince = `
SELECT seq, id, clock_timestamp() - created_at > make_interval(secs => $3)
FROM hotels WHERE seq > $1 ORDER BY seq LIMIT $2`
