package booking

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/internal/spectest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web"
)

type browse struct {
	*bundle
	ro    *pgxpool.Pool
	sm    *seatMap
	hub   *hub.Hub
	srv   *web.Server
	url   string
	relay *outbox.Relay
}

func setupBrowse(t *testing.T, rdb redis.UniversalClient) *browse {
	t.Helper()
	b := setupWith(t, testenv.Postgres(t), rdb)
	ro, err := pgxpool.New(context.Background(), testenv.ReadOnlyURL(t))
	require.NoError(t, err)
	t.Cleanup(ro.Close)
	sm, err := newSeatMap(seatMapDeps{ReadOnly: ro, Redis: rdb, Keys: b.ks, Config: b.cfg, Metrics: b.m, Log: testenv.Logger()})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	h, err := hub.New(rdb, reg, testenv.Logger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	cfg := config.Default()
	srv, err := web.NewServer(cfg, reg, testenv.Logger())
	require.NoError(t, err)
	spectest.Validate(t, srv.Echo)
	sm.RoutesSeats(srv.Echo.Group(""))
	sm.RoutesLive(srv.Echo.Group(""), h, srv.Sockets, auth.RequireAPIKey("admin-key"))
	ts := httptest.NewServer(srv.Echo)
	t.Cleanup(ts.Close)
	relay, err := outbox.NewRelay(outbox.RelayConfig{Pool: b.db, Redis: rdb, Stream: b.ks.Global("outbox").Key("events"),
		StreamMaxLen: 1000, Batch: 100, PollInterval: 10 * time.Millisecond, Retention: time.Hour, Log: testenv.Logger()})
	require.NoError(t, err)
	relay.HandleBatch(KindInventoryChanged, newInvalidator(rdb, h, b.ks).Handle)
	return &browse{bundle: b, ro: ro, sm: sm, hub: h, srv: srv, url: ts.URL, relay: relay}
}

func (br *browse) get(t *testing.T, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, br.url+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// The seat bitmap: 2 bits a seat, 4 a byte, most significant pair first,
// in layout order; 50,000 seats are exactly 12,500 bytes.
func TestSeatBitmapSizeAndOrder(t *testing.T) {
	t.Parallel()
	br := setupBrowse(t, testenv.Redis(t))
	event, seats := br.event(t, "A:100x250@1000,B:100x250@500")
	require.Len(t, seats, 50_000)
	// Seat 1 HELD, seat 2 SOLD, seat 3 BLOCKED; seat 0 stays AVAILABLE.
	_, r, err := br.hold(t, event, "pat", "k", []int64{seats[1], seats[2]}, "")
	require.NoError(t, err)
	_, err = br.db.Exec(context.Background(), `UPDATE seats SET status = 'SOLD' WHERE id = $1`, seats[2])
	require.NoError(t, err)
	_, err = br.db.Exec(context.Background(), `UPDATE seats SET status = 'BLOCKED', reservation_id = NULL WHERE id = $1`, seats[3])
	require.NoError(t, err)
	_ = r

	resp, body := br.get(t, "/v1/events/"+event+"/seats?format=bitmap")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
	require.Len(t, body, 12_500)
	require.Equal(t, "50000", resp.Header.Get("X-Seat-Count"))
	require.Equal(t, "section,row,number", resp.Header.Get("X-Seat-Order"))
	require.Equal(t, byte(0b00_01_10_11), body[0], "AVAILABLE, HELD, SOLD, BLOCKED from the most significant pair")
	require.Equal(t, byte(0), body[1])

	// Section B starts at seat 25,000: byte aligned, its own 6,250 bytes.
	resp, body = br.get(t, "/v1/events/"+event+"/seats?section=B", "Accept", "application/octet-stream")
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, body, 6_250)
	require.Equal(t, "25000", resp.Header.Get("X-Seat-First"))
}

func TestRepackUnalignedSection(t *testing.T) {
	t.Parallel()
	// States 0..9 as 0,1,2,3,0,1,2,3,0,1; take seats 3..7 (3,0,1,2,3).
	full := []byte{0b00_01_10_11, 0b00_01_10_11, 0b00_01_00_00}
	require.Equal(t, []byte{0b11_00_01_10, 0b11_00_00_00}, repack(full, 3, 5))
	require.Equal(t, []byte{0b00_01_00_00}, repack(full, 4, 2), "aligned: trailing seats cleared")
}

func TestSeatMapJSONAndCache(t *testing.T) {
	t.Parallel()
	br := setupBrowse(t, testenv.Redis(t))
	event, seats := br.event(t, "A:2x2@1000,B:1x4@300")
	_, _, err := br.hold(t, event, "quinn", "k", []int64{seats[0]}, "")
	require.NoError(t, err)
	resp, body := br.get(t, "/v1/events/"+event+"/seats?section=A")
	require.Equal(t, 200, resp.StatusCode, string(body))
	var v SeatMapView
	require.NoError(t, json.Unmarshal(body, &v))
	require.Equal(t, 4, v.SeatCount)
	require.Len(t, v.Seats, 4)
	require.Equal(t, SeatHeld, v.Seats[0].Status)
	require.Equal(t, "A", v.Seats[0].Section)
	require.Len(t, v.Sections, 2)
	require.Equal(t, 3, v.Sections[0].Available)
	require.Equal(t, int64(10_000), v.Sections[0].MultiplierBps)

	br.get(t, "/v1/events/"+event+"/seats")
	require.Equal(t, float64(1), testutil.ToFloat64(br.m.cache.WithLabelValues("filled")))
	require.GreaterOrEqual(t, testutil.ToFloat64(br.m.cache.WithLabelValues("hit")), float64(1))

	resp, _ = br.get(t, "/v1/events/no-such/seats")
	require.Equal(t, 404, resp.StatusCode)
	resp, _ = br.get(t, "/v1/events/"+event+"/seats?section=Z")
	require.Equal(t, 404, resp.StatusCode)
}

// A thousand simultaneous misses become one query: one reader fills under
// the lease, the others wait for its snapshot.
func TestFillLeaseCollapsesMisses(t *testing.T) {
	t.Parallel()
	br := setupBrowse(t, testenv.Redis(t))
	event, _ := br.event(t, "A:100x100@100")
	l, err := br.sm.layoutOf(context.Background(), event)
	require.NoError(t, err)
	// Generous, so a slow CI machine measures the collapse, not its speed.
	br.sm.cfg.SeatMapFillWait = 10 * time.Second
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := br.sm.states(context.Background(), l); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("reader failed: %v", err)
	}
	require.Equal(t, float64(1), testutil.ToFloat64(br.m.cache.WithLabelValues("filled")), "one query for the whole stampede")
}

