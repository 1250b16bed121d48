package waitingroom

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

func TestAdminAPI(t *testing.T) {
	t.Parallel()
	s := newServer(t, setup(t, testenv.Redis(t), nil))
	path := "/v1/admin/waitingrooms/sale-1"

	code, _ := s.call(t, http.MethodPut, path, "", map[string]any{"capacity": 5}, nil)
	require.Equal(t, http.StatusUnauthorized, code, "API key required")
	code, _ = s.call(t, http.MethodGet, path, "admin", nil, nil)
	require.Equal(t, http.StatusNotFound, code)

	var set Settings
	code, _ = s.call(t, http.MethodPut, path, "admin", map[string]any{"capacity": 5, "batch": 2}, &set)
	require.Equal(t, http.StatusCreated, code)
	require.Equal(t, Settings{Capacity: 5, Batch: 2, LeaseSeconds: 300, HeartbeatTimeoutSeconds: 120, Mode: ModeFIFO}, set)

	open := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	code, _ = s.call(t, http.MethodPut, path, "admin", map[string]any{"mode": "lottery", "openAt": open, "paused": true}, &set)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 5, set.Capacity, "omitted fields are kept")
	require.True(t, set.Paused)
	require.True(t, open.Equal(*set.OpenAt))

	for body, want := range map[string]int{
		`{"capacity":-1}`:        http.StatusUnprocessableEntity,
		`{"batch":0}`:            http.StatusUnprocessableEntity,
		`{"mode":"fifo2"}`:       http.StatusUnprocessableEntity,
		`{"openAt":null}`:        http.StatusUnprocessableEntity, // lottery needs it
		`{"openAt":"tomorrow"}`:  http.StatusUnprocessableEntity,
		`{"capacity":"5"}`:       http.StatusBadRequest,
		`{"capcity":5}`:          http.StatusBadRequest,
		`not json`:               http.StatusBadRequest,
		`{"capacity":1} {"x":1}`: http.StatusBadRequest,
	} {
		var e struct {
			Error answer `json:"error"`
		}
		code, _ := s.call(t, http.MethodPut, path, "admin", body, &e)
		require.Equal(t, want, code, body)
		require.NotEmpty(t, e.Error.Message, body)
	}
	code, _ = s.call(t, http.MethodPut, "/v1/admin/waitingrooms/bad{id}", "admin", `{}`, nil)
	require.Equal(t, http.StatusBadRequest, code)

	code, _ = s.call(t, http.MethodPut, path, "admin", map[string]any{"mode": "fifo", "openAt": nil, "paused": false}, &set)
	require.Equal(t, http.StatusOK, code)
	require.Nil(t, set.OpenAt)
	for i := 0; i < 8; i++ {
		code, _ := s.call(t, http.MethodPost, "/v1/waitingroom/sale-1/join", fmt.Sprint("u", i), nil, nil)
		require.Equal(t, http.StatusOK, code)
	}
	s.tick(t, "sale-1")
	var view RoomView
	code, _ = s.call(t, http.MethodGet, path, "admin", nil, &view)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "sale-1", view.Event)
	require.Equal(t, 6, view.Stats.Queued)
	require.Equal(t, 2, view.Stats.Active, "a batch of 2")
	require.Equal(t, 5, view.Stats.Capacity)
	require.Equal(t, 2, view.Stats.AdmittedPerMinute)
	require.NotNil(t, view.Stats.OldestWaitSeconds)
	require.NotNil(t, view.Stats.LastTick)
	require.NotNil(t, view.Stats.MemoryBytes)
	require.Positive(t, *view.Stats.MemoryBytes)

	code, _ = s.call(t, http.MethodDelete, path, "admin", nil, nil)
	require.Equal(t, http.StatusNoContent, code)
	code, _ = s.call(t, http.MethodPost, "/v1/waitingroom/sale-1/join", "u1", nil, nil)
	require.Equal(t, http.StatusNotFound, code)
}

