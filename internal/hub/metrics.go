package hub

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	topics         prometheus.Gauge
	localSubs      prometheus.Gauge
	connections    prometheus.Gauge
	upstreamOps    *prometheus.CounterVec
	upstreamErrors prometheus.Counter
	received       prometheus.Counter
	deliveries     prometheus.Counter
	resyncs        prometheus.Counter
	slowDrops      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		topics: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_hub_topics",
			Help: "Topics with local subscribers; each holds one upstream Redis subscription.",
		}),
		localSubs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_hub_local_subscriptions",
			Help: "Local (connection, topic) subscriptions.",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_hub_upstream_connections",
			Help: "Redis pub/sub connections held: one on a single node, at most one per node on a cluster.",
		}),
		upstreamOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_hub_upstream_commands_total",
			Help: "Subscribe and unsubscribe commands sent to Redis.",
		}, []string{"op"}),
		upstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_hub_upstream_errors_total",
			Help: "Subscribe or unsubscribe commands that failed to reach Redis, and pub/sub connections lost.",
		}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_hub_messages_received_total",
			Help: "Messages received from Redis.",
		}),
		deliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_hub_deliveries_total",
			Help: "Messages handed to local subscribers.",
		}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_hub_resyncs_total",
			Help: "Topics re-subscribed after a lost connection or a moved slot (messages may have been missed).",
		}),
		slowDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_hub_slow_client_drops_total",
			Help: "Connections dropped because their send queue was full.",
		}),
	}
	for _, c := range []prometheus.Collector{m.topics, m.localSubs, m.connections, m.upstreamOps, m.upstreamErrors, m.received, m.deliveries, m.resyncs, m.slowDrops} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
