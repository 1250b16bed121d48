package booking

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"
)

// hotelInfo is what the booking plane needs of a hotel before touching
// its inventory. Everything but waitingRoom is fixed at creation.
type hotelInfo struct {
	id          string
	name        string
	city        string
	loc         *time.Location
	currency    string
	holdMinutes int
	waitingRoom bool
	roomTypes   map[string]roomTypeInfo
}

type roomTypeInfo struct {
	id, name  string
	capacity  int
	basePrice int64
}

// catalog keeps hotels' settings in process for hotel_cache_ttl, so an
// unknown hotel, an unknown room type or a missing waiting-room pass is
// refused without a database round trip. Unknown ids are remembered too,
// so a flood of made-up hotels costs one query per id per period.
type catalog struct {
	db  *pgxpool.Pool
	ttl time.Duration

	mu      sync.Mutex
	entries map[string]catalogEntry
	sf      singleflight.Group
}

type catalogEntry struct {
	hotel   *hotelInfo // nil: no such hotel
	expires time.Time
}

// catalogLimit bounds the entries kept; past it the catalog starts afresh.
const catalogLimit = 10_000

func newCatalog(db *pgxpool.Pool, ttl time.Duration) *catalog {
	return &catalog{db: db, ttl: ttl, entries: map[string]catalogEntry{}}
}

// get returns the hotel, or ErrHotelNotFound.
func (c *catalog) get(ctx context.Context, id string) (*hotelInfo, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[id]
	c.mu.Unlock()
	if !ok || now.After(e.expires) {
		v, err, _ := c.sf.Do(id, func() (any, error) {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			h, err := loadHotel(lctx, c.db, id)
			if err != nil && !errors.Is(err, ErrHotelNotFound) {
				return nil, err
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.entries) >= catalogLimit {
				clear(c.entries)
			}
			entry := catalogEntry{hotel: h, expires: time.Now().Add(c.ttl)}
			c.entries[id] = entry
			return entry, nil
		})
		if err != nil {
			return nil, storeError("read hotel", err)
		}
		e = v.(catalogEntry)
	}
	if e.hotel == nil {
		return nil, ErrHotelNotFound
	}
	return e.hotel, nil
}

// loadHotel reads a hotel and its room types (ErrHotelNotFound when absent).
func loadHotel(ctx context.Context, q querier, id string) (*hotelInfo, error) {
	rows, err := q.Query(ctx, `
SELECT h.name, h.city, h.timezone, h.currency, h.hold_minutes, h.waiting_room, rt.id, rt.name, rt.capacity, rt.base_price
FROM hotels h JOIN room_types rt ON rt.hotel_id = h.id
WHERE h.id = $1 ORDER BY rt.position`, id)
	if err != nil {
		return nil, fmt.Errorf("read hotel: %w", err)
	}
	defer rows.Close()
	var h *hotelInfo
	for rows.Next() {
		var info hotelInfo
		var tz string
		var rt roomTypeInfo
		if err := rows.Scan(&info.name, &info.city, &tz, &info.currency, &info.holdMinutes, &info.waitingRoom,
			&rt.id, &rt.name, &rt.capacity, &rt.basePrice); err != nil {
			return nil, fmt.Errorf("read hotel: %w", err)
		}
		if h == nil {
			loc, err := time.LoadLocation(tz)
			if err != nil {
				return nil, fmt.Errorf("hotel %s: time zone %q: %w", id, tz, err)
			}
			info.id, info.loc, info.roomTypes = id, loc, map[string]roomTypeInfo{}
			h = &info
		}
		h.roomTypes[rt.id] = rt
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read hotel: %w", err)
	}
	if h == nil {
		return nil, ErrHotelNotFound
	}
	return h, nil
}
