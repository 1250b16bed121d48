// Package config holds every setting of presenced with its default.
//
// Settings come from four layers, each overriding the one before it:
// built-in defaults, a YAML file, PRESENCED_* environment variables, and
// command-line flags. config.yaml at the repository root documents every key;
// a test keeps it equal to Default().
package config

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"time"
)

// Config is the whole configuration of one presenced process.
type Config struct {
	// Listen is the HTTP listen address.
	Listen string `yaml:"listen"`
	// Roles are the planes this process runs (see app/roles.go).
	Roles []string `yaml:"roles"`
	// DataDir holds development state: the private PostgreSQL cluster and
	// generated development secrets.
	DataDir string `yaml:"data_dir"`

	Log      Log      `yaml:"log"`
	HTTP     HTTP     `yaml:"http"`
	Realtime Realtime `yaml:"realtime"`
	Redis    Redis    `yaml:"redis"`
	Postgres Postgres `yaml:"postgres"`
	Auth     Auth     `yaml:"auth"`
	Outbox   Outbox   `yaml:"outbox"`
	Booking  Booking  `yaml:"booking"`
	Viewers  Viewers  `yaml:"viewers"`
	Payments Payments `yaml:"payments"`
	Web      Web      `yaml:"web"`

	Waitingroom Waitingroom `yaml:"waitingroom"`
	Presence    Presence    `yaml:"presence"`
}

// Log configures structured logging.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
}

// HTTP configures the HTTP server.
type HTTP struct {
	BodyLimitBytes    int64         `yaml:"body_limit_bytes"`
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// BodyReadTimeout bounds reading a request body, so a client dripping
	// one byte at a time cannot hold a connection; WebSocket and SSE
	// streams, which have no body, are not affected.
	BodyReadTimeout time.Duration `yaml:"body_read_timeout"`
	// MaxConnections caps the open client connections of the process
	// (sockets included); 0 takes 90 % of the open-file limit. Beyond it a
	// connection is answered 503 too_many_connections and closed.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerIP caps one client address's connections (0: no
	// cap). trusted_proxies, which carry many clients, are not capped.
	MaxConnectionsPerIP int           `yaml:"max_connections_per_ip"`
	IdleTimeout         time.Duration `yaml:"idle_timeout"`
	ShutdownTimeout     time.Duration `yaml:"shutdown_timeout"`
	TLSCert             string        `yaml:"tls_cert"`
	TLSKey              string        `yaml:"tls_key"`
	// TrustedProxies are CIDRs whose X-Forwarded-For is believed.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// Pprof mounts Go's profiler at /debug/pprof/ (keep it off public ports).
	Pprof bool `yaml:"pprof"`
	// AdminListen, when set, is a second listener for /metrics and (with
	// Pprof) /debug/pprof/, which then leave the public port.
	AdminListen string `yaml:"admin_listen"`
	// SlowRequest: a request that takes longer is access-logged at info,
	// like every error; all others only at debug. 0 logs no request as slow.
	SlowRequest time.Duration `yaml:"slow_request"`
}

// Realtime configures WebSocket and SSE connections and the topic hub.
type Realtime struct {
	// AllowedOrigins for WebSocket upgrades. Empty means same host only;
	// "*" allows any origin.
	AllowedOrigins   []string      `yaml:"allowed_origins"`
	MaxMessageBytes  int64         `yaml:"max_message_bytes"`
	PingInterval     time.Duration `yaml:"ping_interval"`
	PongTimeout      time.Duration `yaml:"pong_timeout"`
	WriteTimeout     time.Duration `yaml:"write_timeout"`
	SendQueue        int           `yaml:"send_queue"`
	SSEKeepalive     time.Duration `yaml:"sse_keepalive"`
	ReconnectMinWait time.Duration `yaml:"reconnect_min_wait"`
	ReconnectMaxWait time.Duration `yaml:"reconnect_max_wait"`
	// ParkIdleReaders: on Linux, a WebSocket with nothing to read waits in
	// one shared epoll set instead of a goroutine of its own (about 4 KiB
	// of stack per idle connection). Off, or on other systems, each
	// connection has a reading goroutine.
	ParkIdleReaders bool `yaml:"park_idle_readers"`
}

// Redis configures the coordination store.
type Redis struct {
	// URL of a single node (redis://host:port/db) or, with Cluster, of any
	// cluster node (extra seeds as ?addr=host:port). Empty starts an
	// embedded development server.
	URL     string `yaml:"url"`
	Cluster bool   `yaml:"cluster"`
	// Prefix starts every key and channel, so several deployments can share
	// one Redis.
	Prefix       string        `yaml:"prefix"`
	PoolSize     int           `yaml:"pool_size"`
	DialTimeout  time.Duration `yaml:"dial_timeout"`
	ReadTimeout  time.Duration `yaml:"read_timeout"`
	WriteTimeout time.Duration `yaml:"write_timeout"`
}

