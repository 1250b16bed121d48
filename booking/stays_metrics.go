package booking

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/internal/promlabels"
)

// stayMetrics are the stays' own signals; reservations ended, replays and
// lease failures count with the seats' (metrics.go). No hotel ids as labels.
type stayMetrics struct {
	holdOutcomes   *prometheus.CounterVec
	holdDuration   prometheus.Histogram
	lockWait       prometheus.Histogram
	searchCache    *prometheus.CounterVec
	searchDuration prometheus.Histogram
}

func newStayMetrics(reg prometheus.Registerer) (*stayMetrics, error) {
	fast := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	m := &stayMetrics{
		holdOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_booking_stay_hold_outcomes_total",
			Help: "Stay hold requests by HTTP status (a 409 is a correct answer, not an SLO failure).",
		}, []string{"code"}),
		holdDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "presenced_booking_stay_hold_duration_seconds", Help: "Stay hold request latency.", Buckets: fast,
		}),
		lockWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "presenced_booking_night_lock_wait_seconds", Help: "Time to lock a stay's room nights.", Buckets: fast,
		}),
		searchCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_booking_search_cache_total",
			Help: "Hotel search availability reads by result: hit, filled (this request queried), direct (Redis down).",
		}, []string{"result"}),
		searchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "presenced_booking_search_duration_seconds", Help: "Hotel search latency.", Buckets: fast,
		}),
	}
	for _, c := range []prometheus.Collector{m.holdOutcomes, m.holdDuration, m.lockWait, m.searchCache, m.searchDuration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	promlabels.Init(func(lv ...string) { m.holdOutcomes.WithLabelValues(lv...) }, holdCodes)
	promlabels.Init(func(lv ...string) { m.searchCache.WithLabelValues(lv...) }, []string{"hit", "filled", "direct"})
	return m, nil
}
