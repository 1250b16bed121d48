package viewers

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// directory stands in for booking's hotels behind the Hotels port: a list
// in registration order, and a count of the calls made to it.
type directory struct {
	mu    sync.Mutex
	ids   []string
	down  bool
	calls atomic.Int64
}

func (d *directory) add(ids ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids = append(d.ids, ids...)
}

func (d *directory) HotelsSince(_ context.Context, cursor int64, limit int) ([]string, int64, error) {
	d.calls.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		return nil, cursor, errors.New("directory down")
	}
	end := min(int(cursor)+limit, len(d.ids))
	return append([]string(nil), d.ids[cursor:end]...), int64(end), nil
}

// Viewers knows which hotels exist: an unknown hotel's heartbeat, count,
// stream and subscription are 404, a hotel registered later is counted
// within hotel_refresh.
func TestUnknownHotelsAreNotFound(t *testing.T) {
	t.Parallel()
	dir := &directory{}
	dir.add("casa-azul")
	e := newEnv(t, envOpts{hotels: dir})
	c := e.client()

	require.Equal(t, http.StatusNoContent, c.heartbeat("casa-azul").StatusCode)
	require.Equal(t, http.StatusNotFound, c.heartbeat("made-up").StatusCode)
	resp, body := e.get("/v1/viewers/made-up/count", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, body, `"code":"hotel_not_found"`)
	resp, _ = e.get("/v1/viewers/made-up/stream", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, _ = e.get("/v1/viewers/casa-azul/count", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.srv.URL, "http")+"/v1/viewers/ws", nil)
	require.NoError(t, err)
	defer ws.Close()
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"event":"count:subscribe","id":"1","payload":{"hotels":["casa-azul","made-up"]}}`)))
	_, msg, err := ws.ReadMessage()
	require.NoError(t, err)
	require.Contains(t, string(msg), `"hotel_not_found"`)

	dir.add("new-hotel")
	testenv.Eventually(t, 10*time.Second, func() bool {
		return c.heartbeat("new-hotel").StatusCode == http.StatusNoContent
	}, "a hotel registered later is known within hotel_refresh")
	require.Positive(t, e.metric(e.mod.m.unknownHotel), "refusals are counted")
}

// The heartbeat path never asks the directory: the registry answers from
// memory, whatever the number of heartbeats or of made-up hotels, and it
// keeps answering while the directory is down.
func TestHeartbeatsTakeNoDirectoryRoundTrip(t *testing.T) {
	t.Parallel()
	dir := &directory{}
	dir.add("quiet-inn")
	e := newEnv(t, envOpts{hotels: dir, cfg: func(v *config.Viewers) { v.HotelRefresh = time.Hour }})
	before := dir.calls.Load()
	for i := 0; i < 20; i++ {
		require.Equal(t, http.StatusNoContent, e.client().heartbeat("quiet-inn").StatusCode)
		require.Equal(t, http.StatusNotFound, e.post("made-up-"+string(rune('a'+i)), "", nil).StatusCode)
	}
	resp, _ := e.get("/v1/viewers/quiet-inn/count", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, before, dir.calls.Load(), "no directory call on the request path")
	dir.mu.Lock()
	dir.down = true
	dir.mu.Unlock()
	require.Equal(t, http.StatusNoContent, e.client().heartbeat("quiet-inn").StatusCode, "the registry outlives its source")
}

// Until the registry has loaded once, a process cannot tell a hotel from a
// made-up id: it answers 503, never a wrong 404, and serves once the
// directory answers.
func TestRegistryNotLoadedIsUnavailable(t *testing.T) {
	t.Parallel()
	dir := &directory{down: true}
	dir.add("late-inn")
	e := newEnv(t, envOpts{hotels: dir})
	c := e.client()
	require.Equal(t, http.StatusServiceUnavailable, c.heartbeat("late-inn").StatusCode)
	require.Equal(t, http.StatusServiceUnavailable, c.heartbeat("made-up").StatusCode)
	dir.mu.Lock()
	dir.down = false
	dir.mu.Unlock()
	testenv.Eventually(t, 10*time.Second, func() bool { return c.heartbeat("late-inn").StatusCode == http.StatusNoContent }, "loaded")
	require.Equal(t, http.StatusNotFound, c.heartbeat("made-up").StatusCode)
}

// Count is the in-process API other modules read counts through.
func TestCountAPI(t *testing.T) {
	t.Parallel()
	dir := &directory{}
	dir.add("api-inn")
	e := newEnv(t, envOpts{hotels: dir})
	for i := 0; i < 3; i++ {
		require.Equal(t, http.StatusNoContent, e.client().heartbeat("api-inn").StatusCode)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, err := e.mod.Count(context.Background(), "api-inn")
		return err == nil && got.Count == 3 && !got.Stale
	}, "three viewers counted")

	idle, err := New(Deps{CookieKeys: e.mod.cookieKeys, Metrics: prometheus.NewRegistry(), Log: testenv.Logger()})
	require.NoError(t, err)
	_, err = idle.Count(context.Background(), "api-inn")
	require.ErrorIs(t, err, ErrNotStarted, "no part reads counts in this process")
}
