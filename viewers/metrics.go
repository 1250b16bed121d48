package viewers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/internal/promlabels"
)

// metrics are the signals the design names: heartbeat outcomes, flush
// batches and latency, count latency and cache behaviour, stale serves,
// breaker state, tier changes, pushes, stream lag. No hotel or session ids
// are labels.
type metrics struct {
	heartbeats *prometheus.CounterVec
	// hb are heartbeats' children, bound once: the heartbeat path runs
	// tens of thousands of times a second per core, and WithLabelValues
	// hashes its label and takes a lock on every call.
	hb              heartbeatResults
	cookiesReplaced *prometheus.CounterVec
	limitFailOpen   prometheus.Counter
	limitErrors     prometheus.Counter
	prefixBlocks    prometheus.Counter

	flushBatch    prometheus.Histogram
	flushDuration prometheus.Histogram
	flushWrites   prometheus.Counter
	flushFailures *prometheus.CounterVec
	lost          prometheus.Counter
	pending       prometheus.Gauge
	writeHealthy  prometheus.Gauge
	redisCommands *prometheus.CounterVec

	countDuration *prometheus.HistogramVec
	countCache    *prometheus.CounterVec
	staleServes   prometheus.Counter
	countErrors   prometheus.Counter
	breakerState  prometheus.Gauge

	tierChanges  *prometheus.CounterVec
	hotHotels    *prometheus.GaugeVec
	leader       prometheus.Gauge
	leaderSince  prometheus.Gauge
	ratesMissing prometheus.Counter
	knownHotels  prometheus.Gauge
	unknownHotel prometheus.Counter

	publishes     prometheus.Counter
	pushes        *prometheus.CounterVec
	pushThrottled prometheus.Counter
	feeds         prometheus.Gauge

	streamRecords *prometheus.CounterVec
	streamLag     prometheus.Gauge
	deadLetters   prometheus.Counter
	verdicts      *prometheus.CounterVec
	denylistSize  prometheus.Gauge
	scannerParts  prometheus.Gauge
	reclaimed     prometheus.Counter
	peerMerges    *prometheus.CounterVec
	bundlesServed prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns = "presenced_viewers_"
	m := &metrics{
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "heartbeats_total",
			Help: "Heartbeats by outcome: accepted, limited_session, limited_prefix, denied (answered, not counted), invalid, too_large, unavailable."}, []string{"result"}),
		cookiesReplaced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "cookies_replaced_total",
			Help: "Presented session cookies that were not trusted and replaced, by reason."}, []string{"reason"}),
		limitFailOpen: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "ratelimit_fail_open_total",
			Help: "Heartbeats admitted without the global prefix check because its Redis did not answer."}),
		limitErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "ratelimit_redis_errors_total",
			Help: "Failed syncs of the global prefix buckets."}),
		prefixBlocks: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "ratelimit_prefix_blocks_total",
			Help: "Times an IP prefix was blocked after exhausting its global bucket."}),

		flushBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: ns + "flush_batch_hashes",
			Help:    "Session hashes per batched HyperLogLog add.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10)}),
		flushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: ns + "flush_duration_seconds",
			Help:    "Time to write one flush (all hotels, one pipeline) to Redis.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		flushWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "hll_writes_total",
			Help: "Batched HyperLogLog adds sent to Redis (the HLL write rate)."}),
		flushFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "flush_failures_total",
			Help: "Failed flushes: retried (first attempt failed) and lost (the retry failed too)."}, []string{"stage"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "heartbeats_lost_total",
			Help: "Accepted heartbeats whose flush failed twice and were not counted."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "pending_hashes",
			Help: "Session hashes buffered for the next flush."}),
		writeHealthy: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "write_path_healthy",
			Help: "1 while flushes succeed; 0 while heartbeats are refused because Redis failed."}),
		redisCommands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "redis_commands_total",
			Help: "Redis commands sent by the viewers module, by operation."}, []string{"op"}),

		countDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: ns + "count_duration_seconds",
			Help:    "Count lookups by source: cache (in-process), store (Redis), stale (served after a failure).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2.5, 12)}, []string{"source"}),
		countCache: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "count_cache_total",
			Help: "Count cache lookups: hit, miss, early_refresh (a hot hotel refreshed before expiry)."}, []string{"result"}),
		staleServes: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "count_stale_total",
			Help: "Counts served stale because Redis failed, was slow, or the breaker was open."}),
		countErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "count_store_errors_total",
			Help: "Failed or timed-out count reads from Redis."}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "count_breaker_state",
			Help: "Count read circuit breaker: 0 closed, 1 half-open, 2 open."}),

		tierChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "tier_changes_total",
			Help: "Tier steps taken by the controller, by direction (promote, demote) and phase (read, write)."}, []string{"direction", "phase"}),
		hotHotels: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "hot_hotels",
			Help: "Hotels by read tier in this process's tier cache."}, []string{"tier"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "controller_leader",
			Help: "1 while this process leads the hot-hotel controller."}),
		leaderSince: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "controller_last_step_timestamp_seconds",
			Help: "When this process last ran a controller step as leader."}),
		ratesMissing: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "controller_rates_missing_total",
			Help: "Controller steps skipped because no ingest process reported rates (stale data is worse than none)."}),
		knownHotels: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "hotels_known",
			Help: "Hotels in this process's registry."}),
		unknownHotel: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "unknown_hotel_requests_total",
			Help: "Heartbeats, counts and subscriptions refused because the hotel does not exist."}),

		publishes: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "count_publishes_total",
			Help: "Count changes published to the hub."}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "pushes_total",
			Help: "count:updated messages sent to local subscribers, by transport."}, []string{"transport"}),
		pushThrottled: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "push_throttled_total",
			Help: "Count changes held back because the hotel has many local subscribers."}),
		feeds: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "live_hotels",
			Help: "Hotels with local live-count subscribers."}),

		streamRecords: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "stream_records_total",
			Help: "Heartbeat metadata records: written to the stream, dropped (buffer full or Redis failed), scanned."}, []string{"result"}),
		streamLag: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "stream_lag_entries",
			Help: "Stream entries not yet read by the abuse scanner, over the partitions this process owns."}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "abuse_dead_letters_total",
			Help: "Stream entries moved to the dead-letter stream after too many failed tries."}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "abuse_verdicts_total",
			Help: "Denylist entries written, by rule."}, []string{"rule"}),
		denylistSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "denylist_entries",
			Help: "Live denylist entries in this process's cache."}),
		scannerParts: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "abuse_partitions_owned",
			Help: "Stream partitions this process scans."}),
		reclaimed: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "abuse_reclaimed_total",
			Help: "Stream entries reclaimed from a stuck or dead scanner."}),
		peerMerges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "peer_fetches_total",
			Help: "Peer-region bundle fetches by result: ok, timeout, error."}, []string{"result"}),
		bundlesServed: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "bundles_served_total",
			Help: "HyperLogLog bundles served to peer regions."}),
	}
	cs := []prometheus.Collector{
		m.heartbeats, m.cookiesReplaced, m.limitFailOpen, m.limitErrors, m.prefixBlocks,
		m.flushBatch, m.flushDuration, m.flushWrites, m.flushFailures, m.lost, m.pending, m.writeHealthy, m.redisCommands,
		m.countDuration, m.countCache, m.staleServes, m.countErrors, m.breakerState,
		m.tierChanges, m.hotHotels, m.leader, m.leaderSince, m.ratesMissing, m.knownHotels, m.unknownHotel,
		m.publishes, m.pushes, m.pushThrottled, m.feeds,
		m.streamRecords, m.streamLag, m.deadLetters, m.verdicts, m.denylistSize, m.scannerParts, m.reclaimed,
		m.peerMerges, m.bundlesServed,
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.writeHealthy.Set(1)
	// Every series alerts may use exists from the start, at zero.
	counters := func(v *prometheus.CounterVec) func(...string) { return func(lv ...string) { v.WithLabelValues(lv...) } }
	promlabels.Init(counters(m.heartbeats), []string{"accepted", "denied", "invalid", "limited_prefix", "limited_session",
		"too_large", "unavailable", "unknown_hotel"})
	m.hb = heartbeatResults{
		accepted: m.heartbeats.WithLabelValues("accepted"), denied: m.heartbeats.WithLabelValues("denied"),
		invalid: m.heartbeats.WithLabelValues("invalid"), limitedPrefix: m.heartbeats.WithLabelValues("limited_prefix"),
		limitedSession: m.heartbeats.WithLabelValues("limited_session"), tooLarge: m.heartbeats.WithLabelValues("too_large"),
		unavailable: m.heartbeats.WithLabelValues("unavailable"), unknownHotel: m.heartbeats.WithLabelValues("unknown_hotel"),
	}
	promlabels.Init(counters(m.cookiesReplaced), []string{replaceMalformed, replaceUnknownKid, replaceBadSig, replaceExpired})
	promlabels.Init(counters(m.flushFailures), []string{"retried", "lost"})
	promlabels.Init(counters(m.redisCommands), []string{"pfadd", "pexpireat", "pfcount", "xadd", "lease", "rates", "bundle", "merge_count"})
	promlabels.Init(func(lv ...string) { m.countDuration.WithLabelValues(lv...) }, []string{"cache", "stale", "store"})
	promlabels.Init(counters(m.countCache), []string{"hit", "miss", "early_refresh"})
	promlabels.Init(counters(m.tierChanges), []string{"promote", "demote"}, []string{"read", "write"})
	promlabels.Init(func(lv ...string) { m.hotHotels.WithLabelValues(lv...) }, []string{"1", "16", "64"})
	promlabels.Init(counters(m.pushes), []string{"sse", "ws"})
	promlabels.Init(counters(m.streamRecords), []string{"written", "dropped", "scanned"})
	promlabels.Init(counters(m.verdicts), []string{"rate", "hotels", "prefixes", "new_sessions"})
	promlabels.Init(counters(m.peerMerges), []string{"ok", "timeout", "error"})
	return m, nil
}

// heartbeatResults are heartbeats_total's series, one per result.
type heartbeatResults struct {
	accepted, denied, invalid, limitedPrefix, limitedSession, tooLarge, unavailable, unknownHotel prometheus.Counter
}
