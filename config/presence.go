package config

import (
	"net/url"
	"strings"
	"time"

	"github.com/presenced/presenced/internal/stdwebhook"
)

// Presence configures the presence module: per-user online / idle / offline
// and manual statuses, pushed over WebSockets.
type Presence struct {
	// Policy decides who may see whose presence: "open" (any authenticated
	// user) or "contacts" (the subject is on the caller's contact list, or
	// shares a room of the caller's JWT rooms claim).
	Policy string `yaml:"policy"`
	// ManualStatuses a user may choose; they override online and idle until
	// cleared or the user goes offline.
	ManualStatuses []string `yaml:"manual_statuses"`
	// IdleThreshold without reported interaction turns online into idle.
	IdleThreshold time.Duration `yaml:"idle_threshold"`
	// LastActiveGranularity rounds lastActiveAt down, so followers cannot
	// watch someone's activity to the second.
	LastActiveGranularity time.Duration `yaml:"last_active_granularity"`
	// PingInterval is how often clients send session:ping; a session
	// silent for PingInterval × MissBudget is gone.
	PingInterval time.Duration `yaml:"ping_interval"`
	MissBudget   int           `yaml:"miss_budget"`
	// Grace is how long a session whose socket closed without
	// session:disconnect still counts, so a reload or a radio blip does not
	// flap the dot.
	Grace              time.Duration `yaml:"grace"`
	MaxSessionsPerUser int           `yaml:"max_sessions_per_user"`
	// OfflineRetention keeps an offline user's since / lastActiveAt.
	OfflineRetention time.Duration `yaml:"offline_retention"`
	// AuditRetention keeps the audit records of status and privacy changes
	// made by users and administrators (GET /v1/presence/audit/{user}).
	AuditRetention time.Duration `yaml:"audit_retention"`

	// GatewayLease is how long a gateway's liveness lease lasts unrenewed
	// (it renews every fifth of it). When it lapses (the process died), a
	// worker ends that gateway's sessions at once: its users go offline
	// within about this plus scheduler_interval, not the session TTL.
	GatewayLease time.Duration `yaml:"gateway_lease"`

	// Shards of the session lifecycle streams and indexes.
	Shards            int           `yaml:"shards"`
	SchedulerInterval time.Duration `yaml:"scheduler_interval"`
	StreamPoll        time.Duration `yaml:"stream_poll"`
	PingsMaxLen       int64         `yaml:"pings_max_len"`
	EventsMaxLen      int64         `yaml:"events_max_len"`
	// ClaimIdle is how long an entry may stay unacknowledged with a consumer
	// before another consumer takes it over.
	ClaimIdle     time.Duration `yaml:"claim_idle"`
	MaxDeliveries int           `yaml:"max_deliveries"`

	// CoalesceTick is how often the gateway looks at connections whose
	// changes wait behind a write in flight (coalescing, latest state per
	// user, until the socket is free). It never delays a change: a follower
	// whose socket is free gets it at once. Nothing runs per tick while
	// every connection keeps up.
	CoalesceTick time.Duration `yaml:"coalesce_tick"`
	// SlowClientTimeout: a connection whose changes have waited behind a
	// write for this long is dropped (4008).
	SlowClientTimeout time.Duration `yaml:"slow_client_timeout"`

	// MaxOpening bounds the connections a gateway opens at once (session
	// step, snapshot, follows); 0 sizes it to the machine: 256 per CPU the
	// process may use. OpeningWait is how long a connection beyond it waits
	// for a free slot before it is refused with 503 and Retry-After, so a
	// burst is queued and only a storm the gateway cannot drain is shed.
	MaxOpening  int           `yaml:"max_opening"`
	OpeningWait time.Duration `yaml:"opening_wait"`

	// HeapFloorBytes lets the process's heap (any process: the name is
	// presence's because its gateway was the first to need it) grow to
	// this size before the garbage collector runs while its live heap is
	// small (GOGC is raised
	// after each collection until the live heap passes half of it), so
	// collections, whose mark phases showed in the fan-out latency tail,
	// come several times less often. 0 turns it off; a GOGC set in the
	// environment wins.
	HeapFloorBytes int64 `yaml:"heap_floor_bytes"`
	// BurstHeapBytes lets the process's heap grow this much past its live
	// heap before a collection while connections of any kind open fast (a
	// launch, a sale's line opening, or the clients of a restarted process
	// coming back): a quarter of a
	// connect burst's CPU went to collections. The garbage is collected
	// and handed back when the burst is over. 0 turns it off; a GOGC set
	// in the environment wins.
	BurstHeapBytes int64 `yaml:"burst_heap_bytes"`

	MaxSubscriptions             int     `yaml:"max_subscriptions"`
	MaxFollowers                 int     `yaml:"max_followers"`
	SubscriptionChangesPerMinute int     `yaml:"subscription_changes_per_minute"`
	MessagesPerSecond            float64 `yaml:"messages_per_second"`
	MessageBurst                 int     `yaml:"message_burst"`
	// MaxMessageBytes: a larger message is refused with an error event and
	// the connection stays; a frame over MaxFrameBytes closes it (1009).
	MaxMessageBytes  int64         `yaml:"max_message_bytes"`
	MaxFrameBytes    int64         `yaml:"max_frame_bytes"`
	MaxQueryUsers    int           `yaml:"max_query_users"`
	NotificationTTL  time.Duration `yaml:"notification_ttl"`
	MaxNotifications int           `yaml:"max_notifications"`

	Webhook PresenceWebhook `yaml:"webhook"`
}

