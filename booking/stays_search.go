package booking

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/store"
)

var (
	//go:embed lua/search_fill.lua
	searchFillLua string
	//go:embed lua/search_invalidate.lua
	searchInvalidateLua string

	searchFill       = store.NewScript("booking_search_fill", searchFillLua)
	searchInvalidate = store.NewScript("booking_search_invalidate", searchInvalidateLua)
)

// A city's search read model in Redis: one hash of cached availability
// answers, a field per (checkIn, checkOut), and a version the outbox
// relay's effect bumps as it drops the hash. Both keys carry the city's
// hash tag.
func (k keys) searchCache(city string) string { return k.ks.Entity("city", city).Key("search") }
func (k keys) searchVersion(city string) string {
	return k.ks.Entity("city", city).Key("search", "ver")
}

// searchVersionTTL keeps a city's version well past any cached answer.
const searchVersionTTL = 24 * time.Hour

// search answers GET /v1/hotels on the browse plane: availability from the
// city's read model (filled through the read-only login, dropped by the
// outbox on every inventory change), live viewer counts merged per
// request.
type search struct {
	ro      *pgxpool.Pool
	rdb     redis.UniversalClient
	keys    keys
	viewers ViewerCounts
	cfg     config.Booking
	m       *stayMetrics
	log     *slog.Logger
	sf      singleflight.Group
}

// searchDeps are what the search needs; ReadOnly should be a SELECT-only
// login.
type searchDeps struct {
	ReadOnly *pgxpool.Pool
	Redis    redis.UniversalClient
	Keys     store.Keyspace
	Viewers  ViewerCounts
	Config   config.Booking
	Metrics  *stayMetrics
	Log      *slog.Logger
}

func newSearch(d searchDeps) (*search, error) {
	if d.ReadOnly == nil || d.Redis == nil || d.Viewers == nil || d.Metrics == nil || d.Log == nil {
		return nil, errors.New("booking: search needs a read-only pool, redis, viewer counts, metrics and a logger")
	}
	return &search{ro: d.ReadOnly, rdb: d.Redis, keys: keys{ks: d.Keys}, viewers: d.Viewers, cfg: d.Config,
		m: d.Metrics, log: d.Log}, nil
}

// Routes mounts the search. It is public: it shows availability and
// prices, never who holds what.
func (s *search) Routes(g *echo.Group) {
	g.Match([]string{http.MethodGet, http.MethodHead}, "/v1/hotels", answered(s.get))
}

// searchQuery is a validated GET /v1/hotels.
type searchQuery struct {
	city          string
	checkIn, out  time.Time
	guests, rooms int
}

var searchParams = []string{"city", "checkIn", "checkOut", "guests", "rooms"}

func (s *search) parse(q url.Values) (searchQuery, error) {
	var sq searchQuery
	for name, vals := range q {
		if !slices.Contains(searchParams, name) {
			return sq, refusal.Invalid("unknown query parameter %q: want %s", name, strings.Join(searchParams, ", "))
		}
		if len(vals) != 1 {
			return sq, refusal.Invalid("query parameter %q given %d times", name, len(vals))
		}
	}
	sq.city = q.Get("city")
	if !cityPattern.MatchString(sq.city) {
		return sq, refusal.Invalid("city: 1-64 lowercase letters, digits or '-' (a slug such as lisbon)")
	}
	var ok1, ok2 bool
	sq.checkIn, ok1 = parseDate(q.Get("checkIn"))
	sq.out, ok2 = parseDate(q.Get("checkOut"))
	today := time.Now().UTC().Truncate(24 * time.Hour)
	switch {
	case !ok1 || !ok2:
		return sq, refusal.Invalid("checkIn and checkOut are dates: YYYY-MM-DD")
	case !sq.out.After(sq.checkIn):
		return sq, refusal.Invalid("checkOut must be after checkIn")
	case nightsBetween(sq.checkIn, sq.out) > s.cfg.MaxNightsPerStay:
		return sq, refusal.Invalid("a stay is 1 to %d nights", s.cfg.MaxNightsPerStay)
	// A day of slack: somewhere it is still yesterday.
	case sq.checkIn.Before(today.AddDate(0, 0, -1)) || sq.checkIn.After(today.AddDate(0, 0, maxOpenNights)):
		return sq, refusal.Invalid("checkIn must be between today and %d nights ahead", maxOpenNights)
	}
	var err error
	if sq.rooms, err = intParam(q, "rooms", 1, s.cfg.MaxRoomsPerHold); err != nil {
		return sq, err
	}
	if sq.guests, err = intParam(q, "guests", 1, sq.rooms*maxRoomCapacity); err != nil {
		return sq, err
	}
	return sq, nil
}

