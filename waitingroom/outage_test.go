package waitingroom

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// persistentRedis is a redis-server with an append-only file, stopped and
// started again on the same port and data, as a production Redis restarts.
type persistentRedis struct {
	t    *testing.T
	port int
	dir  string
	srv  *store.EmbeddedRedis
}

func newPersistentRedis(t *testing.T) *persistentRedis {
	t.Helper()
	testenv.RedisURL(t) // fails with the install hint when redis-server is missing
	port, err := store.FreePort()
	require.NoError(t, err)
	p := &persistentRedis{t: t, port: port, dir: t.TempDir()}
	p.start()
	t.Cleanup(func() {
		if p.srv != nil {
			_ = p.srv.Stop()
		}
	})
	return p
}

func (p *persistentRedis) start() {
	srv, err := store.StartRedisServer(context.Background(), store.RedisServerOptions{
		Port: p.port, Dir: p.dir, Args: []string{"--appendonly", "yes", "--appendfsync", "always"},
	})
	require.NoError(p.t, err)
	p.srv = srv
}

func (p *persistentRedis) stop() {
	require.NoError(p.t, p.srv.Stop())
	p.srv = nil
}

// Redis stopped: join, status, the socket and verify answer 503 /
// ErrUnavailable, the tick admits nobody; when Redis returns, service
// resumes and the line's order is intact.
func TestRedisDownFailsClosed(t *testing.T) {
	t.Parallel()
	pr := newPersistentRedis(t)
	rdb := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:" + strconv.Itoa(pr.port), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, MaxRetries: -1,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	s := newServer(t, setup(t, rdb, func(c *config.Waitingroom) { c.StoreTimeout = time.Second }))
	ctx := context.Background()
	s.openRoom(t, "ev", Settings{Capacity: 1, Batch: 1})
	for _, u := range []string{"a", "b", "c"} {
		code, _ := s.call(t, http.MethodPost, "/v1/waitingroom/ev/join", u, nil, nil)
		require.Equal(t, http.StatusOK, code)
	}
	require.Equal(t, []string{"a"}, s.tick(t, "ev").Admitted)
	var a answer
	code, _ := s.call(t, http.MethodGet, "/v1/waitingroom/ev/status", "a", nil, &a)
	require.Equal(t, http.StatusOK, code)
	require.NotEmpty(t, a.Pass)
	v := s.mod.verifier
	require.NoError(t, v.Verify(ctx, a.Pass, "ev", "a"))
	require.NoError(t, v.Release(ctx, "ev", "a")) // capacity is free: only the outage holds b back
	code, _ = s.call(t, http.MethodPost, "/v1/waitingroom/ev/join", "a2", nil, nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []string{"b"}, s.tick(t, "ev").Admitted)
	code, _ = s.call(t, http.MethodGet, "/v1/waitingroom/ev/status", "b", nil, &a)
	require.Equal(t, http.StatusOK, code)
	bPass := a.Pass
	require.NoError(t, v.Release(ctx, "ev", "b"))

	pr.stop()

	for _, req := range []struct{ method, path string }{
		{http.MethodPost, "/v1/waitingroom/ev/join"},
		{http.MethodGet, "/v1/waitingroom/ev/status"},
		{http.MethodPost, "/v1/waitingroom/ev/leave"},
	} {
		var e struct {
			Error answer `json:"error"`
		}
		code, hdr := s.call(t, req.method, req.path, "c", nil, &e)
		require.Equal(t, http.StatusServiceUnavailable, code, req.path)
		require.Equal(t, "unavailable", e.Error.Code)
		secs, err := strconv.Atoi(hdr.Get("Retry-After"))
		require.NoError(t, err, "Retry-After")
		require.GreaterOrEqual(t, secs, 1)
		require.LessOrEqual(t, secs, 3, "jittered around retry_after")
	}
	code, _ = s.call(t, http.MethodGet, "/v1/admin/waitingrooms/ev", "admin", nil, nil)
	require.Equal(t, http.StatusServiceUnavailable, code)
	_, resp, err := s.dialWS(t, "ev", "c")
	require.Error(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	err = v.Verify(ctx, bPass, "ev", "b")
	require.ErrorIs(t, err, ErrUnavailable, "a valid pass is not accepted without its lease check")
	require.False(t, errors.Is(err, ErrNotAdmitted))
	require.ErrorIs(t, v.Extend(ctx, "ev", "b", time.Minute), ErrUnavailable)
	require.ErrorIs(t, v.Release(ctx, "ev", "b"), ErrUnavailable)

	// Workers keep ticking into the outage: every tick fails, nobody in.
	for i := 0; i < 3; i++ {
		s.ticker.Cycle(ctx)
		_, ok := s.ticker.TickEvent(ctx, "ev")
		require.False(t, ok)
	}
	require.Positive(t, counterValue(t, s.reg, "presenced_waitingroom_ticks_total", "result", "error"))
	require.Zero(t, counterValue(t, s.reg, "presenced_waitingroom_admitted_total", "", ""))

	pr.start()

	testenv.Eventually(t, 10*time.Second, func() bool {
		code, _ := s.call(t, http.MethodGet, "/v1/waitingroom/ev/status", "c", nil, &a)
		return code == http.StatusOK
	}, "status answers again")
	require.EqualValues(t, 1, *a.Position, "c is still at the head")
	code, _ = s.call(t, http.MethodGet, "/v1/waitingroom/ev/status", "a2", nil, &a)
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 2, *a.Position, "and a2 behind")
	code, _ = s.call(t, http.MethodPost, "/v1/waitingroom/ev/join", "d", nil, &a)
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 3, *a.Position, "new joiners queue behind")
	require.Zero(t, s.activeCount(t, "ev"), "nobody was admitted during the outage")
	require.ErrorIs(t, v.Verify(ctx, bPass, "ev", "b"), ErrNotAdmitted, "b's lease was released before")

	var order []string
	for len(order) < 3 {
		r := s.tick(t, "ev")
		order = append(order, r.Admitted...)
		for _, u := range r.Admitted {
			require.NoError(t, v.Release(ctx, "ev", u))
		}
	}
	require.Equal(t, []string{"c", "a2", "d"}, order)
}