// Postgres configures the system of record.
type Postgres struct {
	// URL is the main DSN. Empty starts a private PostgreSQL cluster from
	// the local server binaries under DataDir.
	URL string `yaml:"url"`
	// ReadOnlyURL is the SELECT-only login of the browse plane; empty
	// means URL.
	ReadOnlyURL string `yaml:"readonly_url"`
	// WebhookURL is used by the payment webhook pool; empty means URL.
	WebhookURL       string `yaml:"webhook_url"`
	MaxConns         int32  `yaml:"max_conns"`
	ReadOnlyMaxConns int32  `yaml:"readonly_max_conns"`
	WebhookMaxConns  int32  `yaml:"webhook_max_conns"`
	MigrateOnStart   bool   `yaml:"migrate_on_start"`
	// QueryExecMode is pgx's statement mode for every pool. Empty keeps
	// the DSN's default_query_exec_mode, or pgx's cache_statement: named
	// prepared statements, which need the same server session for the
	// connection's life (PostgreSQL directly, or a session-mode pooler).
	// Behind a transaction-mode pooler (PgBouncer pool_mode=transaction)
	// set cache_describe: the pooler hands a server session to other
	// clients between transactions, and a statement prepared on one session
	// does not exist on the next. cache_describe keeps only the parameter
	// and result types, on the client, and parses unnamed each time. exec
	// and simple_protocol also avoid named statements but send []byte
	// arguments as bytea, which the JSON columns refuse.
	QueryExecMode string `yaml:"query_exec_mode"`
	// ConnectWait is how long a starting process waits for PostgreSQL to
	// answer, so processes started together with their database come up.
	ConnectWait time.Duration `yaml:"connect_wait"`
	// BinDir holds initdb and pg_ctl for the private cluster; empty searches
	// PATH and the usual Debian and Homebrew locations.
	BinDir string `yaml:"bin_dir"`
}

// QueryExecModes are the values of postgres.query_exec_mode, "" first.
var QueryExecModes = []string{"", "cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"}

// Auth configures user and server-to-server authentication.
type Auth struct {
	// JWTSecret verifies HS256 user tokens (development).
	JWTSecret string `yaml:"jwt_secret" env:"PRESENCED_JWT_SECRET"`
	// JWKSURL verifies RS256/ES256/EdDSA user tokens (production).
	JWKSURL     string        `yaml:"jwks_url"`
	JWKSRefresh time.Duration `yaml:"jwks_refresh"`
	Issuer      string        `yaml:"issuer"`
	Audience    string        `yaml:"audience"`
	// APIKey guards server-to-server endpoints (header X-API-Key).
	APIKey string `yaml:"api_key" env:"PRESENCED_API_KEY"`
	// DevSecrets generates a JWT secret and an API key into DataDir when
	// none is configured, and reuses them on the next start.
	DevSecrets bool `yaml:"dev_secrets"`
}

// Default returns the built-in configuration: a single development process
// with embedded stores.
func Default() Config {
	return Config{
		Listen:  "127.0.0.1:8080",
		Roles:   []string{"all"},
		DataDir: "./var",
		Log:     Log{Level: "info", Format: "text"},
		HTTP: HTTP{
			BodyLimitBytes:      1 << 20,
			ReadHeaderTimeout:   5 * time.Second,
			BodyReadTimeout:     10 * time.Second,
			MaxConnectionsPerIP: 2000,
			IdleTimeout:         120 * time.Second,
			ShutdownTimeout:     15 * time.Second,
			SlowRequest:         time.Second,
		},
		Realtime: Realtime{
			MaxMessageBytes:  4096,
			PingInterval:     25 * time.Second,
			PongTimeout:      60 * time.Second,
			WriteTimeout:     10 * time.Second,
			SendQueue:        64,
			SSEKeepalive:     15 * time.Second,
			ReconnectMinWait: 1 * time.Second,
			ReconnectMaxWait: 10 * time.Second,
			ParkIdleReaders:  true,
		},
		Redis: Redis{
			Prefix:       "pd:",
			PoolSize:     0,
			DialTimeout:  2 * time.Second,
			ReadTimeout:  2 * time.Second,
			WriteTimeout: 2 * time.Second,
		},
		Postgres: Postgres{
			MaxConns:         20,
			ReadOnlyMaxConns: 5,
			WebhookMaxConns:  5,
			MigrateOnStart:   true,
			ConnectWait:      30 * time.Second,
		},
		Auth: Auth{
			JWKSRefresh: 5 * time.Minute,
			DevSecrets:  true,
		},
		Outbox:      defaultOutbox(),
		Booking:     defaultBooking(),
		Viewers:     defaultViewers(),
		Payments:    defaultPayments(),
		Web:         defaultWeb(),
		Waitingroom: defaultWaitingroom(),
		Presence:    defaultPresence(),
	}
}

