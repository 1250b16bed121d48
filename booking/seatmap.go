package booking

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/store"
)

var (
	//go:embed lua/fill_release.lua
	fillReleaseLua string
	fillRelease    = store.NewScript("booking_fill_release", fillReleaseLua)
)

// fillLeaseTTL bounds how long one reader may take to refill a snapshot
// before another may try.
const fillLeaseTTL = 5 * time.Second

// seatMap serves seat maps to the browse plane from short-lived Redis
// snapshots, refilled by one reader at a time through a read-only login.
type seatMap struct {
	ro   *pgxpool.Pool
	rdb  redis.UniversalClient
	keys keys
	cfg  config.Booking
	m    *metrics
	log  *slog.Logger

	mu      sync.Mutex
	layouts map[string]*layout
	sf      singleflight.Group
}

// seatMapDeps are what SeatMap needs; ReadOnly should be a SELECT-only login.
type seatMapDeps struct {
	ReadOnly *pgxpool.Pool
	Redis    redis.UniversalClient
	Keys     store.Keyspace
	Config   config.Booking
	Metrics  *metrics
	Log      *slog.Logger
}

// newSeatMap builds the seat-map reader.
func newSeatMap(d seatMapDeps) (*seatMap, error) {
	if d.ReadOnly == nil || d.Redis == nil || d.Metrics == nil || d.Log == nil {
		return nil, errors.New("booking: seat map needs a read-only pool, redis, metrics and a logger")
	}
	return &seatMap{ro: d.ReadOnly, rdb: d.Redis, keys: keys{ks: d.Keys}, cfg: d.Config, m: d.Metrics, log: d.Log,
		layouts: map[string]*layout{}}, nil
}

// layout is an event's fixed seat layout; it never changes after creation,
// so each process keeps it. An event deleted and created again under the
// same id is another layout: generation (its creation time) tells them
// apart, and every snapshot of states names the generation it belongs to.
type layout struct {
	event      string
	generation int64 // events.created_at in Unix microseconds
	currency   string
	startsAt   time.Time
	sections   []sectionInfo
	seats      []seatInfo // in layout order
}

type sectionInfo struct {
	ID        string
	Name      string
	BasePrice int64
	first     int // layout index of the section's first seat
	count     int
}

type seatInfo struct {
	id        int64
	section   int // index into sections
	row, num  int
	basePrice int64
}

// errStaleLayout: the event this process knows was deleted, perhaps
// created again, since its layout was loaded.
var errStaleLayout = errors.New("the event changed since its layout was loaded")

// current returns the event's layout and the packed states of its seats,
// from one generation of the event. A layout found stale is forgotten and
// loaded again, once.
func (s *seatMap) current(ctx context.Context, event string) (*layout, []byte, error) {
	for retried := false; ; retried = true {
		l, err := s.layoutOf(ctx, event)
		if err != nil {
			return nil, nil, err
		}
		packed, err := s.states(ctx, l)
		if !errors.Is(err, errStaleLayout) {
			return l, packed, err
		}
		s.forget(l)
		if retried {
			return nil, nil, refusal.Busy(time.Second, "the event is being recreated; retry")
		}
	}
}

// forget drops a stale layout, unless a fresher one replaced it already.
func (s *seatMap) forget(l *layout) {
	s.mu.Lock()
	if s.layouts[l.event] == l {
		delete(s.layouts, l.event)
	}
	s.mu.Unlock()
}

// layoutOf returns the event's layout, loading it once per process.
func (s *seatMap) layoutOf(ctx context.Context, event string) (*layout, error) {
	if !validEventID(event) {
		return nil, ErrEventNotFound
	}
	s.mu.Lock()
	l := s.layouts[event]
	s.mu.Unlock()
	if l != nil {
		return l, nil
	}
	v, err, _ := s.sf.Do("layout:"+event, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return s.loadLayout(lctx, event)
	})
	if err != nil {
		return nil, err
	}
	l = v.(*layout)
	s.mu.Lock()
	s.layouts[event] = l
	s.mu.Unlock()
	return l, nil
}

