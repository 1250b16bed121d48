package web

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/web/wire"
)

type httpMetrics struct {
	duration *prometheus.HistogramVec
	// observers holds duration's children by series, bound on first use:
	// WithLabelValues formats the status and hashes three labels under a
	// lock on every request. As many entries as series (routes × methods
	// × statuses seen).
	observers sync.Map // seriesKey -> prometheus.Observer
}

type seriesKey struct {
	method, route string
	code          int
}

func (m *httpMetrics) observer(method, route string, code int) prometheus.Observer {
	k := seriesKey{method: method, route: route, code: code}
	if o, ok := m.observers.Load(k); ok {
		return o.(prometheus.Observer)
	}
	o := m.duration.WithLabelValues(method, route, strconv.Itoa(code))
	m.observers.Store(k, o)
	return o
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "presenced_http_request_duration_seconds",
			Help:    "HTTP request latency by route template (not raw path), method and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method", "route", "code"}),
	}
	if err := reg.Register(m.duration); err != nil {
		return nil, err
	}
	return m, nil
}

// observe records one request's latency; an unmatched path is one series,
// not one per probe.
func (m *httpMetrics) observe(method, route string, code int, took time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	m.observer(method, route, code).Observe(took.Seconds())
}

func statusOf(err error) int {
	var apiErr *wire.Error
	var httpErr *echo.HTTPError
	switch {
	case errors.As(err, &apiErr):
		return apiErr.Status
	case errors.As(err, &httpErr):
		return httpErr.Code
	}
	return 500
}
