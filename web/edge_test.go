package web

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// What every request passes through: a request id (kept when the client
// sent one), a panic answered as a 500 in the error shape and logged with
// its stack, the body limit by Content-Length and while reading a chunked
// body, and one latency observation per request under its route.
func TestEveryRequestPassesTheEdge(t *testing.T) {
	t.Parallel()
	rec := &records{}
	cfg := config.Default()
	cfg.HTTP.BodyLimitBytes = 100
	reg := prometheus.NewRegistry()
	s, err := NewServer(cfg, reg, slog.New(rec))
	require.NoError(t, err)
	s.Echo.GET("/ok/:id", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	s.Echo.GET("/panic", func(echo.Context) error { panic("a bug") })
	s.Echo.POST("/read", func(c echo.Context) error {
		b, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.String(http.StatusOK, string(b))
	})
	ts := httptest.NewServer(s.Echo)
	t.Cleanup(ts.Close)

	resp := get(t, ts.URL+"/ok/1")
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Len(t, resp.Header.Get("X-Request-Id"), 32)
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/ok/2", nil)
	req.Header.Set("X-Request-Id", "from-the-proxy")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "from-the-proxy", resp.Header.Get("X-Request-Id"))

	resp, err = http.Get(ts.URL + "/panic")
	require.NoError(t, err)
	var body map[string]map[string]any
	require.NoError(t, jsonDecode(resp, &body))
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Equal(t, "internal", body["error"]["code"])
	rid := resp.Header.Get("X-Request-Id")
	require.NotEmpty(t, rid)
	var panics []slog.Record
	rec.mu.Lock()
	for _, r := range rec.all {
		if r.Message == "panic in handler" {
			panics = append(panics, r)
		}
	}
	rec.mu.Unlock()
	require.Len(t, panics, 1)
	attrs := map[string]string{}
	panics[0].Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	require.Equal(t, "a bug", attrs["err"])
	require.Equal(t, "/panic", attrs["route"])
	require.Contains(t, attrs["stack"], "goroutine")

	post := func(body io.Reader, length int64) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/read", body)
		req.ContentLength = length
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	exact := strings.Repeat("x", 100)
	code, got := post(strings.NewReader(exact), 100)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, exact, got)
	code, _ = post(strings.NewReader(exact+"x"), 101)
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "refused by its length")
	// A route that takes no body answers as it does without one: a body
	// it never reads is no reason for a 413 its contract does not have.
	req, _ = http.NewRequest(http.MethodGet, ts.URL+"/ok/3", strings.NewReader(exact+"x"))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "a body is ignored where none is taken")
	// A reader of unknown length goes chunked: refused as it is read.
	code, got = post(io.MultiReader(strings.NewReader(exact), strings.NewReader("x")), -1)
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "refused while read")
	require.Contains(t, got, "body_too_large")
	code, got = post(io.MultiReader(strings.NewReader(exact[:50]), strings.NewReader(exact[50:])), -1)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, exact, got)

	// A line is written just after its response: the client may be first.
	testenv.Eventually(t, 10*time.Second, func() bool { return len(rec.access(slog.LevelDebug)) == 8 }, "a line per request")
	lines := rec.access(slog.LevelDebug)
	require.Equal(t, rid, lines[2]["request_id"])
	require.EqualValues(t, 500, lines[2]["status"])
	require.Equal(t, "/panic", lines[2]["route"])

	hist := "presenced_http_request_duration_seconds"
	require.Equal(t, 4, testutil.CollectAndCount(reg, hist), "four series")
	count := func(method, route, code string) uint64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != hist {
				continue
			}
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, lp := range m.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				if l["method"] == method && l["route"] == route && l["code"] == code {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
		return 0
	}
	require.EqualValues(t, 3, count("GET", "/ok/:id", "204"))
	require.EqualValues(t, 1, count("GET", "/panic", "500"))
	require.EqualValues(t, 2, count("POST", "/read", "413"))
	require.EqualValues(t, 2, count("POST", "/read", "200"))
}
