package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// fanoutBundle is one connection wired to a bare gateway, with the test
// in control of the client's reading.
type fanoutBundle struct {
	g    *gateway
	c    *client
	ws   *websocket.Conn
	subj *subject
	// gate, while set, holds the connection's writer before it builds its
	// next frame: the socket is busy, as during a long write.
	gate atomic.Pointer[chan struct{}]
}

// newFanoutBundle connects alice, who follows bob.
func newFanoutBundle(t *testing.T, tick, slow time.Duration) *fanoutBundle {
	t.Helper()
	cfg := config.Default()
	reg := prometheus.NewRegistry()
	sockets, err := socket.NewSockets(cfg.Realtime, reg, testenv.Logger())
	require.NoError(t, err)
	m, err := newMetrics(reg)
	require.NoError(t, err)
	pcfg := cfg.Presence
	pcfg.CoalesceTick = tick
	pcfg.SlowClientTimeout = slow
	f := newFanout(nil, nil, m, testenv.Logger())
	g := &gateway{cfg: pcfg, f: f, m: m, behind: newBehindSet()}

	conns := make(chan *socket.Conn, 1)
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
	lu.setClients([]*client{c})
	b := &fanoutBundle{g: g, c: c, ws: ws, subj: s}
	conn.SetSource(func() []byte {
		if gate := b.gate.Load(); gate != nil {
			<-*gate
		}
		return c.nextFrame()
	}, putFrameBuf)
	ctx, cancel := context.WithCancel(context.Background())
	go g.runBehind(ctx)
	t.Cleanup(cancel)
	return b
}

// busy holds the writer until the returned release is called.
func (b *fanoutBundle) busy() (release func()) {
	gate := make(chan struct{})
	b.gate.Store(&gate)
	var once sync.Once
	return func() {
		once.Do(func() {
			b.gate.Store(nil)
			close(gate)
		})
	}
}

// change makes bob's status st with version v, as a published change does.
func (b *fanoutBundle) change(st string, v int64) {
	if b.subj.offer(&Status{User: "bob", Status: st, Since: 1_700_000_000_000 + v, V: v}) {
		b.subj.notify()
	}
}

// read returns the next presence:updated (ok false after d without one);
// other frames are skipped.
func (b *fanoutBundle) read(t *testing.T, d time.Duration) (UpdatedPayload, bool) {
	t.Helper()
	_ = b.ws.SetReadDeadline(time.Now().Add(d))
	for {
		_, msg, err := b.ws.ReadMessage()
		if err != nil {
			return UpdatedPayload{}, false
		}
		var env wire.Envelope
		require.NoError(t, json.Unmarshal(msg, &env))
		if env.Event != EventPresenceUpdated {
			continue
		}
		var u UpdatedPayload
		require.NoError(t, json.Unmarshal(env.Payload, &u))
		return u, true
	}
}

// fill queues a large frame: writing it takes a while, and changes
// arriving meanwhile wait behind it.
func (b *fanoutBundle) fill(t *testing.T) {
	t.Helper()
	require.True(t, b.c.conn.Send(filler))
}

var filler = wire.EventFrame("filler", strings.Repeat("x", 1<<20), "")

// A follower that is not being written to gets every change at once, one
// frame each: no tick holds it back, even a follower that just got a frame.
// (With changes gathered per tick, the second change here would wait for a
// tick of an hour.)
func TestIdleFollowerGetsEveryChangeAtOnce(t *testing.T) {
	t.Parallel()
	b := newFanoutBundle(t, time.Hour, time.Minute)
	for v, st := range []string{"online", "busy", "away", "busy"} {
		b.change(st, int64(v+1))
		u, ok := b.read(t, 5*time.Second)
		require.True(t, ok, "change %d (%s) delivered", v+1, st)
		require.Len(t, u.Users, 1)
		require.Equal(t, st, u.Users[0].Status)
		require.Equal(t, int64(v+1), u.Users[0].V)
	}
}

// Changes arriving while the follower's socket is busy wait for it and
// leave together, latest state per user; a status equal to the one last
// sent is not sent again.
func TestChangesBehindAWriteCoalesceIntoTheLatest(t *testing.T) {
	t.Parallel()
	b := newFanoutBundle(t, time.Hour, time.Minute)
	b.change("online", 1)
	u, ok := b.read(t, 5*time.Second)
	require.True(t, ok)
	require.Equal(t, "online", u.Users[0].Status)

	release := b.busy()
	for v, st := range []string{"busy", "away", "busy", "idle"} {
		b.change(st, int64(v+2))
	}
	release()
	u, ok = b.read(t, 10*time.Second)
	require.True(t, ok, "once the socket is free, one frame")
	require.Len(t, u.Users, 1)
	require.Equal(t, "idle", u.Users[0].Status, "coalesced into the latest")
	require.Equal(t, int64(5), u.Users[0].V)

	// The same status notified again (a duplicate publish) sends nothing.
	b.subj.notify()
	_, ok = b.read(t, 200*time.Millisecond)
	require.False(t, ok, "deduplicated")
	// An older one (out of order) is ignored by the subject.
	require.False(t, b.subj.offer(&Status{User: "bob", Status: "busy", Since: 1_700_000_000_003, V: 3}))
}