// PresenceWebhook configures the optional status-change callback.
type PresenceWebhook struct {
	// URL receives POSTed batches of status changes; empty disables.
	URL string `yaml:"url"`
	// Secret signs each batch with the Standard Webhooks scheme:
	// "whsec_<base64 key>" (a raw secret of 16+ bytes still works as the
	// key; its receivers use "whsec_" + base64 of it).
	Secret      string        `yaml:"secret"`
	BatchSize   int           `yaml:"batch_size"`
	BatchWindow time.Duration `yaml:"batch_window"`
	Timeout     time.Duration `yaml:"timeout"`
	MaxAttempts int           `yaml:"max_attempts"`
	Backoff     time.Duration `yaml:"backoff"`
	MaxBackoff  time.Duration `yaml:"max_backoff"`
	// MaxLen bounds the stream of changes waiting for delivery.
	MaxLen int64 `yaml:"max_len"`
}

// Presence policies.
const (
	PresencePolicyOpen     = "open"
	PresencePolicyContacts = "contacts"
)

func defaultPresence() Presence {
	return Presence{
		Policy:                       PresencePolicyOpen,
		ManualStatuses:               []string{"busy", "away"},
		IdleThreshold:                5 * time.Minute,
		LastActiveGranularity:        time.Minute,
		PingInterval:                 time.Minute,
		MissBudget:                   3,
		Grace:                        15 * time.Second,
		MaxSessionsPerUser:           16,
		OfflineRetention:             7 * 24 * time.Hour,
		AuditRetention:               90 * 24 * time.Hour,
		GatewayLease:                 5 * time.Second,
		Shards:                       16,
		SchedulerInterval:            time.Second,
		StreamPoll:                   100 * time.Millisecond,
		PingsMaxLen:                  200000,
		EventsMaxLen:                 100000,
		ClaimIdle:                    30 * time.Second,
		MaxDeliveries:                5,
		CoalesceTick:                 50 * time.Millisecond,
		SlowClientTimeout:            10 * time.Second,
		OpeningWait:                  2 * time.Second,
		HeapFloorBytes:               64 << 20,
		BurstHeapBytes:               128 << 20,
		MaxSubscriptions:             1000,
		MaxFollowers:                 5000,
		SubscriptionChangesPerMinute: 30,
		MessagesPerSecond:            10,
		MessageBurst:                 20,
		MaxMessageBytes:              64 << 10,
		MaxFrameBytes:                128 << 10,
		MaxQueryUsers:                1000,
		NotificationTTL:              24 * time.Hour,
		MaxNotifications:             100,
		Webhook: PresenceWebhook{
			BatchSize:   100,
			BatchWindow: time.Second,
			Timeout:     5 * time.Second,
			MaxAttempts: 6,
			Backoff:     time.Second,
			MaxBackoff:  time.Minute,
			MaxLen:      100000,
		},
	}
}

// MinCoalesceTick is the shortest presence.coalesce_tick accepted.
const MinCoalesceTick = 10 * time.Millisecond

// MaxHeapFloorBytes is the largest presence.heap_floor_bytes (and
// burst_heap_bytes) accepted.
const MaxHeapFloorBytes = 4 << 30

// MaxOpeningWait is the longest presence.opening_wait accepted.
const MaxOpeningWait = 10 * time.Second

// AutomaticStatuses are derived by the server and cannot be manual ones.
var AutomaticStatuses = []string{"online", "idle", "offline"}

// StatusInvisible is the privacy mode a user sets like a status: followers
// see them offline. It cannot be a manual status's name.
const StatusInvisible = "invisible"