// intParam reads an optional integer parameter within [1, hi] (1 when absent).
func intParam(q url.Values, name string, def, hi int) (int, error) {
	v := q.Get(name)
	if v == "" && !q.Has(name) {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > hi || strconv.Itoa(n) != v {
		return 0, refusal.Invalid("%s: a whole number from 1 to %d", name, hi)
	}
	return n, nil
}

func (s *search) get(c echo.Context) error {
	start := time.Now()
	defer func() { s.m.searchDuration.Observe(time.Since(start).Seconds()) }()
	q, err := s.parse(c.QueryParams())
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	avail, err := s.availability(ctx, q.city, q.checkIn, q.out)
	if err != nil {
		return err
	}
	res := SearchResult{City: q.city, CheckIn: q.checkIn.Format(dateLayout), CheckOut: q.out.Format(dateLayout),
		Nights: nightsBetween(q.checkIn, q.out), Guests: q.guests, Rooms: q.rooms, Hotels: offers(avail, q)}
	s.addViewers(ctx, res.Hotels)
	body, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode search: %w", err)
	}
	h := fnv.New64a()
	_, _ = h.Write(body)
	etag := `W/"` + strconv.FormatUint(h.Sum64(), 16) + `"`
	hdr := c.Response().Header()
	hdr.Set(echo.HeaderCacheControl, "public, max-age="+strconv.Itoa(int(s.cfg.SearchMaxAge.Seconds())))
	hdr.Set("ETag", etag)
	if inm := c.Request().Header.Get("If-None-Match"); inm != "" && etagListed(inm, etag) {
		return c.NoContent(http.StatusNotModified)
	}
	return c.JSONBlob(http.StatusOK, body)
}

// etagListed tells whether an If-None-Match header names etag (weakly).
func etagListed(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == strings.TrimPrefix(etag, "W/") {
			return true
		}
	}
	return false
}

