package booking

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
)

// Load shedding, rung 2: an operator pauses an event's live pushes during a
// sale. Connected viewers are told to poll, new ones learn it after their
// reset, the relay still drops the cached map but pushes nothing, and
// resuming sends a reset, after which invalidations flow again. Bad input
// changes nothing.
func TestLivePushesPauseForLoadShedding(t *testing.T) {
	t.Parallel()
	br := setupBrowse(t, testenv.Redis(t))
	event, seats := br.event(t, "A:1x4@100,B:1x4@100")
	put := func(body string, key string) (int, string) {
		req, err := http.NewRequest(http.MethodPut, br.url+"/v1/admin/events/"+event+"/live", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set(auth.APIKeyHeader, key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	state := func() string {
		resp, body := br.get(t, "/v1/admin/events/"+event+"/live", auth.APIKeyHeader, "admin-key")
		require.Equal(t, 200, resp.StatusCode, string(body))
		return string(body)
	}
	relay := func() {
		// Tests share the database: the relay publishes other tests' events too.
		for {
			n, err := br.relay.RelayOnce(context.Background())
			require.NoError(t, err)
			if n < 100 {
				return
			}
		}
	}
	follow := func() func() testenv.SSEEvent {
		resp, err := http.Get(br.url + "/v1/events/" + event + "/live?section=B")
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		next := testenv.SSEReader(t, resp.Body)
		require.Equal(t, "reset", next().Event)
		return next
	}

	sse := follow()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(br.url, "http")+"/v1/events/"+event+"/live", nil)
	require.NoError(t, err)
	defer ws.Close()
	frame := func() string {
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, msg, err := ws.ReadMessage()
		require.NoError(t, err)
		return string(msg)
	}
	require.JSONEq(t, `{"type":"reset"}`, frame())

	// Refused, and nothing switched.
	code, _ := put(`{"paused":true}`, "")
	require.Equal(t, 401, code)
	for _, bad := range []string{`{}`, `{"paused":"yes"}`, `{"paused":true,"pollMs":5}`, `{"paused":true,"pollMs":6000000}`,
		`{"paused":false,"pollMs":2000}`, `{"paused":true,"extra":1}`, `not json`} {
		code, body := put(bad, "admin-key")
		require.Equal(t, 400, code, "%s: %s", bad, body)
	}
	req, err := http.NewRequest(http.MethodPut, br.url+"/v1/admin/events/no-such-event/live", strings.NewReader(`{"paused":true}`))
	require.NoError(t, err)
	req.Header.Set(auth.APIKeyHeader, "admin-key")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 404, resp.StatusCode)
	require.JSONEq(t, `{"paused":false}`, state())

	// Paused: connected viewers are told to poll.
	code, body := put(`{"paused":true,"pollMs":3000}`, "admin-key")
	require.Equal(t, 200, code, body)
	require.JSONEq(t, `{"paused":true,"pollMs":3000}`, body)
	require.JSONEq(t, `{"paused":true,"pollMs":3000}`, state())
	ev := sse()
	require.Equal(t, "paused", ev.Event)
	require.JSONEq(t, `{"type":"paused","pollMs":3000}`, ev.Data)
	require.JSONEq(t, `{"type":"paused","pollMs":3000}`, frame(), "one per section followed")
	require.JSONEq(t, `{"type":"paused","pollMs":3000}`, frame())
	// A viewer arriving now learns it after its reset.
	late := follow()
	ev = late()
	require.Equal(t, "paused", ev.Event)
	require.JSONEq(t, `{"type":"paused","pollMs":3000}`, ev.Data)

	// A change while paused: the cached map goes, nobody is pushed to.
	br.get(t, "/v1/events/"+event+"/seats")
	_, _, err = br.hold(t, event, "pia", "k1", []int64{seats[5]}, "")
	require.NoError(t, err)
	relay()
	exists, err := br.rdb.Exists(context.Background(), keys{ks: br.ks}.snapshot(event, allScope)).Result()
	require.NoError(t, err)
	require.Zero(t, exists, "the snapshot is dropped while paused: polling viewers see the change")

	// Resumed: a reset is the next message (an invalidation published
	// while paused would have come first), then invalidations flow again.
	code, body = put(`{"paused":false}`, "admin-key")
	require.Equal(t, 200, code, body)
	require.JSONEq(t, `{"paused":false}`, state())
	for _, next := range []func() testenv.SSEEvent{sse, late} {
		ev = next()
		require.Equal(t, "reset", ev.Event, "nothing was pushed while paused")
		require.JSONEq(t, `{"type":"reset"}`, ev.Data)
	}
	require.JSONEq(t, `{"type":"reset"}`, frame(), "nothing was pushed while paused")
	_, _, err = br.hold(t, event, "pol", "k2", []int64{seats[6]}, "")
	require.NoError(t, err)
	relay()
	ev = sse()
	require.Equal(t, "invalidate", ev.Event)
	require.JSONEq(t, `{"type":"invalidate","section":"B"}`, ev.Data)
}

// Load shedding, rung 1: booking.seat_map_ttl is how long a filled seat map
// is served from Redis, so raising it during a sale cuts the refills.
func TestSeatMapTTLIsTheSheddingSetting(t *testing.T) {
	t.Parallel()
	br := setupBrowse(t, testenv.Redis(t))
	event, _ := br.event(t, "A:1x2@100")
	cfg := br.cfg
	cfg.SeatMapTTL = 10 * time.Minute
	sm, err := newSeatMap(seatMapDeps{ReadOnly: br.ro, Redis: br.rdb, Keys: br.ks, Config: cfg, Metrics: br.m, Log: testenv.Logger()})
	require.NoError(t, err)
	l, err := sm.layoutOf(context.Background(), event)
	require.NoError(t, err)
	_, err = sm.states(context.Background(), l)
	require.NoError(t, err)
	ttl, err := br.rdb.PTTL(context.Background(), keys{ks: br.ks}.snapshot(event, allScope)).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, config.Default().Booking.SeatMapTTL, "kept longer than the default")
	require.LessOrEqual(t, ttl, cfg.SeatMapTTL)
}
