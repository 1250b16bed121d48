package web

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/sync/singleflight"
)

// Readiness timing. A probe must answer quickly even while a store hangs:
// each check gets checkTimeout (a dead Redis otherwise costs the client's
// dial timeout times its retries), and every probe arriving while a round
// of checks runs, or within readyCacheTTL after it, gets that round's
// answer, so a load balancer probing many times a second never stacks up
// pings on a store that is already struggling.
const (
	checkTimeout  = time.Second
	readyCacheTTL = time.Second
)

// readiness runs the registered checks at most one round at a time.
type readiness struct {
	log      *slog.Logger
	timeout  time.Duration
	cacheTTL time.Duration
	flight   singleflight.Group

	mu       sync.Mutex
	checks   map[string]Check
	optional map[string]bool
	last     readyReport
	lastAt   time.Time
}

type readyReport struct {
	ready   bool
	results map[string]string
}

func newReadiness(log *slog.Logger) *readiness {
	return &readiness{log: log, timeout: checkTimeout, cacheTTL: readyCacheTTL, checks: map[string]Check{}, optional: map[string]bool{}}
}

func (r *readiness) add(name string, check Check, optional bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks[name] = check
	r.optional[name] = optional
	r.lastAt = time.Time{} // a new check is answered by the next probe
}

// report returns a recent round's result or runs a new round, sharing it
// with every probe that asks meanwhile.
func (r *readiness) report() readyReport {
	r.mu.Lock()
	if !r.lastAt.IsZero() && time.Since(r.lastAt) < r.cacheTTL {
		rep := r.last
		r.mu.Unlock()
		return rep
	}
	r.mu.Unlock()
	v, _, _ := r.flight.Do("ready", func() (any, error) {
		rep := r.run()
		r.mu.Lock()
		r.last, r.lastAt = rep, time.Now()
		r.mu.Unlock()
		return rep, nil
	})
	return v.(readyReport)
}

// run checks every dependency in parallel, each within the timeout. It
// does not use a probe's context: the round is shared, and one impatient
// client must not fail it for the others.
func (r *readiness) run() readyReport {
	r.mu.Lock()
	names := make([]string, 0, len(r.checks))
	checks := make([]Check, 0, len(r.checks))
	for n := range r.checks {
		names = append(names, n)
	}
	sort.Strings(names)
	optional := make([]bool, len(names))
	for i, n := range names {
		checks = append(checks, r.checks[n])
		optional[i] = r.optional[n]
	}
	r.mu.Unlock()

	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, check := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
			defer cancel()
			errs[i] = check(ctx)
		}()
	}
	wg.Wait()
	rep := readyReport{ready: true, results: make(map[string]string, len(names))}
	for i, n := range names {
		rep.results[n] = "ok"
		switch {
		case errs[i] == nil:
		case optional[i]:
			r.log.Warn("readiness check failed; the process works without it", "check", n, "err", errs[i])
			rep.results[n] = "degraded"
		default:
			r.log.Warn("readiness check failed", "check", n, "err", errs[i])
			rep.results[n] = "unavailable"
			rep.ready = false
		}
	}
	return rep
}

func (s *Server) readyz(c echo.Context) error {
	if s.draining.Load() {
		// sockets: the WebSocket and SSE connections still open, so
		// `presenced drain` knows when they have all moved away.
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "draining", "sockets": s.Sockets.Live()})
	}
	rep := s.ready.report()
	if !rep.ready {
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "unready", "checks": rep.results})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "ready", "checks": rep.results})
}
