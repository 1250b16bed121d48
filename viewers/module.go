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
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/socket"
)

// Deps are what the module is built from. It holds no store: each part
// takes its stores from the host as it starts.
type Deps struct {
	Config config.Viewers
	Keys   store.Keyspace
	// CookieKeys loads the session cookie keys; only the ingest plane,
	// which issues and checks cookies, calls it.
	CookieKeys func() (*keyring.Ring, error)
	// Hotels lists the hotels that exist (booking, through the app). Nil
	// means viewers runs without a hotel registry and counts any
	// well-formed hotel id, as a standalone viewers deployment would.
	Hotels  Hotels
	Metrics prometheus.Registerer
	Log     *slog.Logger
}

// Module is one process's viewers module. Its parts start one at a time
// and share the caches, buffers and metrics below.
type Module struct {
	cfg        config.Viewers
	keys       keys
	cookieKeys func() (*keyring.Ring, error)
	hotelSrc   Hotels
	m          *metrics
	log        *slog.Logger

	// Set by the hotels part; nil: every well-formed id is a hotel.
	hotels *registry
	// tiersLoop: the tier refresh loop runs in this process.
	tiersLoop bool

	// Set by the first part to start.
	rdb     redis.UniversalClient
	db      *pgxpool.Pool
	tiers   *tierCache
	writer  *writer
	counter *counter
	feeds   *feeds
	sock    *socket.Sockets
	// Set by the heartbeat part.
	ring     *keyring.Ring
	deny     *denylist
	sessions *sessions
	sessLim  *sessionLimiter
	prefixes *prefixLimiter
	recorder *recorder
}

// New builds the module; nothing runs until a part starts.
func New(d Deps) (*Module, error) {
	if d.CookieKeys == nil || d.Log == nil {
		return nil, errors.New("viewers: cookie keys and a logger are required")
	}
	m, err := newMetrics(d.Metrics)
	if err != nil {
		return nil, err
	}
	return &Module{cfg: d.Config, keys: keys{ks: d.Keys}, cookieKeys: d.CookieKeys,
		hotelSrc: d.Hotels, m: m, log: d.Log}, nil
}

// open builds what every part shares over the first part's stores.
func (mod *Module) open(ctx context.Context, h module.Host) error {
	if mod.rdb != nil {
		return nil
	}
	rdb, err := h.Redis(ctx)
	if err != nil {
		return err
	}
	db, err := h.Postgres(ctx, store.PoolMain)
	if err != nil {
		return err
	}
	cfg := mod.cfg
	mod.rdb, mod.db = rdb, db
	mod.writer = newWriter(rdb, mod.keys, writerConfig{
		Bucket: cfg.Bucket, Flush: cfg.FlushWindow, HotFlush: cfg.HotFlushWindow, Timeout: cfg.FlushTimeout,
		Probe: cfg.ProbeInterval, MaxPending: cfg.MaxPending,
	}, mod.m, mod.log)
	if mod.counter == nil {
		mod.openCounter(rdb, db)
	}
	return nil
}

// openCounter builds the count read path: the tier cache (read through
// db, which may be the read-only login) and the counter.
func (mod *Module) openCounter(rdb redis.UniversalClient, db *pgxpool.Pool) {
	cfg := mod.cfg
	mod.tiers = newTierCache(db, cfg.TierCacheTTL, mod.m, mod.log)
	mod.counter = newCounter(rdb, mod.keys, mod.tiers, counterConfig{
		Bucket: cfg.Bucket, CacheTTL: cfg.CountCacheTTL, Timeout: cfg.CountTimeout, EarlyRefreshBeta: cfg.EarlyRefreshBeta,
		BreakerFailures: cfg.BreakerFailures, BreakerCooldown: cfg.BreakerCooldown, CacheEntries: cfg.CountCacheEntries,
	}, mod.m, mod.log)
	if len(cfg.Peers) > 0 {
		mod.counter.peers = newPeerSet(cfg.Peers, cfg.PeerAPIKey, cfg.PeerTimeout, cfg.PeerRefresh, cfg.PeerMaxAge, mod.m, mod.log)
	}
}

// StartTiers loads the tier table before the parts that read it serve, so
// the first counts already union the right shards, and keeps it fresh.
func (mod *Module) StartTiers(ctx context.Context, h module.Host) error {
	if err := mod.open(ctx, h); err != nil {
		return err
	}
	mod.runTiers(ctx, h)
	return nil
}

// runTiers loads the tier table once and keeps it fresh, once per process.
func (mod *Module) runTiers(ctx context.Context, h module.Host) {
	if mod.tiersLoop {
		return
	}
	mod.tiersLoop = true
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := mod.tiers.refresh(lctx); err != nil {
		mod.log.Warn("viewers: first tier load failed; retrying in the background", "err", err)
	}
	h.Go("viewers.tiers", mod.tiers.run)
}

// StartHotels loads the registry of hotels before the parts that check it
// serve, and keeps it fresh (ingest and count roles). Without a Hotels
// port it does nothing: every well-formed id is then a hotel.
func (mod *Module) StartHotels(ctx context.Context, h module.Host) error {
	if mod.hotelSrc == nil || mod.hotels != nil {
		return nil
	}
	mod.hotels = newRegistry(mod.hotelSrc, mod.cfg.HotelRefresh, mod.m, mod.log)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := mod.hotels.refresh(lctx); err != nil {
		// Until a load succeeds heartbeats and counts answer 503, never a
		// wrong 404.
		mod.log.Warn("viewers: first hotel registry load failed; retrying in the background", "err", err)
	}
	h.Go("viewers.hotels", mod.hotels.run)
	return nil
}