// No lost deliveries: whatever the timing of changes, replies and reads,
// every change reaches the follower or is superseded by a newer state of
// the same user, versions never go back, and the last state always
// arrives.
func TestEveryChangeArrivesOrIsSuperseded(t *testing.T) {
	t.Parallel()
	b := newFanoutBundle(t, 5*time.Millisecond, time.Minute)
	const changes = 2000
	var got []int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			u, ok := b.read(t, 30*time.Second)
			if !ok {
				return
			}
			for _, st := range u.Users {
				got = append(got, st.V)
				if st.V == changes {
					return
				}
			}
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// Replies carrying bob's status interleave with the changes.
		defer wg.Done()
		for i := 0; i < 200; i++ {
			b.c.sendSubjects([]*subject{b.subj}, "r", false)
			time.Sleep(time.Millisecond)
		}
	}()
	for v := int64(1); v <= changes; v++ {
		st := "busy"
		if v%2 == 0 {
			st = "away"
		}
		b.change(st, v)
		if v%500 == 0 {
			b.fill(t) // a write in flight: the next changes coalesce behind it
		}
	}
	wg.Wait()
	<-done
	require.NotEmpty(t, got)
	for i := 1; i < len(got); i++ {
		require.GreaterOrEqual(t, got[i], got[i-1], "a newer status never precedes an older one")
	}
	require.Equal(t, int64(changes), got[len(got)-1], "the last state arrives")
}

// A reply queued while the socket's writer was about to build a frame is
// written first: the frame, built later, holds a newer status and must not
// overtake it (the client would end on the older one).
func TestQueuedReplyIsNotOvertakenByANewerFrame(t *testing.T) {
	t.Parallel()
	b := newFanoutBundle(t, time.Hour, time.Minute)
	release := b.busy()
	b.change("busy", 1) // the writer goes for a frame and is held
	b.c.sendSubjects([]*subject{b.subj}, "r1", false)
	b.change("away", 2)
	release()
	var got []int64
	for len(got) == 0 || got[len(got)-1] != 2 {
		u, ok := b.read(t, 10*time.Second)
		require.True(t, ok, "received so far: %v", got)
		for _, st := range u.Users {
			got = append(got, st.V)
		}
	}
	require.Equal(t, []int64{1, 2}, got, "the reply (v1), then the change (v2)")
}

// A change pending when its subject is unfollowed is not sent: unfollow
// clears it, and no mark can come after unfollow returns, so frames carry
// what is followed without checking it.
func TestUnfollowedChangeWaitingForTheSocketIsNotSent(t *testing.T) {
	t.Parallel()
	b := newFanoutBundle(t, time.Hour, time.Minute)
	release := b.busy()
	b.change("busy", 1) // pending; the writer is held before building its frame
	b.g.f.unfollow(b.c.lu, []string{"bob"})
	release()
	u, ok := b.read(t, 500*time.Millisecond)
	require.False(t, ok, "a frame of an unfollowed user arrived: %+v", u)
	b.change("away", 2)
	_, ok = b.read(t, 200*time.Millisecond)
	require.False(t, ok, "no later change is marked either")
}

// A connection whose changes wait behind a write for slow_client_timeout
// is dropped with 4008.
func TestClientStuckBehindIsDropped(t *testing.T) {
	t.Parallel()
	b := newFanoutBundle(t, 10*time.Millisecond, 300*time.Millisecond)
	defer b.busy()() // stuck: the socket never becomes free
	b.change("busy", 1)
	b.change("away", 2)
	select {
	case <-b.c.conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not dropped")
	}
	require.Equal(t, 1.0, testutil.ToFloat64(b.g.m.slowDrops))
}

// A connection that keeps up leaves the watch, and the sweep goes back to
// sleep: nothing runs per tick on a gateway where everyone keeps up.
func TestCaughtUpConnectionLeavesTheWatch(t *testing.T) {
	t.Parallel()
	b := newFanoutBundle(t, 10*time.Millisecond, time.Minute)
	release := b.busy()
	b.change("busy", 1)
	b.change("away", 2)
	testenv.Eventually(t, 10*time.Second, func() bool {
		b.g.behind.mu.Lock()
		defer b.g.behind.mu.Unlock()
		return len(b.g.behind.set) == 1
	}, "the connection is watched while behind")
	release()
	u, ok := b.read(t, 10*time.Second)
	require.True(t, ok)
	require.Equal(t, "away", u.Users[0].Status)
	testenv.Eventually(t, 10*time.Second, func() bool {
		b.g.behind.mu.Lock()
		defer b.g.behind.mu.Unlock()
		return len(b.g.behind.set) == 0
	}, "caught up: no longer watched")
	require.Zero(t, testutil.ToFloat64(b.g.m.slowDrops))
}

// Frame buffers are shared by every connection and reused once written: a
// buffer handed back too early, or reused without being emptied, would
// show as a frame of one follower carrying bytes of another's. Followers
// with statuses of their own take frames from the same buffers at once;
// each must read only its own statuses, in order, to the last.
func TestRecycledFrameBuffersCarryOnlyTheirOwnFrame(t *testing.T) {
	t.Parallel()
	putFrameBuf([]byte(`{"garbage":"left in a buffer by an earlier frame"`))
	const changes = 3000
	var statuses [][]string
	for i := 0; i < 8; i++ {
		statuses = append(statuses, []string{fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)})
	}
	var wg sync.WaitGroup
	for i := range statuses {
		b := newFanoutBundle(t, 5*time.Millisecond, time.Minute)
		own := statuses[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := int64(1); v <= changes; v++ {
				b.change(own[v%2], v)
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for last < changes {
				u, ok := b.read(t, 30*time.Second)
				if !assert.True(t, ok, "follower %d stopped at v%d", i, last) {
					return
				}
				for _, st := range u.Users {
					assert.Contains(t, own, st.Status, "follower %d got another frame's status", i)
					assert.Greater(t, st.V, last)
					last = st.V
				}
			}
		}()
	}
	wg.Wait()
}
