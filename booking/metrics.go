package booking

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/internal/promlabels"
)

// metrics are booking's Prometheus collectors, shared by its parts.
type metrics struct {
	holdOutcomes    *prometheus.CounterVec
	holdDuration    prometheus.Histogram
	lockWait        prometheus.Histogram
	hintRejections  prometheus.Counter
	hintErrors      prometheus.Counter
	reclaimed       *prometheus.CounterVec
	cache           *prometheus.CounterVec
	fillContention  prometheus.Counter
	idempotentHits  prometheus.Counter
	leaseExtendFail prometheus.Counter
	// Holds written per statement, and batches refused as a whole (their
	// holds then written one by one).
	writeBatch        prometheus.Histogram
	writeBatchRefused prometheus.Counter
	readBatch         prometheus.Histogram
	readBatchFailed   prometheus.Counter
}

// newMetrics registers booking's metrics on reg.
// holdCodes are the statuses a hold answers, the label values of the hold
// outcome counters.
var holdCodes = []string{"201", "400", "401", "403", "404", "409", "413", "422", "429", "500", "503"}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	fast := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	m := &metrics{
		holdOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_booking_hold_outcomes_total",
			Help: "Hold requests by HTTP status (a 409 is a correct answer, not an SLO failure).",
		}, []string{"code"}),
		holdDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "presenced_booking_hold_duration_seconds", Help: "Hold request latency.", Buckets: fast,
		}),
		lockWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "presenced_booking_seat_lock_wait_seconds", Help: "Time of a hold's write round trip: the cart's seat rows locked, written and committed.", Buckets: fast,
		}),
		hintRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_booking_hint_rejections_total",
			Help: "Holds refused by the Redis seat hints before touching PostgreSQL.",
		}),
		hintErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_booking_hint_errors_total", Help: "Seat hint calls that failed (Redis unreachable).",
		}),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_booking_reservations_ended_total",
			Help: "Reservations released, by how (expired by the worker, expired inline, cancelled).",
		}, []string{"how"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_booking_seatmap_cache_total",
			Help: "Seat-map reads by result: hit, filled (this request queried), waited (another filled), direct (Redis down).",
		}, []string{"result"}),
		fillContention: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_booking_seatmap_fill_contention_total",
			Help: "Seat-map misses that found the fill lease taken.",
		}),
		idempotentHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_booking_idempotent_replays_total", Help: "Requests answered from a stored response.",
		}),
		leaseExtendFail: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_booking_lease_extend_failures_total",
			Help: "Committed holds whose admission lease could not be extended.",
		}),
		writeBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "presenced_booking_hold_write_batch_size", Help: "Holds written together in one commit (named holds: one statement; best-available holds: one pick and one write).",
			Buckets: []float64{1, 2, 4, 8, 16},
		}),
		writeBatchRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_booking_hold_write_batches_refused_total",
			Help: "Batches of holds refused as a whole (a seat, key or checkout taken since read, a lock wait); their holds were then written one by one.",
		}),
		readBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "presenced_booking_hold_read_batch_size", Help: "Holds read together in one round trip.",
			Buckets: []float64{1, 2, 4, 8, 16},
		}),
		readBatchFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_booking_hold_read_batches_failed_total",
			Help: "Batches of hold reads that failed as a whole (a statement failed); their holds were then read one by one.",
		}),
	}
	for _, c := range []prometheus.Collector{m.holdOutcomes, m.holdDuration, m.lockWait, m.hintRejections, m.hintErrors,
		m.reclaimed, m.cache, m.fillContention, m.idempotentHits, m.leaseExtendFail, m.writeBatch, m.writeBatchRefused,
		m.readBatch, m.readBatchFailed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every series alerts may use exists from the start, at zero.
	counters := func(v *prometheus.CounterVec) func(...string) { return func(lv ...string) { v.WithLabelValues(lv...) } }
	promlabels.Init(counters(m.holdOutcomes), holdCodes)
	promlabels.Init(counters(m.reclaimed), []string{"inline", "expired", "cancelled"})
	promlabels.Init(counters(m.cache), []string{"hit", "filled", "waited", "direct"})
	return m, nil
}