func (p Presence) validate(bad badFunc) {
	switch p.Policy {
	case PresencePolicyOpen, PresencePolicyContacts:
	default:
		bad("presence.policy", "%q is not one of open, contacts", p.Policy)
	}
	seen := map[string]bool{}
	for _, s := range p.ManualStatuses {
		switch {
		case s == "" || len(s) > 32 || strings.TrimSpace(s) != s:
			bad("presence.manual_statuses", "%q: names are 1 to 32 characters without surrounding spaces", s)
		case contains(AutomaticStatuses, s):
			bad("presence.manual_statuses", "%q is an automatic status", s)
		case s == StatusInvisible:
			bad("presence.manual_statuses", "%q is the privacy mode, not a status", s)
		case seen[s]:
			bad("presence.manual_statuses", "%q is listed twice", s)
		}
		seen[s] = true
	}
	positive := map[string]time.Duration{
		"presence.idle_threshold":          p.IdleThreshold,
		"presence.last_active_granularity": p.LastActiveGranularity,
		"presence.ping_interval":           p.PingInterval,
		"presence.offline_retention":       p.OfflineRetention,
		"presence.audit_retention":         p.AuditRetention,
		"presence.scheduler_interval":      p.SchedulerInterval,
		"presence.gateway_lease":           p.GatewayLease,
		"presence.stream_poll":             p.StreamPoll,
		"presence.claim_idle":              p.ClaimIdle,
		"presence.coalesce_tick":           p.CoalesceTick,
		"presence.slow_client_timeout":     p.SlowClientTimeout,
		"presence.notification_ttl":        p.NotificationTTL,
		"presence.webhook.batch_window":    p.Webhook.BatchWindow,
		"presence.webhook.timeout":         p.Webhook.Timeout,
		"presence.webhook.backoff":         p.Webhook.Backoff,
		"presence.webhook.max_backoff":     p.Webhook.MaxBackoff,
	}
	for key, d := range positive {
		if d <= 0 {
			bad(key, "must be a positive duration")
		}
	}
	if p.Grace < 0 {
		bad("presence.grace", "must not be negative")
	}
	if p.CoalesceTick > 0 && p.CoalesceTick < MinCoalesceTick {
		bad("presence.coalesce_tick", "must be at least %s: a shorter sweep only spins", MinCoalesceTick)
	}
	if p.CoalesceTick > p.SlowClientTimeout && p.SlowClientTimeout > 0 {
		bad("presence.coalesce_tick", "must not exceed presence.slow_client_timeout (%s), which it enforces", p.SlowClientTimeout)
	}
	if p.HeapFloorBytes < 0 || p.HeapFloorBytes > MaxHeapFloorBytes {
		bad("presence.heap_floor_bytes", "must be within 0..%d (0: off): the floor is memory held for garbage", int64(MaxHeapFloorBytes))
	}
	if p.BurstHeapBytes < 0 || p.BurstHeapBytes > MaxHeapFloorBytes {
		bad("presence.burst_heap_bytes", "must be within 0..%d (0: off): the headroom is memory held for garbage during a connect burst", int64(MaxHeapFloorBytes))
	}
	if p.MaxOpening < 0 {
		bad("presence.max_opening", "must not be negative (0: sized to the machine)")
	}
	if p.OpeningWait < 0 || p.OpeningWait > MaxOpeningWait {
		bad("presence.opening_wait", "must be within 0..%s: a longer wait only holds sockets a client has given up on", MaxOpeningWait)
	}
	counts := map[string]int64{
		"presence.miss_budget":                     int64(p.MissBudget),
		"presence.max_sessions_per_user":           int64(p.MaxSessionsPerUser),
		"presence.max_subscriptions":               int64(p.MaxSubscriptions),
		"presence.max_followers":                   int64(p.MaxFollowers),
		"presence.subscription_changes_per_minute": int64(p.SubscriptionChangesPerMinute),
		"presence.message_burst":                   int64(p.MessageBurst),
		"presence.max_message_bytes":               p.MaxMessageBytes,
		"presence.max_query_users":                 int64(p.MaxQueryUsers),
		"presence.max_notifications":               int64(p.MaxNotifications),
		"presence.max_deliveries":                  int64(p.MaxDeliveries),
		"presence.pings_max_len":                   p.PingsMaxLen,
		"presence.events_max_len":                  p.EventsMaxLen,
		"presence.webhook.batch_size":              int64(p.Webhook.BatchSize),
		"presence.webhook.max_attempts":            int64(p.Webhook.MaxAttempts),
		"presence.webhook.max_len":                 p.Webhook.MaxLen,
	}
	for key, n := range counts {
		if n <= 0 {
			bad(key, "must be positive")
		}
	}
	if p.Shards < 1 || p.Shards > 1024 {
		bad("presence.shards", "must be within 1..1024")
	}
	if p.MessagesPerSecond <= 0 {
		bad("presence.messages_per_second", "must be positive")
	}
	if p.MaxFrameBytes < p.MaxMessageBytes {
		bad("presence.max_frame_bytes", "must be at least presence.max_message_bytes")
	}
	if p.Webhook.URL != "" {
		u, err := url.Parse(p.Webhook.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("presence.webhook.url", "%q is not an http(s) URL", p.Webhook.URL)
		}
		if _, err := stdwebhook.ParseSecret(p.Webhook.Secret); err != nil {
			bad("presence.webhook.secret", "%v (a Standard Webhooks secret: whsec_ and a base64 key of 16+ bytes)", err)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
