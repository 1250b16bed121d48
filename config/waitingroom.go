package config

import (
	"strings"
	"time"
)

// Waitingroom configures the waiting room: the admission ticker of the
// worker plane, the sockets and passes of the admit plane, and the settings a
// new event starts with (each event's own settings are changed at run time
// through the admin API).
type Waitingroom struct {
	// TickInterval is the admission period: one tick per event per interval.
	TickInterval time.Duration `yaml:"tick_interval"`
	// TickShards spreads events over this many tick leases, so a worker
	// renews one lease per shard rather than one per event.
	TickShards int `yaml:"tick_shards"`
	// TickLeaseTTL is how long a worker keeps a shard without renewing it;
	// a dead worker's events resume on another worker after this.
	TickLeaseTTL time.Duration `yaml:"tick_lease_ttl"`
	// CleanupLimit bounds the abandoned entries one tick removes.
	CleanupLimit int `yaml:"cleanup_limit"`
	// SweepLimit bounds the entries one tick's sweep reads looking for
	// abandoned ones. The sweep reads enough for every entry to be looked
	// at twice per heartbeat timeout, in slices of 1,000 (about 1 ms of
	// Redis each), up to this.
	SweepLimit int `yaml:"sweep_limit"`
	// PositionInterval is how often the admit plane re-reads the position of
	// each socket (refreshing its heartbeat), spread over the interval
	// about 100 sockets at a time; a frame goes out when the position
	// changed or KeepaliveInterval passed without one.
	PositionInterval  time.Duration `yaml:"position_interval"`
	KeepaliveInterval time.Duration `yaml:"keepalive_interval"`
	// PassTTL caps the lifetime of an admission pass; a pass never outlives
	// its lease.
	PassTTL time.Duration `yaml:"pass_ttl"`
	// ETAWindow is the span of measured admissions the wait estimate uses.
	ETAWindow time.Duration `yaml:"eta_window"`
	// RetryAfter is the base of the jittered Retry-After of a 503.
	RetryAfter time.Duration `yaml:"retry_after"`
	// StoreTimeout bounds one Redis call of a request.
	StoreTimeout time.Duration `yaml:"store_timeout"`
	// MaxSocketsPerUser caps one user's open sockets per event in one
	// process (tabs and devices); more are refused with 429.
	MaxSocketsPerUser int `yaml:"max_sockets_per_user"`
	// SigningKey signs passes: "kid:base64(32-byte Ed25519 seed)". Only the
	// admit plane needs it. Empty with no VerifyKeys: a development key in
	// data_dir/keys.
	SigningKey string `yaml:"signing_key"`
	// VerifyKeys are extra public keys ("kid:base64(32-byte key)") accepted
	// for passes: keys being rotated out, or every key on a plane that only
	// verifies.
	VerifyKeys []string `yaml:"verify_keys"`

	// Settings of an event created without them.
	DefaultCapacity         int           `yaml:"default_capacity"`
	DefaultBatch            int           `yaml:"default_batch"`
	DefaultLease            time.Duration `yaml:"default_lease"`
	DefaultHeartbeatTimeout time.Duration `yaml:"default_heartbeat_timeout"`
}

func defaultWaitingroom() Waitingroom {
	return Waitingroom{
		TickInterval:            time.Second,
		TickShards:              16,
		TickLeaseTTL:            3 * time.Second,
		CleanupLimit:            1000,
		SweepLimit:              10000,
		PositionInterval:        5 * time.Second,
		KeepaliveInterval:       5 * time.Second,
		PassTTL:                 5 * time.Minute,
		ETAWindow:               5 * time.Minute,
		RetryAfter:              2 * time.Second,
		StoreTimeout:            time.Second,
		MaxSocketsPerUser:       5,
		DefaultCapacity:         100,
		DefaultBatch:            10,
		DefaultLease:            5 * time.Minute,
		DefaultHeartbeatTimeout: 2 * time.Minute,
	}
}

func (w Waitingroom) validate(bad badFunc) {
	if w.MaxSocketsPerUser < 1 {
		bad("waitingroom.max_sockets_per_user", "must be at least 1")
	}
	positive := map[string]time.Duration{
		"waitingroom.tick_interval":      w.TickInterval,
		"waitingroom.position_interval":  w.PositionInterval,
		"waitingroom.keepalive_interval": w.KeepaliveInterval,
		"waitingroom.pass_ttl":           w.PassTTL,
		"waitingroom.eta_window":         w.ETAWindow,
		"waitingroom.retry_after":        w.RetryAfter,
		"waitingroom.store_timeout":      w.StoreTimeout,
	}
	for key, d := range positive {
		if d <= 0 {
			bad(key, "must be a positive duration")
		}
	}
	if w.TickLeaseTTL <= w.TickInterval {
		bad("waitingroom.tick_lease_ttl", "must be longer than waitingroom.tick_interval")
	}
	if w.TickShards < 1 || w.TickShards > 4096 {
		bad("waitingroom.tick_shards", "must be within 1..4096")
	}
	if w.CleanupLimit < 1 || w.CleanupLimit > 100000 {
		bad("waitingroom.cleanup_limit", "must be within 1..100000")
	}
	if w.SweepLimit < 1 || w.SweepLimit > 1000000 {
		bad("waitingroom.sweep_limit", "must be within 1..1000000")
	}
	if w.DefaultCapacity < 0 {
		bad("waitingroom.default_capacity", "must not be negative")
	}
	if w.DefaultBatch < 1 {
		bad("waitingroom.default_batch", "must be positive")
	}
	if w.DefaultLease < 10*time.Second || w.DefaultLease > time.Hour {
		bad("waitingroom.default_lease", "must be within 10s..1h")
	}
	if w.DefaultHeartbeatTimeout < 10*time.Second || w.DefaultHeartbeatTimeout > time.Hour {
		bad("waitingroom.default_heartbeat_timeout", "must be within 10s..1h")
	}
	if w.SigningKey != "" && !strings.Contains(w.SigningKey, ":") {
		bad("waitingroom.signing_key", `want "kid:base64(seed)"`)
	}
	for _, k := range w.VerifyKeys {
		if !strings.Contains(k, ":") {
			bad("waitingroom.verify_keys", `want "kid:base64(public key)" items`)
		}
	}
}
