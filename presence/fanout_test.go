package presence

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web"
)

// fanoutBundle is one connection wired to a bare gateway, with the test
// in control of the client's reading.
type fanoutBundle struct {
	g      *gateway
	c      *client
	ws     *websocket.Conn
	subj   *subject
	cancel context.CancelFunc
}

func newFanoutBundle(t *testing.T, sendQueue int, slow time.Duration) *fanoutBundle {
	t.Helper()
	cfg := config.Default()
	cfg.Realtime.SendQueue = sendQueue
	reg := prometheus.NewRegistry()
	sockets, err := web.NewSockets(cfg.Realtime, reg, testenv.Logger())
	require.NoError(t, err)
	m, err := newMetrics(reg)
	require.NoError(t, err)
	pcfg := cfg.Presence
	pcfg.CoalesceTick = 20 * time.Millisecond
	pcfg.SlowClientTimeout = slow
	f := newFanout(nil, nil, m, testenv.Logger(), pcfg.CoalesceTick)
	g := &gateway{cfg: pcfg, f: f, m: m, highWater: sendQueue / 2}

	conns := make(chan *web.Conn, 1)
	e := echo.New()
	e.GET("/ws", func(c echo.Context) error {
		conn, err := sockets.Upgrade(c, "test")
		if err != nil {
			return err
		}
		conns <- conn
		for {
			if _, err := conn.Read(); err != nil {
				return nil
			}
		}
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ws.Close() })
	conn := <-conns

	lu := &localUser{id: "alice", subjects: map[string]*subject{}}
	s := &subject{id: "bob", f: f, ready: make(chan struct{}), watchers: map[*localUser]struct{}{lu: {}}}
	lu.subjects["bob"] = s
	c := &client{g: g, conn: conn, lu: lu, user: "alice"}
	lu.clients = []*client{c}
	ctx, cancel := context.WithCancel(context.Background())
	go f.runFlusher(ctx, 2)
	t.Cleanup(cancel)
	return &fanoutBundle{g: g, c: c, ws: ws, subj: s, cancel: cancel}
}

func (b *fanoutBundle) read(t *testing.T, d time.Duration) (UpdatedPayload, bool) {
	t.Helper()
	_ = b.ws.SetReadDeadline(time.Now().Add(d))
	_, msg, err := b.ws.ReadMessage()
	if err != nil {
		return UpdatedPayload{}, false
	}
	var env web.Envelope
	require.NoError(t, json.Unmarshal(msg, &env))
	if env.Event != EventPresenceUpdated {
		return UpdatedPayload{}, true
	}
	var u UpdatedPayload
	require.NoError(t, json.Unmarshal(env.Payload, &u))
	return u, true
}

// Updates within one tick become one frame with the latest status, and a
// status equal to the one last sent is not sent again.
func TestCoalescingAndDedupe(t *testing.T) {
	t.Parallel()
	b := newFanoutBundle(t, 64, time.Second)
	since := time.Now().UnixMilli()
	b.subj.offer(&Status{User: "bob", Status: "online", Since: since, V: 1})
	b.subj.notify()
	u, ok := b.read(t, time.Second)
	require.True(t, ok)
	require.Equal(t, "online", u.Users[0].Status, "a quiet connection gets the first change at once")

	for i, st := range []string{"busy", "away", "busy", "idle"} {
		b.subj.offer(&Status{User: "bob", Status: st, Since: since + int64(i) + 1, V: int64(i) + 2})
		b.subj.notify()
	}
	u, ok = b.read(t, time.Second)
	require.True(t, ok)
	require.Len(t, u.Users, 1)
	require.Equal(t, "idle", u.Users[0].Status, "coalesced into the latest")

	// The same status delivered again (a duplicate publish) sends nothing.
	b.subj.notify()
	b.c.mark(b.subj)
	_, ok = b.read(t, 200*time.Millisecond)
	require.False(t, ok, "deduplicated")
	// An older one (out of order) is ignored by the subject.
	require.False(t, b.subj.offer(&Status{User: "bob", Status: "busy", Since: since + 2, V: 3}))
}

// A connection whose send queue fills gets no increments while behind,
// then one full resync when it catches up.
func TestSlowClientGetsAResync(t *testing.T) {
	t.Parallel()
	b := newFanoutBundle(t, 8, 10*time.Second)
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = 'x'
	}
	frame := web.EventFrame("filler", string(big), "")
	for i := 0; b.c.conn.QueueLen() < b.g.highWater && i < 50; i++ {
		require.True(t, b.c.conn.Send(frame))
		time.Sleep(5 * time.Millisecond)
	}
	require.GreaterOrEqual(t, b.c.conn.QueueLen(), b.g.highWater, "the client does not read: the queue builds up")
	for i := 0; i < 5; i++ {
		b.subj.offer(&Status{User: "bob", Status: "busy", Since: time.Now().UnixMilli() + int64(i), V: int64(i) + 1})
		b.subj.notify()
		time.Sleep(30 * time.Millisecond)
	}
	require.LessOrEqual(t, b.c.conn.QueueLen(), 8, "nothing queued while behind")

	// Catch up: read everything; the last frame is the resync.
	var last UpdatedPayload
	for {
		u, ok := b.read(t, time.Second)
		if !ok {
			break
		}
		if len(u.Users) > 0 || u.Resync {
			last = u
		}
	}
	require.True(t, last.Resync, "a full snapshot after falling behind")
	require.Equal(t, "busy", last.Users[0].Status)
	require.Equal(t, 1.0, testutil.ToFloat64(b.g.m.resyncs))
}

// A connection that stays behind past slow_client_timeout is dropped.
func TestClientStuckBehindIsDropped(t *testing.T) {
	t.Parallel()
	b := newFanoutBundle(t, 8, 300*time.Millisecond)
	big := web.EventFrame("filler", strings.Repeat("x", 1<<20), "")
	for i := 0; b.c.conn.QueueLen() < b.g.highWater && i < 50; i++ {
		b.c.conn.Send(big)
		time.Sleep(5 * time.Millisecond)
	}
	b.subj.offer(&Status{User: "bob", Status: "busy", Since: time.Now().UnixMilli(), V: 1})
	b.subj.notify()
	select {
	case <-b.c.conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not dropped")
	}
	require.Equal(t, 1.0, testutil.ToFloat64(b.g.m.slowDrops))
}