// A filler that gave up its lease without filling (it failed or died) is
// replaced by a waiter, instead of every waiter answering 503.
func TestWaiterTakesOverAFailedFill(t *testing.T) {
	t.Parallel()
	br := setupBrowse(t, testenv.Redis(t))
	event, _ := br.event(t, "A:2x2@100")
	l, err := br.sm.layoutOf(context.Background(), event)
	require.NoError(t, err)
	br.sm.cfg.SeatMapFillWait = 10 * time.Second
	lease := br.sm.keys.fillLease(event, allScope)
	require.NoError(t, br.rdb.Set(context.Background(), lease, "stuck-filler", time.Minute).Err())

	got := make(chan error, 1)
	go func() {
		_, err := br.sm.states(context.Background(), l)
		got <- err
	}()
	testenv.Eventually(t, 5*time.Second, func() bool { return testutil.ToFloat64(br.m.fillContention) == 1 }, "the reader waits for the filler")
	require.NoError(t, br.rdb.Del(context.Background(), lease).Err())
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not take over the released lease")
	}
	require.Equal(t, float64(1), testutil.ToFloat64(br.m.cache.WithLabelValues("filled")))
}

// The browse login can only SELECT.
func TestBrowseLoginCannotWrite(t *testing.T) {
	t.Parallel()
	br := setupBrowse(t, testenv.Redis(t))
	event, seats := br.event(t, "A:1x2@100")
	_, err := br.ro.Exec(context.Background(), `UPDATE seats SET status = 'SOLD' WHERE id = $1`, seats[0])
	require.ErrorContains(t, err, "permission denied")
	_, err = br.ro.Exec(context.Background(), `DELETE FROM reservations`)
	require.ErrorContains(t, err, "permission denied")
	_, err = br.ro.Exec(context.Background(), `INSERT INTO outbox (kind, aggregate_id, payload) VALUES ('x', 'y', '{}')`)
	require.ErrorContains(t, err, "permission denied")
	var n int
	require.NoError(t, br.ro.QueryRow(context.Background(), `SELECT count(*) FROM seats WHERE event_id = $1`, event).Scan(&n))
	require.Equal(t, 2, n)
}

// Redis down: the seat map is served from the database path.
func TestSeatMapWithoutRedis(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := testenv.RedisClient(t, srv.URL, func(o *redis.Options) { o.MaxRetries = -1 })
	br := setupBrowse(t, rdb)
	event, _ := br.event(t, "A:2x2@100")
	require.NoError(t, srv.Stop())
	resp, body := br.get(t, "/v1/events/"+event+"/seats?format=bitmap")
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Len(t, body, 1)
	require.Equal(t, float64(1), testutil.ToFloat64(br.m.cache.WithLabelValues("direct")))

	// Holds fail closed: nothing is granted while the coordination store is down.
	status, _, err := br.hold(t, event, "ray", "k", []int64{1}, "")
	require.Equal(t, 503, status, "%v", err)
}

