package waitingroom

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/internal/promlabels"
)

// metrics of the waiting room. Figures of the line are sums over the events
// this process ticks (sum them over workers); no label carries an event or
// user id.
type metrics struct {
	queued       prometheus.Gauge
	active       prometheus.Gauge
	capacity     prometheus.Gauge
	events       prometheus.Gauge
	admitted     prometheus.Counter
	abandoned    prometheus.Counter
	tickAdmits   prometheus.Histogram
	tickAbandons prometheus.Histogram
	tickDuration prometheus.Histogram
	ticks        *prometheus.CounterVec
	leaseChanges *prometheus.CounterVec
	wait         prometheus.Histogram
	requests     *prometheus.CounterVec
	storeErrors  *prometheus.CounterVec
	passes       prometheus.Counter
	sockets      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	perTick := []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000}
	m := &metrics{
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_waitingroom_queue_depth",
			Help: "Entries in line, over the events this worker ticked last.",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_waitingroom_active_leases",
			Help: "Live checkout leases, over the events this worker ticked last.",
		}),
		capacity: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_waitingroom_capacity",
			Help: "Configured capacity, over the events this worker ticked last (compare with active_leases).",
		}),
		events: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_waitingroom_ticked_events",
			Help: "Events this worker ticked in its last period.",
		}),
		admitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_waitingroom_admitted_total",
			Help: "People admitted into checkout.",
		}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_waitingroom_abandoned_total",
			Help: "Entries dropped because their heartbeat went silent.",
		}),
		tickAdmits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "presenced_waitingroom_tick_admissions",
			Help:    "Admissions per tick of one event.",
			Buckets: perTick,
		}),
		tickAbandons: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "presenced_waitingroom_tick_abandonments",
			Help:    "Abandoned entries removed per tick of one event.",
			Buckets: perTick,
		}),
		tickDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "presenced_waitingroom_tick_duration_seconds",
			Help:    "Time of one event's admission tick (one script call).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12),
		}),
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_waitingroom_ticks_total",
			Help: "Ticks by outcome: ok, paused, closed (before the open time), draw, skip (another worker ticked), gone, error.",
		}, []string{"result"}),
		leaseChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_waitingroom_tick_lease_changes_total",
			Help: "Tick shard leases this worker acquired or lost.",
		}, []string{"change"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "presenced_waitingroom_join_to_admit_seconds",
			Help:    "Time from joining the line to admission (to one tick; lottery cohorts from the open time).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_waitingroom_requests_total",
			Help: "Join, status and leave requests by outcome.",
		}, []string{"op", "result"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_waitingroom_store_errors_total",
			Help: "Redis failures, each answered by failing closed.",
		}, []string{"op"}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_waitingroom_passes_issued_total",
			Help: "Admission passes signed.",
		}),
		sockets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_waitingroom_sockets",
			Help: "Waiting-room sockets open on this process.",
		}),
	}
	for _, c := range []prometheus.Collector{
		m.queued, m.active, m.capacity, m.events, m.admitted, m.abandoned, m.tickAdmits, m.tickAbandons,
		m.tickDuration, m.ticks, m.leaseChanges, m.wait, m.requests, m.storeErrors, m.passes, m.sockets,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("waitingroom: metrics: %w", err)
		}
	}
	// Every series alerts may use exists from the start, at zero.
	counters := func(v *prometheus.CounterVec) func(...string) { return func(lv ...string) { v.WithLabelValues(lv...) } }
	promlabels.Init(counters(m.ticks), []string{"ok", "skip", "gone", "paused", "closed", "draw", "error"})
	promlabels.Init(counters(m.leaseChanges), []string{"acquired", "lost"})
	promlabels.Init(counters(m.requests), []string{"join", "status"}, []string{StateQueued, StateAdmitted, StateAbsent, "no_room", "unavailable"})
	promlabels.Init(counters(m.requests), []string{"leave"}, []string{"ok", "no_room", "unavailable"})
	promlabels.Init(counters(m.storeErrors), []string{"join", "status", "leave", "settings", "stats", "delete", "list",
		"positions", "draw", "events", "tick", "tick_lease"})
	return m, nil
}
