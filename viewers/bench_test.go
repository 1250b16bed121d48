package viewers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/web/wire"
)

// BenchmarkHeartbeatHandler measures the whole heartbeat handler in steady
// state (cookie verified before, so served from the verification cache):
// limits, denylist, buffering and the metadata record; flushes run in the
// background as in production.
func BenchmarkHeartbeatHandler(b *testing.B) {
	e := newEnv(b, envOpts{cfg: func(v *cfgViewers) { v.MaxPending = 1 << 26 }})
	ec := echo.New()
	ec.HTTPErrorHandler = wire.ErrorHandler(e.mod.log)
	ec.POST("/v1/viewers/:hotel/heartbeat", answered(e.mod.heartbeat))
	const sessions = 20_000
	cookies := make([]string, sessions)
	for i := range cookies {
		s, err := e.mod.sessions.issue(time.Now())
		if err != nil {
			b.Fatal(err)
		}
		cookies[i] = e.cfg.CookieName + "=" + s.setCookie
		e.mod.sessions.verify(s.setCookie, time.Now()) // steady state: seen before
	}
	hotels := make([]string, 1000)
	for i := range hotels {
		hotels[i] = fmt.Sprintf("/v1/viewers/bench-%d/heartbeat", i)
	}
	var next atomic.Int64
	var bad atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := httptest.NewRecorder()
		for pb.Next() {
			i := next.Add(1)
			req := httptest.NewRequest(http.MethodPost, hotels[i%int64(len(hotels))], nil)
			req.RemoteAddr = fmt.Sprintf("198.18.%d.%d:4000", i%200, i%250)
			req.Header.Set("Cookie", cookies[i%sessions])
			w.Body.Reset()
			ec.ServeHTTP(w, req)
			if w.Code != http.StatusNoContent {
				bad.Add(1)
			}
		}
	})
	b.StopTimer()
	if n := bad.Load(); n > 0 {
		b.Logf("%d heartbeats not accepted (limits)", n)
	}
}

// BenchmarkHeartbeatNewSession measures a new session's first two
// heartbeats: the first issues and signs its cookie, the second presents it
// (remembered as signed here, so not verified back).
func BenchmarkHeartbeatNewSession(b *testing.B) {
	e := newEnv(b, envOpts{cfg: func(v *cfgViewers) { v.MaxPending = 1 << 26 }})
	ec := echo.New()
	ec.HTTPErrorHandler = wire.ErrorHandler(e.mod.log)
	ec.POST("/v1/viewers/:hotel/heartbeat", answered(e.mod.heartbeat))
	var next atomic.Int64
	var bad atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			path := fmt.Sprintf("/v1/viewers/bench-%d/heartbeat", i%1000)
			addr := fmt.Sprintf("198.18.%d.%d:4000", i%200, i%250)
			req := httptest.NewRequest(http.MethodPost, path, nil)
			req.RemoteAddr = addr
			w := httptest.NewRecorder()
			ec.ServeHTTP(w, req)
			cookie := sessionCookie(w.Result(), e.cfg.CookieName)
			req = httptest.NewRequest(http.MethodPost, path, nil)
			req.RemoteAddr = addr
			req.Header.Set("Cookie", e.cfg.CookieName+"="+cookie)
			w = httptest.NewRecorder()
			ec.ServeHTTP(w, req)
			if w.Code != http.StatusNoContent || sessionCookie(w.Result(), e.cfg.CookieName) != "" {
				bad.Add(1)
			}
		}
	})
	b.StopTimer()
	if n := bad.Load(); n > 0 {
		b.Logf("%d second heartbeats not accepted as the same session", n)
	}
}

// BenchmarkFlush10k writes one flush of 10,000 distinct session hashes for
// one hotel: one PFADD (plus its expiry the first time).
func BenchmarkFlush10k(b *testing.B) {
	e := newEnv(b, envOpts{parts: []string{"count"}})
	hs := hashes(5, 10_000)
	ctx := context.Background()
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bt := batch{key: pendingKey{hotel: "flush-bench", bucket: bucketOf(now, e.cfg.Bucket)}, hashes: append([]uint64(nil), hs...), adds: len(hs)}
		if err := e.mod.writer.write(ctx, []batch{bt}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(hs))*float64(b.N)/b.Elapsed().Seconds(), "hashes/s")
}

// BenchmarkCount64Shards recounts a hotel on 64 shards (two buckets, 128
// keys, one PFCOUNT) from Redis, bypassing the cache.
func BenchmarkCount64Shards(b *testing.B) {
	e := newEnv(b, envOpts{parts: []string{"count"}, cfg: func(v *cfgViewers) { v.Bucket = time.Hour; v.MaxPending = 1 << 22 }})
	tier := shardTier{Read: 64, Write: 64}
	setTier(b, e, "count-bench", tier)
	addAll(b, e, "count-bench", hashes(8, 100_000), tier)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.mod.counter.fetch("count-bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCountCached is the count endpoint's cache hit path.
func BenchmarkCountCached(b *testing.B) {
	e := newEnv(b, envOpts{parts: []string{"count"}, cfg: func(v *cfgViewers) { v.CountCacheTTL = time.Hour }})
	if _, err := e.mod.counter.get("cached-bench"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := e.mod.counter.get("cached-bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHeartbeatServed is one steady-state heartbeat through everything
// presenced runs above net/http: the shared middleware (request id, access
// log, metrics, recovery, body limits), echo's routing and the handler,
// with the headers a browser behind a trusted proxy sends. Requests are
// built beforehand so that ns/op and allocs/op are the server's own; run it
// at -cpu 1 for CPU per heartbeat.
func BenchmarkHeartbeatServed(b *testing.B) {
	e := newEnv(b, envOpts{cfg: func(v *cfgViewers) { v.MaxPending = 1 << 26 }})
	const sessions = 20_000
	reqs := make([]*http.Request, sessions)
	for i := range reqs {
		s, err := e.mod.sessions.issue(time.Now())
		if err != nil {
			b.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, fmt.Sprintf("/v1/viewers/bench-%d/heartbeat", i%1000), nil)
		req.RemoteAddr = "127.0.0.1:40000" // a trusted proxy: the network is X-Forwarded-For's
		req.Header.Set("Cookie", e.cfg.CookieName+"="+s.setCookie)
		req.Header.Set("User-Agent", "Mozilla/5.0 (bench)")
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("100.64.%d.%d", i/16%256, 1+i%16))
		req.Header.Set("Accept-Encoding", "gzip")
		reqs[i] = req
	}
	h := e.srv.Config.Handler
	w := &benchWriter{h: http.Header{}}
	var bad int
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := reqs[i%sessions]
		i++
		req.Body = http.NoBody
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, req)
		if w.code != http.StatusNoContent {
			bad++
		}
	}
	if bad > 0 {
		b.Fatalf("%d of %d heartbeats not accepted", bad, i)
	}
}

// benchWriter is a ResponseWriter that keeps nothing but the status.
type benchWriter struct {
	h    http.Header
	code int
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *benchWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}