// Committed holds reach live viewers as invalidations: the cached map is
// dropped first, then the section's viewers are told.
func TestLiveInvalidationsFollowCommittedChanges(t *testing.T) {
	t.Parallel()
	br := setupBrowse(t, testenv.Redis(t))
	event, seats := br.event(t, "A:1x4@100,B:1x4@100")

	resp, err := http.Get(br.url + "/v1/events/" + event + "/live?section=B")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	next := testenv.SSEReader(t, resp.Body)
	events := func() (string, string) { e := next(); return e.Event, e.Data }
	ev, data := events()
	require.Equal(t, "reset", ev)
	require.JSONEq(t, `{"type":"reset"}`, data)

	wsURL := "ws" + strings.TrimPrefix(br.url, "http") + "/v1/events/" + event + "/live"
	ws, _, err := websocket.DefaultDialer.Dial(wsURL, nil)
	require.NoError(t, err)
	defer ws.Close()
	_, msg, err := ws.ReadMessage()
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"reset"}`, string(msg))

	// Fill the cache, then change section B.
	br.get(t, "/v1/events/"+event+"/seats")
	_, _, err = br.hold(t, event, "sam", "k", []int64{seats[5]}, "")
	require.NoError(t, err)
	// Tests share the database: the relay publishes other tests' events too.
	for {
		n, err := br.relay.RelayOnce(context.Background())
		require.NoError(t, err)
		if n < 100 {
			break
		}
	}

	ev, data = events()
	require.Equal(t, "invalidate", ev)
	require.JSONEq(t, `{"type":"invalidate","section":"B"}`, data)
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, msg, err = ws.ReadMessage()
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"invalidate","section":"B"}`, string(msg))

	exists, err := br.rdb.Exists(context.Background(), keys{ks: br.ks}.snapshot(event, allScope)).Result()
	require.NoError(t, err)
	require.Zero(t, exists, "the snapshot was dropped before viewers were told")
	resp2, body := br.get(t, "/v1/events/"+event+"/seats?section=B")
	require.Equal(t, 200, resp2.StatusCode)
	var v SeatMapView
	require.NoError(t, json.Unmarshal(body, &v))
	require.Equal(t, SeatHeld, v.Seats[1].Status, "the refetch shows the change")

	// The relay published the event to the stream for other consumers.
	entries, err := br.rdb.XRange(context.Background(), br.ks.Global("outbox").Key("events"), "-", "+").Result()
	require.NoError(t, err)
	found := false
	for _, e := range entries {
		if e.Values["aggregate"] == event {
			found = true
			require.Equal(t, KindInventoryChanged, e.Values["kind"])
			id, _ := strconv.Atoi(e.Values["id"].(string))
			require.Positive(t, id)
		}
	}
	require.True(t, found)
}

// An event deleted and created again under the same id is a new layout:
// its map answers 404 while it is gone, then the new seats and prices, in
// this process and in another that still knew the old layout.
func TestSeatMapFollowsADeletedAndRecreatedEvent(t *testing.T) {
	t.Parallel()
	br := setupBrowse(t, testenv.Redis(t))
	other, err := newSeatMap(seatMapDeps{ReadOnly: br.ro, Redis: br.rdb, Keys: br.ks, Config: br.cfg, Metrics: br.m, Log: testenv.Logger()})
	require.NoError(t, err)
	ctx := context.Background()
	event, old := br.event(t, "A:1x4@1000")
	seatsOf := func(sm *seatMap) ([]int64, int64) {
		l, _, err := sm.current(ctx, event)
		require.NoError(t, err)
		ids := make([]int64, len(l.seats))
		for i, s := range l.seats {
			ids[i] = s.id
		}
		return ids, l.seats[0].basePrice
	}
	resp, body := br.get(t, "/v1/events/"+event+"/seats")
	require.Equal(t, 200, resp.StatusCode, string(body))
	ids, _ := seatsOf(other)
	require.Equal(t, old, ids)

	require.NoError(t, deleteEvent(ctx, br.db, event))
	// The delete's invalidations drop the snapshot once relayed (tests
	// share the outbox, so relay until ours went).
	require.Eventually(t, func() bool {
		_, err := br.relay.RelayOnce(ctx)
		require.NoError(t, err)
		resp, body := br.get(t, "/v1/events/"+event+"/seats")
		require.Contains(t, []int{200, 404}, resp.StatusCode, string(body))
		return resp.StatusCode == 404
	}, 10*time.Second, 10*time.Millisecond, "a deleted event's map is gone")

	_, fresh := br.event(t, "A:2x3@2500", func(s *EventSpec) { s.ID = event })
	resp, body = br.get(t, "/v1/events/"+event+"/seats")
	require.Equal(t, 200, resp.StatusCode, string(body))
	var v SeatMapView
	require.NoError(t, json.Unmarshal(body, &v))
	require.Equal(t, 6, v.SeatCount)
	require.Equal(t, fresh[0], v.Seats[0].ID)
	// The other process kept the old layout; the snapshot the first one
	// filled belongs to the new generation, which it must not read
	// against the old seats.
	ids, price := seatsOf(other)
	require.Equal(t, fresh, ids)
	require.Equal(t, int64(2500), price)
}
