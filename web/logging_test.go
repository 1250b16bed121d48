package web

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/wire"
)

// records keeps every log record of a test, at every level.
type records struct {
	mu  sync.Mutex
	all []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// access returns the access-log lines at or above level.
func (r *records) access(level slog.Level) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, rec := range r.all {
		if rec.Message != "http" || rec.Level < level {
			continue
		}
		m := map[string]any{"level": rec.Level}
		rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
		out = append(out, m)
	}
	return out
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// Under load the access log at info stays quiet: successes and rate-limit
// refusals are debug lines, while errors a person must see still show.
func TestAccessLogAtInfoKeepsToErrorsAndSlowRequests(t *testing.T) {
	t.Parallel()
	rec := &records{}
	// Slowness has its own test: a loaded machine must not make one of
	// these 2,000 requests "slow" and so logged at info.
	b := setupLogged(t, func(c *config.Config) { c.HTTP.SlowRequest = time.Hour }, slog.New(rec))
	e := b.srv.Echo
	e.GET("/ok", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	e.GET("/limited", func(c echo.Context) error {
		return wire.Errorf(http.StatusTooManyRequests, "rate_limited", "slow down")
	})
	e.GET("/unknown/:id", func(c echo.Context) error { return wire.Errorf(http.StatusNotFound, "not_found", "no such thing") })
	e.GET("/denied", func(c echo.Context) error { return wire.Errorf(http.StatusForbidden, "forbidden", "no") })
	e.GET("/boom", func(c echo.Context) error { return errors.New("a bug") })

	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 250; i++ {
				path := "/ok"
				switch i % 4 {
				case 0:
					path = "/limited"
				case 1:
					path = "/unknown/x"
				}
				resp, err := http.Get(b.url + path)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	// A line is written just after its response: the client may be first.
	testenv.Eventually(t, 10*time.Second, func() bool { return len(rec.access(slog.LevelDebug)) == 2000 }, "every request is logged at debug")
	require.Empty(t, rec.access(slog.LevelInfo), "2,000 successes, rate-limit refusals and unknown ids write nothing at info")

	get(t, b.url+"/denied")
	get(t, b.url+"/boom")
	get(t, b.url+"/healthz")
	testenv.Eventually(t, 10*time.Second, func() bool { return len(rec.access(slog.LevelDebug)) == 2003 }, "three more lines")
	lines := rec.access(slog.LevelInfo)
	require.Len(t, lines, 2)
	require.EqualValues(t, 403, lines[0]["status"])
	require.Equal(t, slog.LevelInfo, lines[0]["level"])
	require.EqualValues(t, 500, lines[1]["status"])
	require.Equal(t, slog.LevelWarn, lines[1]["level"])
}

func TestSlowRequestsAreLoggedAtInfo(t *testing.T) {
	t.Parallel()
	rec := &records{}
	b := setupLogged(t, func(c *config.Config) { c.HTTP.SlowRequest = time.Nanosecond }, slog.New(rec))
	b.srv.Echo.GET("/ok", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	get(t, b.url+"/ok")
	testenv.Eventually(t, 10*time.Second, func() bool { return len(rec.access(slog.LevelDebug)) == 1 }, "the request is logged")
	lines := rec.access(slog.LevelInfo)
	require.Len(t, lines, 1, "slower than http.slow_request")
	require.EqualValues(t, 204, lines[0]["status"])

	c, _, err := dial(t, b.url, nil)
	require.NoError(t, err)
	<-b.conn
	require.NoError(t, c.Close())
	testenv.Eventually(t, 10*time.Second, func() bool { return len(rec.access(slog.LevelDebug)) == 2 }, "the socket's line is written")
	// A socket's lifetime is not a slow request.
	require.Len(t, rec.access(slog.LevelInfo), 1)
}

// A WebSocket upgrade is logged as what it is, 101; refused handshakes
// answer the JSON error shape with their 4xx and are logged with it.
func TestHandshakeRefusalsAnswerTheErrorShape(t *testing.T) {
	t.Parallel()
	rec := &records{}
	b := setupLogged(t, func(c *config.Config) { c.Realtime.AllowedOrigins = []string{"https://app.example"} }, slog.New(rec))

	c, _, err := dial(t, b.url, nil)
	require.NoError(t, err)
	<-b.conn
	require.NoError(t, c.Close()) // this test handler returns when its socket ends
	testenv.Eventually(t, 10*time.Second, func() bool { return len(rec.access(slog.LevelDebug)) == 1 }, "the upgrade is logged")
	require.EqualValues(t, 101, rec.access(slog.LevelDebug)[0]["status"])

	_, resp, err := dial(t, b.url, http.Header{"Origin": {"https://evil.example"}})
	require.Error(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var body errorBody
	require.NoError(t, jsonDecode(resp, &body))
	require.Equal(t, "forbidden", body.Error["code"])
	require.Contains(t, body.Error["message"], "https://evil.example")

	resp, err = http.Get(b.url + "/ws")
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "websocket", resp.Header.Get("Upgrade"))
	body = errorBody{}
	require.NoError(t, jsonDecode(resp, &body))
	require.Equal(t, "bad_request", body.Error["code"])
	require.Contains(t, body.Error["message"], "WebSocket")

	testenv.Eventually(t, 10*time.Second, func() bool { return len(rec.access(slog.LevelDebug)) == 3 }, "both refusals are logged")
	logged := rec.access(slog.LevelInfo)
	require.Len(t, logged, 2, "refusals are client errors at info")
	require.EqualValues(t, 403, logged[0]["status"])
	require.EqualValues(t, 400, logged[1]["status"])
	for _, r := range rec.all {
		require.NotEqual(t, "request failed", r.Message, "a refused handshake is not an internal error")
	}
}

// Probes share one round of checks: a hung store is pinged once, however
// many probes arrive, and each check gets a deadline.
func TestReadinessChecksDoNotPileUp(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.ready.cacheTTL = time.Hour // every probe below shares the one round
	var calls atomic.Int32
	release := make(chan struct{})
	var deadlineSet atomic.Bool
	b.srv.AddCheck("slow", func(ctx context.Context) error {
		calls.Add(1)
		_, ok := ctx.Deadline()
		deadlineSet.Store(ok)
		<-release
		return errors.New("down")
	})
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = get(t, b.url+"/readyz").StatusCode
		}()
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return calls.Load() == 1 }, "the round started")
	close(release)
	wg.Wait()
	require.EqualValues(t, 1, calls.Load())
	require.True(t, deadlineSet.Load(), "a check runs under a timeout")
	for _, c := range codes {
		require.Equal(t, http.StatusServiceUnavailable, c)
	}
}

// A check that never answers is cut off by its timeout.
func TestReadinessCheckTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.ready.timeout = 50 * time.Millisecond
	b.srv.AddCheck("hung", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	b.srv.AddCheck("fine", func(context.Context) error { return nil })
	resp, err := http.Get(b.url + "/readyz")
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, jsonDecode(resp, &body))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, map[string]any{"hung": "unavailable", "fine": "ok"}, body["checks"])
	require.True(t, strings.HasPrefix(body["status"].(string), "unready"))
}

