package web

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// BenchmarkMiddleware is what every request pays before and after its
// handler: request id, access log, metrics, recovery, body deadline and
// limit, and the client address from X-Forwarded-For behind a trusted
// proxy. The handler itself does nothing but answer 204, as a heartbeat
// does.
func BenchmarkMiddleware(b *testing.B) {
	cfg := config.Default()
	cfg.HTTP.TrustedProxies = []string{"127.0.0.1/32"}
	s, err := NewServer(cfg, prometheus.NewRegistry(), testenv.Logger())
	if err != nil {
		b.Fatal(err)
	}
	s.Echo.POST("/v1/bench/:id/beat", func(c echo.Context) error {
		if c.RealIP() == "" {
			b.Error("no client address")
		}
		return c.NoContent(http.StatusNoContent)
	})
	req := httptest.NewRequest(http.MethodPost, "/v1/bench/h1/beat", nil)
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("X-Forwarded-For", "100.64.7.9")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		clear(w.Header())
		s.Echo.ServeHTTP(w, req)
	}
	if w.Code != http.StatusNoContent {
		b.Fatalf("status %d", w.Code)
	}
}
