// Package viewers answers "N people are looking at this hotel right now" at
// any scale.
//
// Write path (ingest role): POST /v1/viewers/{hotel}/heartbeat verifies an
// Ed25519-signed session cookie (issuing one on first contact), applies a
// per-session and a global per-prefix token bucket, skips denylisted
// sessions, and buffers the session's 64-bit hash. A flusher turns every
// (hotel, shard) buffered within a flush window into one PFADD, pipelined
// across hotels. Read path (count role): the count is the cardinality of the
// union of every shard of the current and previous bucket, behind a cache,
// singleflight, early refresh and a circuit breaker, and is pushed live over
// SSE and WebSocket. Worker role: a controller moves hot hotels between 1, 16
// and 64 shards, and an abuse scanner turns the heartbeat metadata stream
// into a denylist.
package viewers

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web"
)

// Deps are what the module is built from; the app provides them.
type Deps struct {
	Config config.Viewers
	// Redis holds the HyperLogLogs, pub/sub, the stream and leases.
	Redis redis.UniversalClient
	// LimitRedis holds the global prefix buckets; nil means Redis.
	LimitRedis redis.UniversalClient
	DB         *pgxpool.Pool
	Hub        *hub.Hub
	Sockets    *web.Sockets
	Keys       store.Keyspace
	// Ring signs and verifies session cookies.
	Ring *keyring.Ring
	// APIKey guards the bundle endpoint (server to server).
	APIKey  echo.MiddlewareFunc
	Metrics prometheus.Registerer
	Log     *slog.Logger
}

// Runner registers background loops (app.App.Go).
type Runner interface {
	Go(name string, run func(ctx context.Context) error)
}

// Module is one process's viewers module; every part of it shares the
// caches, buffers and metrics below.
type Module struct {
	cfg  config.Viewers
	rdb  redis.UniversalClient
	db   *pgxpool.Pool
	hub  *hub.Hub
	sock *web.Sockets
	keys keys
	ring *keyring.Ring
	auth echo.MiddlewareFunc
	m    *metrics
	log  *slog.Logger

	tiers    *tierCache
	deny     *denylist
	sessions *sessions
	sessLim  *sessionLimiter
	prefixes *prefixLimiter
	writer   *writer
	recorder *recorder
	counter  *counter
	feeds    *feeds

	once map[string]*sync.Once
}

// New builds the module; nothing runs until a Start method is called.
func New(d Deps) (*Module, error) {
	if d.Redis == nil || d.DB == nil || d.Ring == nil {
		return nil, errors.New("viewers: redis, postgres and a key ring are required")
	}
	m, err := newMetrics(d.Metrics)
	if err != nil {
		return nil, err
	}
	cfg := d.Config
	k := keys{ks: d.Keys}
	mod := &Module{
		cfg: cfg, rdb: d.Redis, db: d.DB, hub: d.Hub, sock: d.Sockets, keys: k, ring: d.Ring, auth: d.APIKey, m: m, log: d.Log,
		once: map[string]*sync.Once{},
	}
	for _, n := range []string{"tiers", "deny", "writer", "limits", "recorder", "reporter", "publisher"} {
		mod.once[n] = &sync.Once{}
	}
	mod.tiers = newTierCache(d.DB, cfg.TierCacheTTL, m, d.Log)
	mod.deny = newDenylist(d.DB, cfg.DenylistRefresh, m, d.Log)
	mod.sessions = newSessions(d.Ring, cfg.CookieMaxAge, 1<<20)
	mod.sessLim = newSessionLimiter(cfg.SessionRate, cfg.SessionBurst, 1<<21)
	if cfg.PrefixRate > 0 {
		lr := d.LimitRedis
		if lr == nil {
			lr = d.Redis
		}
		mod.prefixes = newPrefixLimiter(lr, k, cfg.PrefixRate, cfg.PrefixBurst, cfg.PrefixSyncThreshold, cfg.PrefixSyncInterval, m, d.Log)
	}
	mod.writer = newWriter(d.Redis, k, cfg.Bucket, cfg.FlushWindow, cfg.HotFlushWindow, cfg.FlushTimeout, cfg.ProbeInterval, cfg.MaxPending, m, d.Log)
	mod.recorder = newRecorder(d.Redis, k, cfg.StreamPartitions, cfg.StreamMaxLen, cfg.StreamBatch, cfg.StreamFlush, m, d.Log)
	mod.counter = newCounter(d.Redis, k, mod.tiers, cfg.Bucket, cfg.CountCacheTTL, cfg.CountTimeout, cfg.EarlyRefreshBeta,
		cfg.BreakerFailures, cfg.BreakerCooldown, cfg.CountCacheEntries, m, d.Log)
	if len(cfg.Peers) > 0 {
		mod.counter.peers = newPeerSet(cfg.Peers, cfg.PeerAPIKey, cfg.PeerTimeout, cfg.PeerRefresh, cfg.PeerMaxAge, m, d.Log)
	}
	if d.Hub != nil {
		mod.feeds = newFeeds(d.Hub, k, mod.counter, cfg, m, d.Log)
	}
	return mod, nil
}

