package config

import (
	"strings"
	"time"
)

// Viewers configures the viewers module: "N people are looking at this
// hotel right now" (heartbeats, HyperLogLog counting, hot-hotel tiers, live
// pushes, abuse scanning, cross-region merge). Every interval is settable so
// tests can run the whole cycle in seconds.
type Viewers struct {
	// Session cookie. CookieSigningKey is "kid:base64(32-byte Ed25519
	// seed)"; CookieVerifyKeys are "kid:base64(public key)" also accepted
	// during a rotation. Both empty: a development key under data_dir.
	CookieName       string        `yaml:"cookie_name"`
	CookieSigningKey string        `yaml:"cookie_signing_key"`
	CookieVerifyKeys []string      `yaml:"cookie_verify_keys"`
	CookieMaxAge     time.Duration `yaml:"cookie_max_age"`
	CookieSecure     bool          `yaml:"cookie_secure"`
	// HeartbeatBodyLimit is the largest heartbeat body accepted (413 above).
	HeartbeatBodyLimit int64 `yaml:"heartbeat_body_limit"`

	// Per-session token bucket (in process).
	SessionRate  float64 `yaml:"session_rate"`
	SessionBurst int     `yaml:"session_burst"`
	// Global per-IPv4-/24 (IPv6 /48) token bucket shared through Redis.
	// 0 turns it off.
	PrefixRate  float64 `yaml:"prefix_rate"`
	PrefixBurst int     `yaml:"prefix_burst"`
	// A prefix is checked against Redis once it sent this many heartbeats
	// to this process since its last check, at most every sync interval.
	PrefixSyncThreshold int           `yaml:"prefix_sync_threshold"`
	PrefixSyncInterval  time.Duration `yaml:"prefix_sync_interval"`
	// RateLimitRedisURL is a separate Redis for the prefix buckets, so a
	// meltdown of the counting Redis does not take abuse defence down with
	// it. Empty: the main Redis.
	RateLimitRedisURL     string `yaml:"ratelimit_redis_url"`
	RateLimitRedisCluster bool   `yaml:"ratelimit_redis_cluster"`

	// Counting. Bucket is the HyperLogLog bucket length; a count is the
	// union of the current and the previous bucket.
	Bucket         time.Duration `yaml:"bucket"`
	FlushWindow    time.Duration `yaml:"flush_window"`
	HotFlushWindow time.Duration `yaml:"hot_flush_window"`
	FlushTimeout   time.Duration `yaml:"flush_timeout"`
	// MaxPending caps session hashes buffered for Redis; heartbeats get a
	// 503 beyond it.
	MaxPending int `yaml:"max_pending"`
	// ProbeInterval is how often a failed write path checks whether Redis
	// is back.
	ProbeInterval time.Duration `yaml:"probe_interval"`

	// HotelRefresh is how often a process asks booking for hotels created
	// since its last look; a new hotel is counted within this delay, and
	// until then its heartbeats and counts are 404.
	HotelRefresh time.Duration `yaml:"hotel_refresh"`

	// Hot-hotel tiers.
	TierCacheTTL       time.Duration `yaml:"tier_cache_ttl"`
	Promote16Rate      float64       `yaml:"promote_16_rate"`
	Promote64Rate      float64       `yaml:"promote_64_rate"`
	WriteDelay         time.Duration `yaml:"write_delay"`
	QuietPeriod        time.Duration `yaml:"quiet_period"`
	DemoteRatio        float64       `yaml:"demote_ratio"`
	ControllerInterval time.Duration `yaml:"controller_interval"`
	RateReportInterval time.Duration `yaml:"rate_report_interval"`

	// Count reads.
	CountCacheTTL      time.Duration `yaml:"count_cache_ttl"`
	CountTimeout       time.Duration `yaml:"count_timeout"`
	EarlyRefreshBeta   float64       `yaml:"early_refresh_beta"`
	BreakerFailures    int           `yaml:"breaker_failures"`
	BreakerCooldown    time.Duration `yaml:"breaker_cooldown"`
	CountCacheEntries  int           `yaml:"count_cache_entries"`
	PushInterval       time.Duration `yaml:"push_interval"`
	PushThrottle       time.Duration `yaml:"push_throttle"`
	PushThrottleAbove  int           `yaml:"push_throttle_above"`
	MaxSubscriptions   int           `yaml:"max_subscriptions"`
	SocketMessageRate  float64       `yaml:"socket_message_rate"`
	SocketMessageBurst int           `yaml:"socket_message_burst"`

	// Heartbeat metadata stream and abuse scanner.
	StreamPartitions   int           `yaml:"stream_partitions"`
	StreamMaxLen       int64         `yaml:"stream_max_len"`
	StreamBatch        int           `yaml:"stream_batch"`
	StreamFlush        time.Duration `yaml:"stream_flush"`
	AbuseBlock         time.Duration `yaml:"abuse_block"`
	AbuseClaimIdle     time.Duration `yaml:"abuse_claim_idle"`
	AbuseMaxTries      int           `yaml:"abuse_max_tries"`
	DenyTTL            time.Duration `yaml:"deny_ttl"`
	DenylistRefresh    time.Duration `yaml:"denylist_refresh"`
	RuleMaxPrefixes    int           `yaml:"rule_max_prefixes"`
	RulePrefixWindow   time.Duration `yaml:"rule_prefix_window"`
	RuleMaxPerMinute   int           `yaml:"rule_max_per_minute"`
	RuleMaxHotels      int           `yaml:"rule_max_hotels"`
	RuleMaxNewSessions int           `yaml:"rule_max_new_sessions"`

	// Cross-region merge. Peers are "name=https://peer.example" base URLs,
	// fetched with PeerAPIKey.
	Region      string        `yaml:"region"`
	Peers       []string      `yaml:"peers"`
	PeerAPIKey  string        `yaml:"peer_api_key"`
	PeerTimeout time.Duration `yaml:"peer_timeout"`
	PeerRefresh time.Duration `yaml:"peer_refresh"`
	PeerMaxAge  time.Duration `yaml:"peer_max_age"`
}