func (s *seatMap) loadLayout(ctx context.Context, event string) (*layout, error) {
	l := &layout{event: event}
	var created time.Time
	err := s.ro.QueryRow(ctx, `SELECT currency, starts_at, created_at FROM events WHERE id = $1`, event).
		Scan(&l.currency, &l.startsAt, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrEventNotFound
	}
	if err != nil {
		return nil, storeError("read event", err)
	}
	l.generation = created.UnixMicro()
	rows, err := s.ro.Query(ctx, `SELECT id, name, base_price, seat_count FROM sections WHERE event_id = $1 ORDER BY position`, event)
	if err != nil {
		return nil, storeError("read sections", err)
	}
	index := map[string]int{}
	first := 0
	for rows.Next() {
		var sec sectionInfo
		if err := rows.Scan(&sec.ID, &sec.Name, &sec.BasePrice, &sec.count); err != nil {
			rows.Close()
			return nil, storeError("read sections", err)
		}
		sec.first = first
		first += sec.count
		index[sec.ID] = len(l.sections)
		l.sections = append(l.sections, sec)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, storeError("read sections", err)
	}
	rows, err = s.ro.Query(ctx, `SELECT id, section_id, row_num, seat_num, base_price FROM seats WHERE event_id = $1 ORDER BY layout_order`, event)
	if err != nil {
		return nil, storeError("read seats", err)
	}
	defer rows.Close()
	l.seats = make([]seatInfo, 0, first)
	for rows.Next() {
		var seat seatInfo
		var section string
		if err := rows.Scan(&seat.id, &section, &seat.row, &seat.num, &seat.basePrice); err != nil {
			return nil, storeError("read seats", err)
		}
		seat.section = index[section]
		l.seats = append(l.seats, seat)
	}
	if err := rows.Err(); err != nil {
		return nil, storeError("read seats", err)
	}
	if len(l.seats) != first {
		return nil, fmt.Errorf("event %s: %d seats but sections count %d", event, len(l.seats), first)
	}
	return l, nil
}

