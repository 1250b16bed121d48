package presence

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/internal/promlabels"
	"github.com/presenced/presenced/web/wire"
)

type metrics struct {
	connections   prometheus.Gauge
	sessions      *sessionCollector
	subjects      prometheus.Gauge
	changes       *prometheus.CounterVec
	pushLatency   prometheus.Histogram
	queueDepth    prometheus.Histogram
	resyncs       prometheus.Counter
	slowDrops     prometheus.Counter
	leaseLost     prometheus.Counter
	protocolErrs  *prometheus.CounterVec
	notifications prometheus.Counter

	streamPending *prometheus.GaugeVec
	streamLag     *prometheus.GaugeVec
	streamOldest  *prometheus.GaugeVec
	tracked       prometheus.Gauge
	expired       *prometheus.CounterVec
	cleanups      *prometheus.CounterVec
	reclaimed     *prometheus.CounterVec
	deadLetters   *prometheus.CounterVec

	webhookBatches *prometheus.CounterVec
	webhookDropped prometheus.Counter
	auditDropped   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_presence_connections",
			Help: "Open presence WebSocket connections of this process.",
		}),
		sessions: &sessionCollector{desc: prometheus.NewDesc("presenced_presence_sessions",
			"Live sessions held by this process, by device state (active: interaction reported within the idle threshold; inactive).",
			[]string{"state"}, nil)},
		subjects: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_presence_followed_subjects",
			Help: "Users followed by connections of this process (one hub subscription each).",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_presence_status_changes_total",
			Help: "User status changes written and published by this process, by new status.",
		}, []string{"status"}),
		pushLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "presenced_presence_push_latency_seconds",
			Help:    "From a status change being published to its frame being queued to a follower's connection.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .075, .1, .25, .5, 1, 2.5},
		}),
		queueDepth: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "presenced_presence_send_queue_depth",
			Help:    "Messages waiting in a connection's send queue when an update frame is queued.",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128},
		}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_presence_resyncs_total",
			Help: "Full snapshots sent to connections that fell behind and caught up.",
		}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_presence_gateway_lease_lost_total",
			Help: "Times this gateway found its liveness lease reaped (it stalled past presence.gateway_lease) and reconnected its clients.",
		}),
		slowDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_presence_slow_client_drops_total",
			Help: "Connections dropped because they stayed behind for presence.slow_client_timeout.",
		}),
		protocolErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_presence_protocol_errors_total",
			Help: "Error events sent to clients, by code.",
		}, []string{"code"}),
		notifications: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_presence_notifications_total",
			Help: "One-time online notifications fired.",
		}),
		streamPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "presenced_presence_stream_pending",
			Help: "Entries delivered to a consumer and not yet acknowledged, summed over shards, by stream.",
		}, []string{"stream"}),
		streamLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "presenced_presence_stream_lag",
			Help: "Entries not yet delivered to the consumer group, summed over shards, by stream.",
		}, []string{"stream"}),
		streamOldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "presenced_presence_stream_oldest_pending_seconds",
			Help: "Age of the oldest unacknowledged entry over all shards, by stream.",
		}, []string{"stream"}),
		tracked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_presence_tracked_sessions",
			Help: "Sessions with a liveness deadline (live and in grace), over all shards.",
		}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_presence_expired_sessions_total",
			Help: "Sessions the scheduler found past their deadline, by reason (timeout: pings stopped; closed: grace after a close ended).",
		}, []string{"reason"}),
		cleanups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_presence_cleanups_total",
			Help: "Inactive events handled by the cleanup consumer, by reason and outcome (ended: the session was removed; absent: already gone).",
		}, []string{"reason", "outcome"}),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_presence_stream_reclaimed_total",
			Help: "Entries claimed from a stalled consumer, by stream.",
		}, []string{"stream"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_presence_dead_letters_total",
			Help: "Entries moved to the dead-letter stream, by stream.",
		}, []string{"stream"}),
		webhookBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_presence_webhook_batches_total",
			Help: "Webhook batch attempts, by outcome (delivered, retry, dead_letter).",
		}, []string{"outcome"}),
		webhookDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_presence_webhook_dropped_total",
			Help: "Status changes not queued for webhooks because the in-process queue was full.",
		}),
		auditDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_presence_audit_dropped_total",
			Help: "Audit records lost: the in-process queue was full, or PostgreSQL refused them.",
		}),
	}
	for _, c := range []prometheus.Collector{
		m.connections, m.sessions, m.subjects, m.changes, m.pushLatency, m.queueDepth, m.resyncs,
		m.slowDrops, m.protocolErrs, m.notifications, m.streamPending, m.streamLag, m.streamOldest,
		m.leaseLost, m.tracked, m.expired, m.cleanups, m.reclaimed, m.deadLetters, m.webhookBatches, m.webhookDropped,
		m.auditDropped,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every series alerts may use exists from the start, at zero.
	counters := func(v *prometheus.CounterVec) func(...string) { return func(lv ...string) { v.WithLabelValues(lv...) } }
	gauges := func(v *prometheus.GaugeVec) func(...string) { return func(lv ...string) { v.WithLabelValues(lv...) } }
	streams := []string{"pings", "events", "changes"}
	promlabels.Init(counters(m.changes), []string{StatusOnline, StatusIdle, StatusOffline, "manual"})
	promlabels.Init(counters(m.protocolErrs), []string{wire.CodeBadJSON, wire.CodeUnsupportedVersion, wire.CodeUnknownEvent,
		wire.CodeBadPayload, wire.CodeRateLimited, wire.CodeForbidden, wire.CodeLimitExceeded, wire.CodeUnavailable,
		CodeMessageTooLarge, CodeInvalidStatus, CodeInvalidTransition, CodeUnauthorized, "busy"})
	for _, v := range []*prometheus.GaugeVec{m.streamPending, m.streamLag, m.streamOldest} {
		promlabels.Init(gauges(v), []string{"pings", "events"})
	}
	promlabels.Init(counters(m.expired), []string{"timeout", "closed"})
	promlabels.Init(counters(m.cleanups), []string{"timeout", "closed", "disconnect"}, []string{"ended", "absent"})
	promlabels.Init(counters(m.reclaimed), streams)
	promlabels.Init(counters(m.deadLetters), streams)
	promlabels.Init(counters(m.webhookBatches), []string{"delivered", "retry", "dead_letter"})
	return m, nil
}

// sessionCollector counts the gateway's sessions when scraped.
type sessionCollector struct {
	desc  *prometheus.Desc
	count atomic.Pointer[func() (active, inactive int)]
}

func (c *sessionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *sessionCollector) Collect(ch chan<- prometheus.Metric) {
	// Before the gateway runs (or in a process without one) this process
	// holds no session: say 0 rather than nothing.
	var active, inactive int
	if f := c.count.Load(); f != nil {
		active, inactive = (*f)()
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(active), "active")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(inactive), "inactive")
}