func defaultViewers() Viewers {
	return Viewers{
		CookieName:          "pd_vs",
		CookieMaxAge:        30 * 24 * time.Hour,
		HeartbeatBodyLimit:  1024,
		SessionRate:         10,
		SessionBurst:        10,
		PrefixRate:          500,
		PrefixBurst:         1000,
		PrefixSyncThreshold: 25,
		PrefixSyncInterval:  200 * time.Millisecond,

		Bucket:         30 * time.Second,
		FlushWindow:    time.Second,
		HotFlushWindow: 250 * time.Millisecond,
		FlushTimeout:   2 * time.Second,
		MaxPending:     2_000_000,
		ProbeInterval:  time.Second,

		HotelRefresh:       time.Second,
		TierCacheTTL:       60 * time.Second,
		Promote16Rate:      1000,
		Promote64Rate:      10000,
		WriteDelay:         90 * time.Second,
		QuietPeriod:        10 * time.Minute,
		DemoteRatio:        0.5,
		ControllerInterval: 5 * time.Second,
		RateReportInterval: 5 * time.Second,

		CountCacheTTL:      time.Second,
		CountTimeout:       200 * time.Millisecond,
		EarlyRefreshBeta:   1,
		BreakerFailures:    5,
		BreakerCooldown:    5 * time.Second,
		CountCacheEntries:  100_000,
		PushInterval:       time.Second,
		PushThrottle:       5 * time.Second,
		PushThrottleAbove:  100,
		MaxSubscriptions:   50,
		SocketMessageRate:  10,
		SocketMessageBurst: 20,

		StreamPartitions:   4,
		StreamMaxLen:       10000,
		StreamBatch:        256,
		StreamFlush:        time.Second,
		AbuseBlock:         2 * time.Second,
		AbuseClaimIdle:     30 * time.Second,
		AbuseMaxTries:      3,
		DenyTTL:            time.Hour,
		DenylistRefresh:    30 * time.Second,
		RuleMaxPrefixes:    5,
		RulePrefixWindow:   10 * time.Minute,
		RuleMaxPerMinute:   30,
		RuleMaxHotels:      60,
		RuleMaxNewSessions: 600,

		PeerTimeout: time.Second,
		PeerRefresh: time.Second,
		PeerMaxAge:  5 * time.Second,
	}
}