// StartReader opens the count read path for other modules (Count), over
// the read-only login: booking's hotel search on the browse plane. In a
// process that also counts, it shares that part's counter.
func (mod *Module) StartReader(ctx context.Context, h module.Host) error {
	if mod.counter != nil {
		return nil
	}
	rdb, err := h.Redis(ctx)
	if err != nil {
		return err
	}
	ro, err := h.Postgres(ctx, store.PoolReadOnly)
	if err != nil {
		return err
	}
	mod.openCounter(rdb, ro)
	mod.runTiers(ctx, h)
	return nil
}

// checkHotel refuses ids that are not hotels: invalid when malformed,
// ErrHotelNotFound when no such hotel exists (busy while the registry has
// not loaded once).
func (mod *Module) checkHotel(hotel string) error {
	if !validHotel(hotel) {
		return refusal.Invalid(badHotel)
	}
	return mod.knownHotel(hotel)
}

// knownHotel is checkHotel for an id already validated.
func (mod *Module) knownHotel(hotel string) error {
	if mod.hotels == nil {
		return nil
	}
	return mod.hotels.check(hotel)
}

// StartHeartbeat mounts the write path (ingest role).
func (mod *Module) StartHeartbeat(ctx context.Context, h module.Host) error {
	if err := mod.open(ctx, h); err != nil {
		return err
	}
	ring, err := mod.cookieKeys()
	if err != nil {
		return err
	}
	if !ring.CanSign() {
		return errors.New("viewers: the ingest plane needs viewers.cookie_signing_key to issue session cookies")
	}
	if pub, ok := ring.Public(ring.ActiveID()); ok {
		mod.log.Info("viewers: signing session cookies", "kid", ring.ActiveID(),
			"verify_key", ring.ActiveID()+":"+base64.StdEncoding.EncodeToString(pub))
	}
	cfg := mod.cfg
	mod.ring = ring
	mod.sessions = newSessions(ring, cfg.CookieMaxAge, 1<<20)
	mod.sessLim = newSessionLimiter(cfg.SessionRate, cfg.SessionBurst, 1<<21)
	mod.deny = newDenylist(mod.db, cfg.DenylistRefresh, mod.m, mod.log)
	mod.recorder = newRecorder(mod.rdb, mod.keys, recorderConfig{
		Partitions: cfg.StreamPartitions, MaxLen: cfg.StreamMaxLen, Batch: cfg.StreamBatch, Flush: cfg.StreamFlush,
	}, mod.m, mod.log)
	if cfg.PrefixRate > 0 {
		lr, err := h.LimitRedis(ctx)
		if err != nil {
			return err
		}
		mod.prefixes = newPrefixLimiter(lr, mod.keys, prefixConfig{
			Rate: cfg.PrefixRate, Burst: cfg.PrefixBurst, SyncThreshold: cfg.PrefixSyncThreshold, SyncInterval: cfg.PrefixSyncInterval,
		}, mod.m, mod.log)
		h.Go("viewers.prefix-limits", mod.prefixes.run)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := mod.deny.load(lctx); err != nil {
		mod.log.Warn("viewers: first denylist load failed; retrying in the background", "err", err)
	}
	h.Go("viewers.denylist", mod.deny.run)
	h.Go("viewers.flush", mod.writer.run)
	h.Go("viewers.stream", mod.recorder.run)
	h.Go("viewers.rates", mod.reportRates)
	h.Routes().POST("/v1/viewers/:hotel/heartbeat", answered(mod.heartbeat))
	return nil
}

// StartCount mounts the count and bundle endpoints and runs the publisher
// of live counts (count role).
func (mod *Module) StartCount(ctx context.Context, h module.Host) error {
	if err := mod.openFeeds(ctx, h); err != nil {
		return err
	}
	g := h.Routes()
	g.GET("/v1/viewers/:hotel/count", answered(mod.count))
	g.HEAD("/v1/viewers/:hotel/count", answered(mod.count))
	g.GET("/v1/viewers/:hotel/bundle", answered(mod.bundle), h.RequireAPIKey())
	h.Go("viewers.publisher", mod.feeds.publishLoop)
	return nil
}

// StartPush mounts the live count endpoints (count role).
func (mod *Module) StartPush(ctx context.Context, h module.Host) error {
	if err := mod.openFeeds(ctx, h); err != nil {
		return err
	}
	mod.sock = h.Sockets()
	mod.sock.Declare("viewers")
	g := h.Routes()
	g.GET("/v1/viewers/:hotel/stream", answered(mod.stream))
	g.GET("/v1/viewers/ws", answered(mod.websocket))
	return nil
}

// StartController runs the hot-hotel controller (worker role).
func (mod *Module) StartController(ctx context.Context, h module.Host) error {
	if err := mod.open(ctx, h); err != nil {
		return err
	}
	c := &controller{db: mod.db, rdb: mod.rdb, keys: mod.keys, cfg: mod.cfg, m: mod.m, log: mod.log}
	h.Go("viewers.controller", c.run)
	return nil
}

// StartAbuse runs the abuse scanner (worker role).
func (mod *Module) StartAbuse(ctx context.Context, h module.Host) error {
	if err := mod.open(ctx, h); err != nil {
		return err
	}
	h.Go("viewers.abuse", mod.newScanner().run)
	return nil
}

func (mod *Module) openFeeds(ctx context.Context, h module.Host) error {
	if err := mod.open(ctx, h); err != nil {
		return err
	}
	if mod.feeds != nil {
		return nil
	}
	hb, err := h.Hub(ctx)
	if err != nil {
		return err
	}
	mod.feeds = newFeeds(hb, mod.keys, mod.counter, mod.cfg, mod.m, mod.log)
	return nil
}
