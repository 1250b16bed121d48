package booking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/admission"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// admissionDesk stands in for the waiting room's pass checks: passes are
// "pass|event|user". Leases are the real ones (internal/admission), which
// booking's scripts read and extend; admit writes one as the waiting
// room's tick does. The real pass checks are tested in the waiting room
// and wired in by app (app's booking tests run them).
type admissionDesk struct {
	rdb  redis.UniversalClient
	ks   store.Keyspace
	down atomic.Bool
	// checked counts the passes checked (a signature check, for the real
	// waiting room).
	checked atomic.Int64
}

func newDesk(rdb redis.UniversalClient, ks store.Keyspace) *admissionDesk {
	return &admissionDesk{rdb: rdb, ks: ks}
}

func (d *admissionDesk) LeaseKey(event string) string { return admission.LeaseKey(d.ks, event) }

func (d *admissionDesk) admit(event, user string) string {
	until := time.Now().Add(5 * time.Minute).UnixMilli()
	// With Redis down no lease is written: the hold fails closed anyway.
	_ = d.rdb.ZAdd(context.Background(), d.LeaseKey(event), redis.Z{Score: float64(until), Member: user}).Err()
	return "pass|" + event + "|" + user
}

func (d *admissionDesk) live(event, user string) bool {
	exp, err := d.rdb.ZScore(context.Background(), d.LeaseKey(event), user).Result()
	return err == nil && time.Now().Before(time.UnixMilli(int64(exp)))
}

func (d *admissionDesk) CheckPass(pass, event, user string) error {
	d.checked.Add(1)
	if d.down.Load() {
		return ErrAdmissionUnavailable
	}
	if pass != "pass|"+event+"|"+user {
		return ErrNotAdmitted
	}
	return nil
}

type bundle struct {
	run    string // makes user ids unique to this bundle (tests share a database)
	db     *pgxpool.Pool
	rdb    redis.UniversalClient
	ks     store.Keyspace
	desk   *admissionDesk
	holds  *holdsPlane
	expiry *expirer
	m      *metrics
	cfg    config.Booking
}

var eventSeq atomic.Int64

func setup(t testing.TB, mutate ...func(*config.Booking)) *bundle {
	t.Helper()
	return setupWith(t, testenv.Postgres(t), testenv.Redis(t), mutate...)
}

func setupWith(t testing.TB, db *pgxpool.Pool, rdb redis.UniversalClient, mutate ...func(*config.Booking)) *bundle {
	t.Helper()
	cfg := config.Default().Booking
	cfg.HoldsPerMinute = 1000
	for _, f := range mutate {
		f(&cfg)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	ks := store.NewKeyspace(testenv.Prefix(t))
	b := &bundle{run: fmt.Sprintf("r%d-", eventSeq.Add(1)), db: db, rdb: rdb, ks: ks, desk: newDesk(rdb, ks), m: m, cfg: cfg}
	deps := holdsDeps{DB: db, Redis: rdb, Keys: b.ks, Admission: b.desk, Leases: admission.NewLeases(rdb, ks, time.Second),
		Config: cfg, Metrics: m, Log: testenv.Logger()}
	b.holds, err = newHolds(deps)
	require.NoError(t, err)
	b.expiry, err = newExpirer(deps)
	require.NoError(t, err)
	return b
}

// event creates a fresh event and returns its id and seat ids in layout order.
func (b *bundle) event(t testing.TB, sections string, mutate ...func(*EventSpec)) (string, []int64) {
	t.Helper()
	secs, err := ParseSections(sections)
	require.NoError(t, err)
	spec := EventSpec{
		ID: fmt.Sprintf("ev%d-%d", time.Now().UnixNano()%1e9, eventSeq.Add(1)), Currency: "EUR",
		StartsAt: time.Now().Add(60 * 24 * time.Hour), Sections: secs,
	}
	for _, f := range mutate {
		f(&spec)
	}
	_, err = createEvent(context.Background(), b.db, spec)
	require.NoError(t, err)
	rows, err := b.db.Query(context.Background(), `SELECT id FROM seats WHERE event_id = $1 ORDER BY layout_order`, spec.ID)
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return spec.ID, ids
}

// hold admits user and holds seats; it returns the HTTP-like status and the
// decoded reservation on success.
func (b *bundle) hold(t *testing.T, event, user, key string, seats []int64, promo string) (int, *Reservation, error) {
	t.Helper()
	user = b.uid(user)
	pass := b.desk.admit(event, user)
	res, err := b.holds.Hold(context.Background(), holdInput{User: user, Event: event, Pass: pass, Key: key, Seats: seats, PromoCode: promo})
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

// uid is the user id a test's short name stands for.
func (b *bundle) uid(name string) string { return b.run + name }

// liveItems counts live reservation items per seat of an event.
func (b *bundle) liveItems(t *testing.T, event string) map[int64]int {
	t.Helper()
	rows, err := b.db.Query(context.Background(), `
SELECT i.seat_id, count(*) FROM reservation_items i JOIN reservations r ON r.id = i.reservation_id
WHERE r.event_id = $1 AND i.status IN ('HELD', 'SOLD', 'CHECKED_IN') GROUP BY i.seat_id`, event)
	require.NoError(t, err)
	out := map[int64]int{}
	for rows.Next() {
		var seat int64
		var n int
		require.NoError(t, rows.Scan(&seat, &n))
		out[seat] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// requireNoDoubleOwnership is the invariant: no seat has two live items,
// and every HELD/SOLD seat names the reservation whose live item it has.
func (b *bundle) requireNoDoubleOwnership(t *testing.T, event string) {
	t.Helper()
	for seat, n := range b.liveItems(t, event) {
		require.Equalf(t, 1, n, "seat %d has %d live owners", seat, n)
	}
	var mismatched int
	require.NoError(t, b.db.QueryRow(context.Background(), `
SELECT count(*) FROM seats s
LEFT JOIN reservation_items i ON i.seat_id = s.id AND i.status IN ('HELD', 'SOLD') AND i.reservation_id = s.reservation_id
WHERE s.event_id = $1 AND s.status IN ('HELD', 'SOLD') AND i.id IS NULL`, event).Scan(&mismatched))
	require.Zero(t, mismatched, "a taken seat without its live item")
	var drift int
	require.NoError(t, b.db.QueryRow(context.Background(), `
SELECT count(*) FROM (
	SELECT o.section_id, sum(o.taken) AS counted,
	       (SELECT count(*) FROM seats s WHERE s.event_id = o.event_id AND s.section_id = o.section_id AND s.status IN ('HELD', 'SOLD')) AS real
	FROM section_occupancy o WHERE o.event_id = $1 GROUP BY o.event_id, o.section_id) x
WHERE counted <> real`, event).Scan(&drift))
	require.Zero(t, drift, "the occupancy counters match the seats")
}

// answerOf is the HTTP answer booking's handlers give err (nil: none of
// their own, a 500 or a lost store's 503).
func answerOf(err error) *wire.Error {
	var e *wire.Error
	if errors.As(httpError(err), &e) {
		return e
	}
	return nil
}