func (v Viewers) validate(bad badFunc) {
	positive := map[string]time.Duration{
		"viewers.cookie_max_age":       v.CookieMaxAge,
		"viewers.prefix_sync_interval": v.PrefixSyncInterval,
		"viewers.bucket":               v.Bucket,
		"viewers.flush_window":         v.FlushWindow,
		"viewers.hot_flush_window":     v.HotFlushWindow,
		"viewers.flush_timeout":        v.FlushTimeout,
		"viewers.probe_interval":       v.ProbeInterval,
		"viewers.tier_cache_ttl":       v.TierCacheTTL,
		"viewers.hotel_refresh":        v.HotelRefresh,
		"viewers.write_delay":          v.WriteDelay,
		"viewers.quiet_period":         v.QuietPeriod,
		"viewers.controller_interval":  v.ControllerInterval,
		"viewers.rate_report_interval": v.RateReportInterval,
		"viewers.count_cache_ttl":      v.CountCacheTTL,
		"viewers.count_timeout":        v.CountTimeout,
		"viewers.breaker_cooldown":     v.BreakerCooldown,
		"viewers.push_interval":        v.PushInterval,
		"viewers.push_throttle":        v.PushThrottle,
		"viewers.stream_flush":         v.StreamFlush,
		"viewers.abuse_block":          v.AbuseBlock,
		"viewers.abuse_claim_idle":     v.AbuseClaimIdle,
		"viewers.deny_ttl":             v.DenyTTL,
		"viewers.denylist_refresh":     v.DenylistRefresh,
		"viewers.rule_prefix_window":   v.RulePrefixWindow,
		"viewers.peer_timeout":         v.PeerTimeout,
		"viewers.peer_refresh":         v.PeerRefresh,
		"viewers.peer_max_age":         v.PeerMaxAge,
	}
	for key, d := range positive {
		if d <= 0 {
			bad(key, "must be a positive duration")
		}
	}
	if v.CookieName == "" || strings.ContainsAny(v.CookieName, " ;=,\t") {
		bad("viewers.cookie_name", "must be a non-empty cookie token")
	}
	if v.CookieSigningKey == "" && len(v.CookieVerifyKeys) > 0 {
		bad("viewers.cookie_signing_key", "required when cookie_verify_keys is set (the ingest plane issues cookies)")
	}
	if v.HeartbeatBodyLimit <= 0 {
		bad("viewers.heartbeat_body_limit", "must be positive")
	}
	if v.SessionRate <= 0 || v.SessionBurst <= 0 {
		bad("viewers.session_rate", "session_rate and session_burst must be positive")
	}
	if v.PrefixRate < 0 || (v.PrefixRate > 0 && v.PrefixBurst <= 0) {
		bad("viewers.prefix_rate", "must be 0 (off) or positive with a positive prefix_burst")
	}
	if v.PrefixSyncThreshold <= 0 {
		bad("viewers.prefix_sync_threshold", "must be positive")
	}
	if v.HotFlushWindow > v.FlushWindow {
		bad("viewers.hot_flush_window", "must not exceed flush_window")
	}
	if v.FlushWindow >= v.Bucket {
		bad("viewers.flush_window", "must be shorter than bucket")
	}
	if v.MaxPending <= 0 {
		bad("viewers.max_pending", "must be positive")
	}
	if v.Promote16Rate <= 0 || v.Promote64Rate <= v.Promote16Rate {
		bad("viewers.promote_64_rate", "promote_16_rate must be positive and promote_64_rate above it")
	}
	if v.DemoteRatio <= 0 || v.DemoteRatio >= 1 {
		bad("viewers.demote_ratio", "must be between 0 and 1")
	}
	if v.WriteDelay <= v.TierCacheTTL {
		bad("viewers.write_delay", "must exceed tier_cache_ttl, or writers could move before readers see the new tier")
	}
	if v.EarlyRefreshBeta < 0 {
		bad("viewers.early_refresh_beta", "must not be negative")
	}
	if v.BreakerFailures <= 0 || v.CountCacheEntries <= 0 {
		bad("viewers.breaker_failures", "breaker_failures and count_cache_entries must be positive")
	}
	if v.PushThrottleAbove <= 0 || v.MaxSubscriptions <= 0 {
		bad("viewers.push_throttle_above", "push_throttle_above and max_subscriptions must be positive")
	}
	if v.SocketMessageRate <= 0 || v.SocketMessageBurst <= 0 {
		bad("viewers.socket_message_rate", "socket_message_rate and socket_message_burst must be positive")
	}
	if v.StreamPartitions <= 0 || v.StreamPartitions > 256 {
		bad("viewers.stream_partitions", "must be within 1..256")
	}
	if v.StreamMaxLen <= 0 || v.StreamBatch <= 0 {
		bad("viewers.stream_max_len", "stream_max_len and stream_batch must be positive")
	}
	if v.AbuseMaxTries <= 0 {
		bad("viewers.abuse_max_tries", "must be positive")
	}
	for _, p := range v.Peers {
		name, url, ok := strings.Cut(p, "=")
		if !ok || name == "" || !(strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://")) {
			bad("viewers.peers", "%q is not name=http(s)://host", p)
		}
	}
	if len(v.Peers) > 0 && v.PeerAPIKey == "" {
		bad("viewers.peer_api_key", "required when peers are configured")
	}
}
