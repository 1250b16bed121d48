package web

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// logAccess writes one line per request. At info only what needs a look:
// server errors (warn), client errors a person may be puzzling over, and
// requests slower than slow. Every other request, rate-limit refusals
// included (a flood of them is the limiter doing its job, counted in
// metrics), is logged at debug: at info a busy server would write a line
// per request.
func (m *edge) logAccess(c echo.Context, rid, route string, status int, took time.Duration, realtime bool) {
	level := accessLevel(route, status, took, m.slow, realtime)
	req := c.Request()
	if !m.log.Enabled(req.Context(), level) {
		return
	}
	m.log.LogAttrs(req.Context(), level, "http",
		slog.String("method", req.Method),
		slog.String("route", route),
		slog.String("path", req.URL.Path),
		slog.Int("status", status),
		slog.Duration("duration", took),
		slog.Int64("bytes", c.Response().Size),
		slog.String("ip", c.RealIP()),
		slog.String("request_id", rid),
	)
}

func accessLevel(route string, status int, took, slow time.Duration, realtime bool) slog.Level {
	switch {
	case route == "/healthz" || route == "/readyz" || route == "/metrics":
		// Probes come every few seconds; a failed round of readiness
		// checks is logged once by the checks themselves.
		return slog.LevelDebug
	case status >= 500:
		return slog.LevelWarn
	case status == http.StatusTooManyRequests || status == http.StatusNotFound:
		// The two a flood or a scanner produces by the thousand (rate
		// limits, unknown ids and paths); the metrics count them.
		return slog.LevelDebug
	case status >= 400:
		return slog.LevelInfo
	case slow > 0 && took >= slow && !realtime:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