// An error answer's line counts the bytes of its JSON body, written by the
// error handler: the line is for a person comparing it with what the client
// got.
func TestAccessLogCountsTheBytesOfErrorAnswers(t *testing.T) {
	t.Parallel()
	rec := &records{}
	b := setupLogged(t, nil, slog.New(rec))
	b.srv.Echo.GET("/denied", func(c echo.Context) error { return wire.Errorf(http.StatusForbidden, "forbidden", "no") })
	resp, err := http.Get(b.url + "/denied")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.NotEmpty(t, body)
	testenv.Eventually(t, 10*time.Second, func() bool { return len(rec.access(slog.LevelInfo)) == 1 }, "the refusal is logged")
	line := rec.access(slog.LevelInfo)[0]
	require.EqualValues(t, 403, line["status"])
	require.EqualValues(t, len(body), line["bytes"], "the line counts the JSON body the client got")
}

// Building a development server says nothing about X-Forwarded-For: the
// commands that build the app to seed or administer it serve nothing. The
// line comes when it serves.
func TestLoopbackTrustIsLoggedWhenServing(t *testing.T) {
	t.Parallel()
	rec := &records{}
	cfg := config.Default()
	require.True(t, cfg.SingleNode())
	s, err := NewServer(cfg, prometheus.NewRegistry(), slog.New(rec))
	require.NoError(t, err)
	said := func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, r := range rec.all {
			if strings.Contains(r.Message, "X-Forwarded-For") {
				return true
			}
		}
		return false
	}
	require.False(t, said(), "built, not serving: no line")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	testenv.Eventually(t, 10*time.Second, said, "serving: the line")
	require.NoError(t, s.Shutdown(context.Background()))
	require.NoError(t, <-done)
}
