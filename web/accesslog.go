package web

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// accessLog writes one line per request. At info only what needs a look:
// server errors (warn), client errors a person may be puzzling over, and
// requests slower than slow. Every other request, rate-limit refusals
// included (a flood of them is the limiter doing its job, counted in
// metrics), is logged at debug: at info a busy server would write a line
// per request.
func accessLog(log *slog.Logger, slow time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			took := time.Since(start)
			status := c.Response().Status
			if err != nil {
				status = statusOf(err)
			}
			// A stream's duration is its lifetime, not its latency.
			realtime := c.Get(realtimeKey) != nil
			level := accessLevel(c.Path(), status, took, slow, realtime)
			if !log.Enabled(c.Request().Context(), level) {
				return err
			}
			log.LogAttrs(c.Request().Context(), level, "http",
				slog.String("method", c.Request().Method),
				slog.String("route", c.Path()),
				slog.String("path", c.Request().URL.Path),
				slog.Int("status", status),
				slog.Duration("duration", took),
				slog.Int64("bytes", c.Response().Size),
				slog.String("ip", c.RealIP()),
				slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)),
			)
			return err
		}
	}
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