// offers filters a city's availability for the guests and rooms wanted:
// room types with the rooms free on every night that sleep the guests,
// hotels with at least one, cheapest first.
func offers(avail []availHotel, q searchQuery) []HotelOffer {
	out := []HotelOffer{}
	for _, h := range avail {
		o := HotelOffer{ID: h.ID, Name: h.Name, Currency: h.Currency}
		for _, t := range h.Types {
			if t.Free < q.rooms || t.Capacity*q.rooms < q.guests {
				continue
			}
			total := t.Price * int64(q.rooms)
			o.RoomTypes = append(o.RoomTypes, RoomTypeOffer{ID: t.ID, Name: t.Name, Capacity: t.Capacity, Available: t.Free, Total: total})
			if len(o.RoomTypes) == 1 || total < o.LowestTotal {
				o.LowestTotal = total
			}
		}
		if len(o.RoomTypes) > 0 {
			out = append(out, o)
		}
	}
	slices.SortStableFunc(out, func(a, b HotelOffer) int {
		if a.LowestTotal != b.LowestTotal {
			if a.LowestTotal < b.LowestTotal {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// viewerFanOut bounds the concurrent viewer-count lookups of one search.
const viewerFanOut = 8

// addViewers asks the viewers module for each hotel's live count, a few at
// a time; a hotel whose count is not available just shows none.
func (s *search) addViewers(ctx context.Context, hotels []HotelOffer) {
	sem := make(chan struct{}, viewerFanOut)
	var wg sync.WaitGroup
	for i := range hotels {
		wg.Add(1)
		sem <- struct{}{}
		go func(o *HotelOffer) {
			defer wg.Done()
			defer func() { <-sem }()
			n, stale, err := s.viewers.ViewerCount(ctx, o.ID)
			if err != nil {
				s.log.Debug("viewer count", "err", err)
				return
			}
			o.Viewers, o.ViewersStale = &n, stale
		}(&hotels[i])
	}
	wg.Wait()
}

// availHotel is a hotel of a city's cached availability for one stay: the
// room types with at least one room free on every night.
type availHotel struct {
	ID       string      `json:"id"`
	Name     string      `json:"name"`
	Currency string      `json:"currency"`
	Types    []availType `json:"types"`
}

type availType struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Capacity int    `json:"capacity"`
	Free     int    `json:"free"`  // on the fullest night
	Price    int64  `json:"price"` // of the stay, per room
}

// cachedAvail is one cached answer with when it was read.
type cachedAvail struct {
	AsOf   int64        `json:"asOf"` // unix milliseconds
	Hotels []availHotel `json:"hotels"`
}

// availability returns the city's hotels with free room types on every
// night of the stay: from the read model when it has the answer, else
// queried (once per process at a time) and stored unless an inventory
// change was relayed meanwhile. With Redis down it queries directly.
func (s *search) availability(ctx context.Context, city string, in, out time.Time) ([]availHotel, error) {
	field := in.Format(dateLayout) + "|" + out.Format(dateLayout)
	cacheKey, verKey := s.keys.searchCache(city), s.keys.searchVersion(city)
	var cached *redis.StringCmd
	var ver *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		cached = p.HGet(ctx, cacheKey, field)
		ver = p.Get(ctx, verKey)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		s.m.searchCache.WithLabelValues("direct").Inc()
		return s.query(ctx, city, in, out)
	}
	if raw, err := cached.Bytes(); err == nil {
		var c cachedAvail
		if json.Unmarshal(raw, &c) == nil && time.Since(time.UnixMilli(c.AsOf)) < s.cfg.SearchCacheTTL {
			s.m.searchCache.WithLabelValues("hit").Inc()
			return c.Hotels, nil
		}
	}
	seen, err := ver.Result()
	if errors.Is(err, redis.Nil) {
		seen = "0"
	}
	v, err, _ := s.sf.Do(city+"|"+field, func() (any, error) {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		hotels, err := s.query(qctx, city, in, out)
		if err != nil {
			return nil, err
		}
		blob, _ := json.Marshal(cachedAvail{AsOf: time.Now().UnixMilli(), Hotels: hotels})
		// Stored only if no inventory change was relayed since the
		// version was read, so an answer older than a change never
		// outlives the change's invalidation.
		if err := searchFill.Run(qctx, s.rdb, []string{verKey, cacheKey}, seen, field, blob,
			s.cfg.SearchCacheTTL.Milliseconds()).Err(); err != nil {
			s.log.Debug("store search answer", "err", err)
		}
		return hotels, nil
	})
	if err != nil {
		return nil, err
	}
	s.m.searchCache.WithLabelValues("filled").Inc()
	return v.([]availHotel), nil
}

// query reads the availability through the read-only login: per room type
// of the city's hotels, the fewest rooms free over the stay's nights and
// the stay's price per room, keeping types open and free every night.
func (s *search) query(ctx context.Context, city string, in, out time.Time) ([]availHotel, error) {
	rows, err := s.ro.Query(ctx, `
SELECT h.id, h.name, h.currency, rt.id, rt.name, rt.capacity,
       min(rn.total - rn.held - rn.sold), sum(coalesce(rn.price, rt.base_price))
FROM hotels h
JOIN room_types rt ON rt.hotel_id = h.id
JOIN room_nights rn ON rn.hotel_id = rt.hotel_id AND rn.room_type_id = rt.id AND rn.night >= $2 AND rn.night < $3
WHERE h.city = $1
GROUP BY h.id, rt.hotel_id, rt.id
HAVING count(*) = $4 AND min(rn.total - rn.held - rn.sold) > 0
ORDER BY h.id, rt.position`, city, in, out, nightsBetween(in, out))
	if err != nil {
		return nil, storeError("search hotels", err)
	}
	defer rows.Close()
	hotels := []availHotel{}
	for rows.Next() {
		var h availHotel
		var t availType
		if err := rows.Scan(&h.ID, &h.Name, &h.Currency, &t.ID, &t.Name, &t.Capacity, &t.Free, &t.Price); err != nil {
			return nil, storeError("search hotels", err)
		}
		if n := len(hotels); n > 0 && hotels[n-1].ID == h.ID {
			hotels[n-1].Types = append(hotels[n-1].Types, t)
			continue
		}
		h.Types = []availType{t}
		hotels = append(hotels, h)
	}
	if err := rows.Err(); err != nil {
		return nil, storeError("search hotels", err)
	}
	return hotels, nil
}

// searchInvalidator is the outbox relay's derived effect for stay
// inventory changes: the city's cached answers of stays overlapping the
// changed nights go, and its version moves so a reader that queried before
// the change cannot store its answer.
type searchInvalidator struct {
	rdb  redis.UniversalClient
	keys keys
}

func newSearchInvalidator(rdb redis.UniversalClient, ks store.Keyspace) *searchInvalidator {
	return &searchInvalidator{rdb: rdb, keys: keys{ks: ks}}
}

// Handle applies one stays.inventory.changed event.
func (si *searchInvalidator) Handle(ctx context.Context, e outbox.Event) error {
	var p StayInventoryChanged
	if err := json.Unmarshal(e.Payload, &p); err != nil || !cityPattern.MatchString(p.City) {
		return nil // nothing to invalidate; not worth stopping the relay for
	}
	from, ok1 := parseDate(p.From)
	to, ok2 := parseDate(p.To)
	if !ok1 || !ok2 {
		p.From, p.To = "", "" // no usable range: drop every answer of the city
	} else {
		p.From, p.To = from.Format(dateLayout), to.Format(dateLayout)
	}
	if err := searchInvalidate.Run(ctx, si.rdb, []string{si.keys.searchVersion(p.City), si.keys.searchCache(p.City)},
		searchVersionTTL.Milliseconds(), p.From, p.To).Err(); err != nil {
		return fmt.Errorf("drop cached searches of %s: %w", p.City, err)
	}
	return nil
}