// states returns the packed states of every seat of the event (the bitmap),
// from the Redis snapshot when there is one. On a miss one reader takes the
// fill lease and queries; the others wait for its result. With Redis down,
// readers query directly, collapsed per event in this process.
func (s *seatMap) states(ctx context.Context, l *layout) ([]byte, error) {
	key := s.keys.snapshot(l.event, allScope)
	b, err := s.rdb.Get(ctx, key).Bytes()
	switch {
	case err == nil:
		s.m.cache.WithLabelValues("hit").Inc()
		return l.unwrap(b)
	case !errors.Is(err, redis.Nil):
		return s.direct(ctx, l)
	}
	fill := s.keys.fillLease(l.event, allScope)
	token := store.NewToken()
	deadline := time.Now().Add(s.cfg.SeatMapFillWait)
	for waited := false; ; waited = true {
		// Trying the lease on every round, not once, lets a waiter take over
		// when the filler failed, instead of all waiters timing out.
		won, err := s.rdb.SetNX(ctx, fill, token, fillLeaseTTL).Result()
		if err != nil {
			return s.direct(ctx, l) // Redis just failed
		}
		if won {
			return s.fill(ctx, l, key, fill, token)
		}
		if !waited {
			s.m.fillContention.Inc()
		}
		if !time.Now().Before(deadline) {
			return nil, refusal.Busy(time.Second, "the seat map is being refreshed; retry")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if b, err := s.rdb.Get(ctx, key).Bytes(); err == nil {
			s.m.cache.WithLabelValues("waited").Inc()
			return l.unwrap(b)
		}
	}
}

// fill queries the states and stores the snapshot; the caller holds the
// fill lease, released here by its token.
func (s *seatMap) fill(ctx context.Context, l *layout, key, lease, token string) ([]byte, error) {
	defer func() {
		_ = fillRelease.Run(context.WithoutCancel(ctx), s.rdb, []string{lease}, token).Err()
	}()
	// The previous holder may have filled it between our miss and our
	// lease: look again before querying.
	if b, err := s.rdb.Get(ctx, key).Bytes(); err == nil {
		s.m.cache.WithLabelValues("waited").Inc()
		return l.unwrap(b)
	}
	b, err := s.queryStates(ctx, l)
	if err != nil {
		return nil, err
	}
	if err := s.rdb.Set(ctx, key, l.wrap(b), s.cfg.SeatMapTTL).Err(); err != nil {
		s.log.Debug("store seat-map snapshot", "err", err)
	}
	s.m.cache.WithLabelValues("filled").Inc()
	return b, nil
}

// direct reads states from PostgreSQL without the snapshot (Redis is
// down); concurrent readers of one event in this process share one query,
// and the small read-only pool bounds the rest.
func (s *seatMap) direct(ctx context.Context, l *layout) ([]byte, error) {
	s.m.cache.WithLabelValues("direct").Inc()
	v, err, _ := s.sf.Do("states:"+l.event, func() (any, error) {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return s.queryStates(qctx, l)
	})
	if err != nil {
		return nil, err
	}
	return v.([]byte), nil
}

func (s *seatMap) queryStates(ctx context.Context, l *layout) ([]byte, error) {
	// Rows only while the event is the generation the layout was loaded
	// from: none once it was deleted or created again.
	rows, err := s.ro.Query(ctx, `
SELECT status FROM seats
 WHERE event_id = $1 AND EXISTS (SELECT 1 FROM events WHERE id = $1 AND created_at = $2)
 ORDER BY layout_order`, l.event, time.UnixMicro(l.generation))
	if err != nil {
		return nil, storeError("read seat states", err)
	}
	defer rows.Close()
	packed := make([]byte, (len(l.seats)+3)/4)
	i := 0
	for rows.Next() {
		var status string
		if err := rows.Scan(&status); err != nil {
			return nil, storeError("read seat states", err)
		}
		if i < len(l.seats) {
			packed[i/4] |= stateCode[status] << uint(6-2*(i%4))
		}
		i++
	}
	if err := rows.Err(); err != nil {
		return nil, storeError("read seat states", err)
	}
	if i != len(l.seats) {
		return nil, fmt.Errorf("event %s: layout has %d seats, states %d: %w", l.event, len(l.seats), i, errStaleLayout)
	}
	return packed, nil
}

// A snapshot is the layout's generation (8 bytes, big-endian) and then the
// packed states, so a process that knows an older layout of the event
// cannot read a newer generation's states against it.
const generationBytes = 8

func (l *layout) wrap(packed []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, generationBytes+len(packed)), uint64(l.generation)), packed...)
}

// unwrap returns the packed states of a snapshot of this generation, and
// errStaleLayout for one of another.
func (l *layout) unwrap(snapshot []byte) ([]byte, error) {
	if len(snapshot) != generationBytes+(len(l.seats)+3)/4 ||
		int64(binary.BigEndian.Uint64(snapshot)) != l.generation {
		return nil, fmt.Errorf("event %s: snapshot of another generation: %w", l.event, errStaleLayout)
	}
	return snapshot[generationBytes:], nil
}

// Two bits a seat, four seats a byte, most significant pair first.
var (
	stateCode = map[string]byte{SeatAvailable: 0, SeatHeld: 1, SeatSold: 2, SeatBlocked: 3}
	stateName = [4]string{SeatAvailable, SeatHeld, SeatSold, SeatBlocked}
)

func stateAt(packed []byte, i int) byte { return packed[i/4] >> uint(6-2*(i%4)) & 3 }

// repack copies n states starting at index from into a fresh bitmap that
// starts at bit zero.
func repack(packed []byte, from, n int) []byte {
	out := make([]byte, (n+3)/4)
	if from%4 == 0 {
		copy(out, packed[from/4:])
		if n%4 != 0 { // clear the bits of the seats after the range
			out[len(out)-1] &= 0xff << uint(8-2*(n%4))
		}
		return out
	}
	for i := 0; i < n; i++ {
		out[i/4] |= stateAt(packed, from+i) << uint(6-2*(i%4))
	}
	return out
}