func TestJoinStatusLeaveOverHTTP(t *testing.T) {
	t.Parallel()
	s := newServer(t, setup(t, testenv.Redis(t), nil))
	s.openRoom(t, "ev", Settings{Capacity: 1, Batch: 1})

	code, _ := s.call(t, http.MethodPost, "/v1/waitingroom/ev/join", "", nil, nil)
	require.Equal(t, http.StatusUnauthorized, code)
	var e struct {
		Error answer `json:"error"`
	}
	code, _ = s.call(t, http.MethodPost, "/v1/waitingroom/nosuch/join", "a", nil, &e)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, CodeNoRoom, e.Error.Code)
	code, _ = s.call(t, http.MethodGet, "/v1/waitingroom/ev/status", "a", nil, &e)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, CodeNotInLine, e.Error.Code)

	var a answer
	for i, u := range []string{"a", "b", "c"} {
		code, _ = s.call(t, http.MethodPost, "/v1/waitingroom/ev/join", u, nil, &a)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, StateQueued, a.State)
		require.EqualValues(t, i+1, *a.Position)
		require.EqualValues(t, i, *a.AheadOfYou)
		require.NotNil(t, a.EtaSeconds)
		require.True(t, a.EtaIsEstimate)
	}
	code, _ = s.call(t, http.MethodGet, "/v1/waitingroom/ev/status", "b", nil, &a)
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 2, *a.Position)

	s.tick(t, "ev")
	code, _ = s.call(t, http.MethodGet, "/v1/waitingroom/ev/status", "a", nil, &a)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, StateAdmitted, a.State)
	require.NotEmpty(t, a.Pass)
	require.NoError(t, s.mod.verifier.Verify(context.Background(), a.Pass, "ev", "a"))
	require.WithinDuration(t, time.Now().Add(5*time.Minute), a.ExpiresAt, 10*time.Second)

	code, _ = s.call(t, http.MethodPost, "/v1/waitingroom/ev/join", "b", nil, &a)
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 1, *a.Position, "b is next")

	// Leaving after checkout frees the slot; leaving the line gives up the place.
	code, _ = s.call(t, http.MethodPost, "/v1/waitingroom/ev/leave", "a", nil, nil)
	require.Equal(t, http.StatusNoContent, code)
	require.ErrorIs(t, s.mod.verifier.Verify(context.Background(), a.Pass, "ev", "a"), ErrNotAdmitted)
	code, _ = s.call(t, http.MethodPost, "/v1/waitingroom/ev/leave", "b", nil, nil)
	require.Equal(t, http.StatusNoContent, code)
	require.Equal(t, []string{"c"}, s.tick(t, "ev").Admitted)

	var jwks struct {
		Keys []map[string]string `json:"keys"`
	}
	code, hdr := s.call(t, http.MethodGet, "/v1/waitingroom/keys", "", nil, &jwks)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, hdr.Get("Cache-Control"), "max-age")
	require.Len(t, jwks.Keys, 1)
	require.Equal(t, "EdDSA", jwks.Keys[0]["alg"])
	require.Equal(t, "k1", jwks.Keys[0]["kid"])
}

// Lottery answers carry no rank before the draw.
func TestLotteryPendingAnswer(t *testing.T) {
	t.Parallel()
	s := newServer(t, setup(t, testenv.Redis(t), nil))
	open := time.Now().Add(time.Hour).UTC()
	s.openRoom(t, "ev", Settings{Mode: ModeLottery, OpenAt: &open})
	var a answer
	code, _ := s.call(t, http.MethodPost, "/v1/waitingroom/ev/join", "a", nil, &a)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "pending", a.Lottery)
	require.Nil(t, a.Position)
	require.NotNil(t, a.OpensAt)
}

// The socket pushes the position (on change, and as keepalive), answers
// pings, then pushes the pass and closes normally.
func TestSocketPushesPositionThenPass(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		s := newServer(t, setup(t, rdb, nil))
		s.openRoom(t, "ev", Settings{Capacity: 1, Batch: 1})
		_, resp, err := s.dialWS(t, "nosuch", "a")
		require.Error(t, err)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)

		ca, _, err := s.dialWS(t, "ev", "a")
		require.NoError(t, err)
		env, a, err := readFrame(t, ca, 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, EventPosition, env.Event)
		require.EqualValues(t, 1, *a.Position)

		cb, _, err := s.dialWS(t, "ev", "b")
		require.NoError(t, err)
		_, a, err = readFrame(t, cb, 2*time.Second)
		require.NoError(t, err)
		require.EqualValues(t, 2, *a.Position)

		// Keepalive: the unchanged position comes again, though nothing
		// changed (only the keepalive sends an unchanged position).
		env, a, err = readFrame(t, cb, 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, EventPosition, env.Event)
		require.EqualValues(t, 2, *a.Position)

		// A ping is answered with the position, correlated.
		require.NoError(t, cb.WriteJSON(wire.Envelope{V: 1, Event: EventPing, ID: "p1"}))
		for {
			env, a, err = readFrame(t, cb, 2*time.Second)
			require.NoError(t, err)
			if env.CorrelationID == "p1" {
				break
			}
		}
		require.Equal(t, EventPosition, env.Event)
		require.NoError(t, cb.WriteJSON(wire.Envelope{V: 1, Event: "queue:jump", ID: "p2"}))
		for {
			env, a, err = readFrame(t, cb, 2*time.Second)
			require.NoError(t, err)
			if env.CorrelationID == "p2" {
				break
			}
		}
		require.Equal(t, "error", env.Event)
		require.Equal(t, wire.CodeUnknownEvent, a.Code)

		// The tick admits a: the pass arrives, then a normal close.
		r := s.tick(t, "ev")
		require.Equal(t, []string{"a"}, r.Admitted)
		var pass string
		for pass == "" {
			env, a, err = readFrame(t, ca, 3*time.Second)
			require.NoError(t, err)
			if env.Event == EventAdmitted {
				pass = a.Pass
			}
		}
		require.NoError(t, s.mod.verifier.Verify(context.Background(), pass, "ev", "a"))
		_, _, err = readFrame(t, ca, 3*time.Second)
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, websocket.CloseNormalClosure, ce.Code)

		// b moves up to the head (a changed position is pushed).
		for {
			env, a, err = readFrame(t, cb, 3*time.Second)
			require.NoError(t, err)
			if env.Event == EventPosition && *a.Position == 1 {
				break
			}
		}
		// a's checkout ends: b is admitted at the next tick.
		require.NoError(t, s.mod.verifier.Release(context.Background(), "ev", "a"))
		require.Equal(t, []string{"b"}, s.tick(t, "ev").Admitted)
		for {
			env, a, err = readFrame(t, cb, 3*time.Second)
			require.NoError(t, err)
			if env.Event == EventAdmitted {
				break
			}
		}
		require.NoError(t, s.mod.verifier.Verify(context.Background(), a.Pass, "ev", "b"))

		// Reconnecting while admitted gets the pass at once.
		ca2, _, err := s.dialWS(t, "ev", "b")
		require.NoError(t, err)
		env, a, err = readFrame(t, ca2, 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, EventAdmitted, env.Event)
	})
}

