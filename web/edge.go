package web

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/web/socket"
)

// edge is what every request passes through before and after its handler,
// outermost first: its request id, the access log and the latency metric,
// panic recovery, and the body's deadline and size limit. It is one
// middleware, not six: echo wraps every middleware around the handler
// again on every request (a closure each), and each of the six read the
// clock, the status or the request on its own. At tens of thousands of
// heartbeats a second per core that was a tenth of the server's work.
type edge struct {
	log         *slog.Logger
	slow        time.Duration
	metrics     *httpMetrics
	bodyTimeout time.Duration
	bodyLimit   int64 // 0: no limit
}

func (m *edge) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		req := c.Request()
		rid := HeaderValue(req.Header, echo.HeaderXRequestID)
		if rid == "" {
			rid = requestID()
		}
		c.Response().Header()[echo.HeaderXRequestID] = []string{rid}
		err := m.guard(next, c)
		if err != nil {
			// Answered here, not by echo after the middleware returns, so
			// the line and the metric see the error body's bytes and status.
			c.Error(err)
		}
		took := time.Since(start)
		status := c.Response().Status
		if err != nil && !c.Response().Committed {
			status = statusOf(err)
		}
		// A stream's duration is its lifetime, not its latency.
		realtime := c.Get(socket.RealtimeKey) != nil
		route := c.Path()
		if !realtime {
			m.metrics.observe(req.Method, route, status, took)
		}
		m.logAccess(c, rid, route, status, took, realtime)
		return nil
	}
}

// guard runs the handler with the body's limits, and answers a panic with
// a 500 (the error handler's response) and an error log with every
// goroutine's stack, as echo's Recover did.
func (m *edge) guard(next echo.HandlerFunc, c echo.Context) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if r == http.ErrAbortHandler {
			panic(r) // net/http's own way to abort a response
		}
		perr, ok := r.(error)
		if !ok {
			perr = fmt.Errorf("%v", r)
		}
		stack := make([]byte, 4<<10)
		stack = stack[:runtime.Stack(stack, true)]
		m.log.Error("panic in handler", "err", perr, "route", c.Path(), "stack", string(stack))
		c.Error(perr)
		err = nil
	}()
	req := c.Request()
	if req.Body != nil && req.Body != http.NoBody {
		if req.ContentLength != 0 {
			withBodyDeadline(c, m.bodyTimeout)
		}
		if m.bodyLimit > 0 {
			// Refused when read, not here: an operation that takes no body
			// ignores one (net/http discards or drops it), and answers as
			// documented rather than 413.
			req.Body = &limitedBody{ReadCloser: req.Body, left: m.bodyLimit, declared: req.ContentLength}
		}
	}
	return next(c)
}

// HeaderValue is the first value of a header named in canonical form,
// without Header.Get's canonicalization of the name (a hot path's saving).
func HeaderValue(h http.Header, canonical string) string {
	if v := h[canonical]; len(v) > 0 {
		return v[0]
	}
	return ""
}