// startOnce runs f the first time name is started in this process.
func (mod *Module) startOnce(name string, f func()) { mod.once[name].Do(f) }

// loadTiers loads the tier table once before serving, so the first counts
// already union the right shards, and keeps it fresh.
func (mod *Module) loadTiers(ctx context.Context, r Runner) {
	mod.startOnce("tiers", func() {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := mod.tiers.refresh(ctx); err != nil {
			mod.log.Warn("viewers: first tier load failed; retrying in the background", "err", err)
		}
		r.Go("viewers.tiers", mod.tiers.run)
	})
}

// StartHeartbeat mounts the write path (ingest role).
func (mod *Module) StartHeartbeat(ctx context.Context, g *echo.Group, r Runner) error {
	if !mod.ring.CanSign() {
		return errors.New("viewers: the ingest plane needs viewers.cookie_signing_key to issue session cookies")
	}
	if pub, ok := mod.ring.Public(mod.ring.ActiveID()); ok {
		mod.log.Info("viewers: signing session cookies", "kid", mod.ring.ActiveID(),
			"verify_key", mod.ring.ActiveID()+":"+base64.StdEncoding.EncodeToString(pub))
	}
	mod.loadTiers(ctx, r)
	mod.startOnce("deny", func() {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := mod.deny.load(ctx); err != nil {
			mod.log.Warn("viewers: first denylist load failed; retrying in the background", "err", err)
		}
		r.Go("viewers.denylist", mod.deny.run)
	})
	mod.startOnce("writer", func() { r.Go("viewers.flush", mod.writer.run) })
	mod.startOnce("recorder", func() { r.Go("viewers.stream", mod.recorder.run) })
	mod.startOnce("reporter", func() { r.Go("viewers.rates", mod.reportRates) })
	if mod.prefixes != nil {
		mod.startOnce("limits", func() { r.Go("viewers.prefix-limits", mod.prefixes.run) })
	}
	g.POST("/v1/viewers/:hotel/heartbeat", mod.heartbeat)
	return nil
}

// StartCount mounts the count and bundle endpoints and the publisher of
// live counts (count role).
func (mod *Module) StartCount(ctx context.Context, g *echo.Group, r Runner) error {
	mod.loadTiers(ctx, r)
	g.GET("/v1/viewers/:hotel/count", mod.count)
	g.HEAD("/v1/viewers/:hotel/count", mod.count)
	g.GET("/v1/viewers/:hotel/bundle", mod.bundle, mod.auth)
	if mod.feeds != nil {
		mod.startOnce("publisher", func() { r.Go("viewers.publisher", mod.feeds.publishLoop) })
	}
	return nil
}

// StartPush mounts the live count endpoints (count role).
func (mod *Module) StartPush(ctx context.Context, g *echo.Group, r Runner) error {
	if mod.feeds == nil || mod.sock == nil {
		return errors.New("viewers: live counts need the hub and the socket server")
	}
	mod.loadTiers(ctx, r)
	g.GET("/v1/viewers/:hotel/stream", mod.stream)
	g.GET("/v1/viewers/ws", mod.websocket)
	return nil
}