// An open socket keeps its entry alive: its room refreshes the heartbeat,
// so a tick with a short timeout drops the silent entry, not the socket's.
func TestSocketKeepsHeartbeat(t *testing.T) {
	t.Parallel()
	s := newServer(t, setup(t, testenv.Redis(t), nil))
	s.openRoom(t, "ev", Settings{Capacity: 10, Batch: 10, HeartbeatTimeoutSeconds: 10, Paused: true})
	s.join(t, "ev", "silent")
	c, _, err := s.dialWS(t, "ev", "connected")
	require.NoError(t, err)
	_, _, err = readFrame(t, c, 2*time.Second)
	require.NoError(t, err)
	old := redisNow(t, s.rdb, "") - 11_000
	s.setHeartbeat(t, "ev", "silent", old)
	s.setHeartbeat(t, "ev", "connected", old)
	// Within a position interval the room has refreshed the socket's entry.
	testenv.Eventually(t, 2*time.Second, func() bool {
		return s.heartbeat(t, "ev", "connected") > old+5000
	}, "heartbeat refreshed by the socket")
	s.openRoom(t, "ev", Settings{Capacity: 10, Batch: 10, HeartbeatTimeoutSeconds: 10})
	r := s.tick(t, "ev")
	require.Equal(t, []string{"connected"}, r.Admitted)
	require.Equal(t, 1, r.Abandoned)
}

// The frames a client may send are rate limited.
func TestSocketRateLimitsClientFrames(t *testing.T) {
	t.Parallel()
	s := newServer(t, setup(t, testenv.Redis(t), nil))
	s.openRoom(t, "ev", Settings{Paused: true})
	c, _, err := s.dialWS(t, "ev", "a")
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		require.NoError(t, c.WriteJSON(wire.Envelope{V: 1, Event: EventPing, ID: strconv.Itoa(i)}))
	}
	limited := 0
	for i := 0; i < 20 && limited == 0; i++ {
		env, a, err := readFrame(t, c, 2*time.Second)
		require.NoError(t, err)
		if env.Event == "error" && a.Code == wire.CodeRateLimited {
			limited++
		}
	}
	require.Positive(t, limited)

	// A client that keeps flooding is closed with a policy violation.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := 0; i < 50; i++ {
		if c.WriteMessage(websocket.TextMessage, []byte("junk")) != nil {
			break
		}
	}
	for {
		_, _, err := c.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, socket.ClosePolicy, ce.Code)
			break
		}
	}
}

// With position re-reads far apart, the pass still arrives at once: the
// tick's announcement reaches the socket's room through pub/sub (sharded
// on a cluster).
func TestAdmissionIsPushedThroughPubSub(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		s := newServer(t, setup(t, rdb, func(c *config.Waitingroom) {
			c.PositionInterval, c.KeepaliveInterval = time.Minute, time.Minute
		}))
		s.openRoom(t, "ev", Settings{Capacity: 1, Batch: 1})
		c, _, err := s.dialWS(t, "ev", "a")
		require.NoError(t, err)
		_, _, err = readFrame(t, c, 2*time.Second)
		require.NoError(t, err)
		// Let the room subscribe and settle.
		testenv.Eventually(t, 2*time.Second, func() bool {
			return s.mod.hub.(*hub.Hub).Subscribers(keysOf(s.keys, "ev").topic) == 1
		}, "room subscribed")
		start := time.Now()
		_, ok := s.ticker.TickEvent(context.Background(), "ev")
		require.True(t, ok)
		env, a, err := readFrame(t, c, 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, EventAdmitted, env.Event)
		require.NotEmpty(t, a.Pass)
		require.Less(t, time.Since(start), 2*time.Second)
	})
}
