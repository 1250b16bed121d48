package viewers

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/wire"
)

func dialWS(t *testing.T, e *env) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.srv.URL, "http")+"/v1/viewers/ws", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func readEnvelope(t *testing.T, c *websocket.Conn) wire.Envelope {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, msg, err := c.ReadMessage()
	require.NoError(t, err)
	var env wire.Envelope
	require.NoError(t, json.Unmarshal(msg, &env))
	return env
}

// awaitCount reads pushes until one says hotel has want viewers: a push of
// the previous count may still be on its way when a heartbeat lands.
func awaitCount(t *testing.T, c *websocket.Conn, hotel string, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got := countPayload(t, readEnvelope(t, c))
		if got.Hotel == hotel && got.Count == want {
			return
		}
	}
	t.Fatalf("no push of %d viewers for %s", want, hotel)
}

func countPayload(t *testing.T, env wire.Envelope) Count {
	t.Helper()
	require.Equal(t, "count:updated", env.Event, string(env.Payload))
	var c Count
	require.NoError(t, json.Unmarshal(env.Payload, &c))
	return c
}

// A WebSocket subscribes to several hotels, gets their counts at once and
// every change after; one upstream subscription per hotel however many
// sockets follow it.
func TestWebSocketLiveCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ws := dialWS(t, e)
	require.NoError(t, ws.WriteJSON(map[string]any{"v": 1, "event": "count:subscribe", "id": "s1", "payload": map[string]any{"hotels": []string{"live-a", "live-b"}}}))
	seen := map[string]bool{}
	for i := 0; i < 2; i++ {
		env := readEnvelope(t, ws)
		require.Equal(t, "s1", env.CorrelationID)
		c := countPayload(t, env)
		require.Equal(t, int64(0), c.Count)
		seen[c.Hotel] = true
	}
	require.True(t, seen["live-a"] && seen["live-b"])
	other := dialWS(t, e)
	require.NoError(t, other.WriteJSON(map[string]any{"v": 1, "event": "count:subscribe", "payload": map[string]any{"hotels": []string{"live-a"}}}))
	readEnvelope(t, other)
	require.Equal(t, 2, e.mod.feeds.subscribers("live-a"))
	require.Equal(t, 1, e.mod.feeds.hub.Subscribers(e.mod.keys.topic("live-a")), "one hub subscriber per hotel")

	e.client().heartbeat("live-a")
	awaitCount(t, ws, "live-a", 1)
	awaitCount(t, other, "live-a", 1)

	// Unsubscribe: no more pushes for live-a; live-b still flows.
	require.NoError(t, ws.WriteJSON(map[string]any{"v": 1, "event": "count:unsubscribe", "payload": map[string]any{"hotels": []string{"live-a"}}}))
	testenv.Eventually(t, 5*time.Second, func() bool { return e.mod.feeds.subscribers("live-a") == 1 }, "unsubscribed")
	e.client().heartbeat("live-a")
	e.client().heartbeat("live-b")
	c := countPayload(t, readEnvelope(t, ws))
	require.Equal(t, "live-b", c.Hotel, "no push for live-a after unsubscribing")

	// Errors: unknown event, bad payload, bad hotel, too many hotels.
	for _, tc := range []struct {
		frame any
		code  string
	}{
		{map[string]any{"v": 1, "event": "count:nope", "id": "x1"}, wire.CodeUnknownEvent},
		{map[string]any{"v": 1, "event": "count:subscribe", "id": "x2", "payload": map[string]any{"hotelz": []string{"a"}}}, wire.CodeBadPayload},
		{map[string]any{"v": 1, "event": "count:subscribe", "id": "x3", "payload": map[string]any{"hotels": []string{"bad id"}}}, wire.CodeBadPayload},
		{map[string]any{"v": 2, "event": "count:subscribe", "id": "x4"}, wire.CodeUnsupportedVersion},
		{map[string]any{"v": 1, "event": "count:subscribe", "id": "x5", "payload": map[string]any{"hotels": manyHotels(51)}}, wire.CodeLimitExceeded},
	} {
		require.NoError(t, ws.WriteJSON(tc.frame))
		env := readEnvelope(t, ws)
		require.Equal(t, "error", env.Event)
		require.Contains(t, string(env.Payload), tc.code)
	}
	require.Equal(t, 1, e.mod.feeds.subscribers("live-b"), "refused requests changed nothing")

	ws.Close()
	testenv.Eventually(t, 5*time.Second, func() bool { return e.mod.feeds.subscribers("live-b") == 0 }, "a closed socket leaves its hotels")
	testenv.Eventually(t, 5*time.Second, func() bool { return e.mod.feeds.hub.Subscribers(e.mod.keys.topic("live-b")) == 0 }, "and the hub subscription goes")
}

func manyHotels(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "many-" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	return out
}

// SSE opens with the current count and streams changes.
func TestSSELiveCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.client().heartbeat("sse-hotel")
	e.flush()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/v1/viewers/sse-hotel/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	events := testenv.SSEReader(t, resp.Body)
	next := func() Count {
		ev := events()
		require.Equal(t, "count:updated", ev.Event)
		var c Count
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &c))
		return c
	}
	require.Equal(t, int64(1), next().Count)
	e.client().heartbeat("sse-hotel")
	require.Equal(t, int64(2), next().Count)
	resp, body := e.get("/v1/viewers/bad%20id/stream", nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
}

// Above push_throttle_above local subscribers a hotel gets at most one push
// per push_throttle, carrying the latest count; at or below, every change.
func TestManySubscribersAreThrottled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: func(v *cfgViewers) { v.PushThrottleAbove = 2; v.PushThrottle = 700 * time.Millisecond }})
	var conns []*websocket.Conn
	for i := 0; i < 3; i++ {
		ws := dialWS(t, e)
		require.NoError(t, ws.WriteJSON(map[string]any{"v": 1, "event": "count:subscribe", "payload": map[string]any{"hotels": []string{"busy"}}}))
		readEnvelope(t, ws)
		conns = append(conns, ws)
	}
	// Publish a burst of changes directly, as the count plane would.
	start := time.Now()
	for n := 1; n <= 6; n++ {
		res := newResult("busy", int64(n), time.Now(), false)
		require.NoError(t, e.mod.feeds.hub.Publish(t.Context(), e.mod.keys.topic("busy"), res.body))
		time.Sleep(50 * time.Millisecond)
	}
	// Each socket gets the first change at once, then the latest (6) one
	// throttle period later, and nothing in between.
	for _, ws := range conns {
		first := countPayload(t, readEnvelope(t, ws))
		second := countPayload(t, readEnvelope(t, ws))
		require.Equal(t, int64(6), second.Count, "the held-back push carries the latest count (first was %d)", first.Count)
	}
	require.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond)
	require.Greater(t, e.metric(e.mod.m.pushThrottled), float64(0))

	// Two subscribers: every change.
	conns[2].Close()
	testenv.Eventually(t, 5*time.Second, func() bool { return e.mod.feeds.subscribers("busy") == 2 }, "one left")
	time.Sleep(800 * time.Millisecond)
	for n := 7; n <= 9; n++ {
		res := newResult("busy", int64(n), time.Now(), false)
		require.NoError(t, e.mod.feeds.hub.Publish(t.Context(), e.mod.keys.topic("busy"), res.body))
		time.Sleep(20 * time.Millisecond)
	}
	for n := 7; n <= 9; n++ {
		require.Equal(t, int64(n), countPayload(t, readEnvelope(t, conns[0])).Count)
	}
}
