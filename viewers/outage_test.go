package viewers

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// Redis stops mid-test: counts are served stale, heartbeats fail fast
// (503 without waiting on Redis), and everything recovers by itself when
// Redis returns.
func TestRedisOutageServesStaleAndRecovers(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	opt, err := redis.ParseURL(srv.URL)
	require.NoError(t, err)
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	opt.MaxRetries = -1
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	e := newEnv(t, envOpts{rdb: rdb, cfg: func(v *cfgViewers) { v.SessionRate, v.SessionBurst = 1000, 1000 }})

	c := e.client()
	require.Equal(t, http.StatusNoContent, c.heartbeat("outage").StatusCode)
	require.Equal(t, http.StatusNoContent, e.client().heartbeat("outage").StatusCode)
	e.flush()
	before := e.countOf("outage")
	require.Equal(t, int64(2), before.Count)
	require.False(t, before.Stale)

	require.NoError(t, srv.Stop())
	time.Sleep(2 * e.cfg.CountCacheTTL)
	stale := e.countOf("outage")
	require.True(t, stale.Stale, "the last known count, marked stale")
	require.Equal(t, int64(2), stale.Count)
	resp, body := e.get("/v1/viewers/outage/count", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `"stale":true`)
	// Never-seen hotel while Redis is down: nothing to serve.
	resp, _ = e.get("/v1/viewers/unknown-during-outage/count", nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))

	// The breaker opens: further reads do not touch Redis.
	testenv.Eventually(t, 5*time.Second, func() bool {
		e.countOf("outage")
		return e.mod.counter.breaker.current() == breakerOpen
	}, "the breaker opened")

	// Heartbeats: the next flush fails twice, the loss is counted, and
	// heartbeats are refused at once from then on.
	testenv.Eventually(t, 5*time.Second, func() bool {
		return c.heartbeat("outage").StatusCode == http.StatusServiceUnavailable
	}, "heartbeats fail fast")
	start := time.Now()
	resp = c.heartbeat("outage")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Less(t, time.Since(start), opt.ReadTimeout, "refused without waiting on Redis")
	require.Greater(t, e.metric(e.mod.m.lost), float64(0), "lost heartbeats are counted, never silent")
	require.Equal(t, float64(1), e.metric(e.mod.m.flushFailures.WithLabelValues("lost")))
	require.Equal(t, float64(0), e.metric(e.mod.m.writeHealthy))

	// Redis returns on the same port.
	testenv.RestartRedisServer(t, srv.URL)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return c.heartbeat("outage").StatusCode == http.StatusNoContent
	}, "heartbeats are accepted again")
	require.Equal(t, http.StatusNoContent, e.client().heartbeat("outage").StatusCode)
	e.flush()
	testenv.Eventually(t, 10*time.Second, func() bool {
		got := e.countOf("outage")
		return !got.Stale && got.Count == 2 // the restarted Redis is empty: two sessions since
	}, "counts are fresh again")
	require.Equal(t, breakerClosed, e.mod.counter.breaker.current())
	require.Greater(t, e.metric(e.mod.m.staleServes), float64(0))
}

// A slow Redis (past count_timeout) is treated like a failed one.
func TestSlowCountServesStale(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: func(v *cfgViewers) { v.CountTimeout = 50 * time.Millisecond }})
	addAll(t, e, "slow", hashes(3, 5), baseTier)
	require.Equal(t, int64(5), e.countOf("slow").Count)
	// The store answers only after 10 s: without the timeout the read would
	// wait for it, so an answer well before that can only come from the
	// timeout, however loaded the machine.
	e.mod.counter.rdb.AddHook(slowHook{delay: 10 * time.Second})
	time.Sleep(2 * e.cfg.CountCacheTTL) // let the cached count expire
	start := time.Now()
	got := e.countOf("slow")
	require.True(t, got.Stale)
	require.Equal(t, int64(5), got.Count)
	require.Less(t, time.Since(start), 5*time.Second, "the timeout cut the read short")
}

type slowHook struct{ delay time.Duration }

func (slowHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "pfcount" {
			select {
			case <-time.After(h.delay):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}
func (slowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