// SingleNode tells whether this is the zero-config development setup: no
// Redis and no PostgreSQL configured, so the process starts its own and
// everything runs on this machine.
func (c *Config) SingleNode() bool { return c.Redis.URL == "" && c.Postgres.URL == "" }

// badFunc reports a setting that is wrong, by its dotted key.
type badFunc func(key, format string, args ...any)

// Validate checks values that parse but make no sense, naming the key.
func (c *Config) Validate() error {
	if errs := c.problems(); len(errs) > 0 {
		return fmt.Errorf("invalid config: %s", strings.Join(errs, "; "))
	}
	return nil
}

// problems are Validate's findings, sorted, one per setting at fault.
func (c *Config) problems() []string {
	var errs []string
	bad := func(key, format string, args ...any) {
		errs = append(errs, key+": "+fmt.Sprintf(format, args...))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "%v", err)
	}
	if c.DataDir == "" {
		bad("data_dir", "empty")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", "%q is not one of text, json", c.Log.Format)
	}
	if c.HTTP.BodyLimitBytes <= 0 {
		bad("http.body_limit_bytes", "must be positive")
	}
	if (c.HTTP.TLSCert == "") != (c.HTTP.TLSKey == "") {
		bad("http.tls_cert", "tls_cert and tls_key must be set together")
	}
	if c.HTTP.AdminListen != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.AdminListen); err != nil {
			bad("http.admin_listen", "%v", err)
		} else if c.HTTP.AdminListen == c.Listen {
			bad("http.admin_listen", "must differ from listen")
		}
	}
	if c.HTTP.MaxConnections < 0 || c.HTTP.MaxConnectionsPerIP < 0 {
		bad("http.max_connections", "connection caps must not be negative (0: automatic / no cap per address)")
	}
	if c.HTTP.SlowRequest < 0 {
		bad("http.slow_request", "must not be negative (0 turns slow-request logging off)")
	}
	for _, cidr := range c.HTTP.TrustedProxies {
		if _, _, err := net.ParseCIDR(cidr); err != nil {
			bad("http.trusted_proxies", "%v", err)
		}
	}
	positive := map[string]time.Duration{
		"http.read_header_timeout":    c.HTTP.ReadHeaderTimeout,
		"http.body_read_timeout":      c.HTTP.BodyReadTimeout,
		"http.shutdown_timeout":       c.HTTP.ShutdownTimeout,
		"realtime.ping_interval":      c.Realtime.PingInterval,
		"realtime.pong_timeout":       c.Realtime.PongTimeout,
		"realtime.write_timeout":      c.Realtime.WriteTimeout,
		"realtime.sse_keepalive":      c.Realtime.SSEKeepalive,
		"realtime.reconnect_max_wait": c.Realtime.ReconnectMaxWait,
		"redis.dial_timeout":          c.Redis.DialTimeout,
		"auth.jwks_refresh":           c.Auth.JWKSRefresh,
	}
	for key, d := range positive {
		if d <= 0 {
			bad(key, "must be a positive duration")
		}
	}
	if c.Realtime.PongTimeout <= c.Realtime.PingInterval {
		bad("realtime.pong_timeout", "must be longer than realtime.ping_interval")
	}
	if c.Realtime.ReconnectMinWait > c.Realtime.ReconnectMaxWait {
		bad("realtime.reconnect_min_wait", "must not exceed realtime.reconnect_max_wait")
	}
	if c.Realtime.MaxMessageBytes <= 0 {
		bad("realtime.max_message_bytes", "must be positive")
	}
	if c.Realtime.SendQueue <= 0 {
		bad("realtime.send_queue", "must be positive")
	}
	if strings.ContainsAny(c.Redis.Prefix, "{}") {
		bad("redis.prefix", "must not contain { or } (they delimit hash tags)")
	}
	if c.Postgres.ConnectWait < 0 {
		bad("postgres.connect_wait", "must not be negative (0: one attempt)")
	}
	if !slices.Contains(QueryExecModes, c.Postgres.QueryExecMode) {
		bad("postgres.query_exec_mode", "must be one of %s (or empty)", strings.Join(QueryExecModes[1:], ", "))
	}
	if c.Postgres.MaxConns <= 0 || c.Postgres.ReadOnlyMaxConns <= 0 || c.Postgres.WebhookMaxConns <= 0 {
		bad("postgres.max_conns", "pool sizes must be positive")
	}
	c.Outbox.validate(bad)
	c.Booking.validate(bad)
	c.Viewers.validate(bad)
	c.Payments.validate(bad)
	c.Web.validate(bad)
	c.Waitingroom.validate(bad)
	c.Presence.validate(bad)
	sort.Strings(errs)
	return errs
}
