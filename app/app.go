// Package app assembles a presenced process: it resolves the roles to module
// parts, connects the stores those parts need (starting the development
// stores when none are configured), starts the parts, serves HTTP, and shuts
// everything down in order.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/gctune"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/viewers"
	"github.com/presenced/presenced/waitingroom"
	"github.com/presenced/presenced/web"
)

// App is one presenced process.
type App struct {
	Config  config.Config
	Log     *slog.Logger
	Metrics *prometheus.Registry
	Server  *web.Server
	Keys    store.Keyspace
	// AdminAddr is the address http.admin_listen bound, once started.
	AdminAddr string

	roles   []string
	parts   []string
	started []string
	// table is the part table used; tests swap in their own.
	table map[string]part
	mods  modules

	mu        sync.Mutex
	redis     redis.UniversalClient
	pools     map[string]*pgxpool.Pool
	hub       *hub.Hub
	verifier  *auth.Verifier
	embRedis  *store.EmbeddedRedis
	limits    redis.UniversalClient
	embPG     *store.EmbeddedPostgres
	closers   []func() error // run in reverse order at shutdown
	loops     []loop
	loopCtx   context.Context
	stopLoops context.CancelFunc
	loopWG    sync.WaitGroup
	running   map[string]int // loops not yet returned, by name: what a slow shutdown names
	loopErr   chan error
	devMode   []string
	// devTokens: the JWT secret is one generated for development, so the
	// demo sign-in may mint tokens with it (never beside a real issuer).
	devTokens bool
	// partRoutes are the routes each started part mounted, for the index.
	partRoutes map[string][]string
	// ran is set once Run serves: the shutdown of a process that never
	// started (a failed start, a one-shot command) is not announced, so
	// its error is the last thing a person reads.
	ran atomic.Bool
}

// modules are the domain modules of this process, each built on first use
// by the parts that share it.
type modules struct {
	viewers     lazy[viewers.Module]
	presence    lazy[presence.Module]
	waitingroom lazy[waitingroom.Module]
	booking     lazy[booking.Module]
	payments    lazy[payments.Module]
}

// lazy holds a value built once.
type lazy[T any] struct {
	once sync.Once
	v    *T
	err  error
}

func (l *lazy[T]) get(build func() (*T, error)) (*T, error) {
	l.once.Do(func() { l.v, l.err = build() })
	return l.v, l.err
}

type loop struct {
	name string
	run  func(ctx context.Context) error
}

// New prepares a process for cfg without touching any store yet.
func New(cfg config.Config, log *slog.Logger) (*App, error) {
	roleNames, partNames, err := ResolveRoles(cfg.Roles)
	if err != nil {
		return nil, err
	}
	return newApp(cfg, log, roleNames, partNames, parts)
}

// newApp prepares a process that runs partNames of table.
func newApp(cfg config.Config, log *slog.Logger, roleNames, partNames []string, table map[string]part) (*App, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	srv, err := web.NewServer(cfg, reg, log)
	if err != nil {
		return nil, err
	}
	a := &App{
		Config:  cfg,
		Log:     log,
		Metrics: reg,
		Server:  srv,
		Keys:    store.NewKeyspace(cfg.Redis.Prefix),
		roles:   roleNames,
		parts:   partNames,
		table:   table,
		pools:   map[string]*pgxpool.Pool{},
		loopErr: make(chan error, 1),

		partRoutes: map[string][]string{},
	}
	a.loopCtx, a.stopLoops = context.WithCancel(context.Background())
	a.devTokens = cfg.Auth.DevSecrets && cfg.Auth.JWKSURL == "" && cfg.Auth.JWTSecret == ""
	filled, err := ResolveSecrets(&a.Config)
	if err != nil {
		return nil, err
	}
	a.devMode = append(a.devMode, filled...)
	if needsSecret(table, partNames, secretPayments) {
		// Only a process that runs payments needs its keys and provider.
		if filled, err = ResolvePayments(&a.Config); err != nil {
			return nil, err
		}
		a.devMode = append(a.devMode, filled...)
	}
	if a.Config.Auth.APIKey == "" {
		log.Warn("no auth.api_key configured: server-to-server endpoints refuse every call")
	}
	return a, nil
}

// Roles are the roles this process runs.
func (a *App) Roles() []string { return a.roles }

// Started lists the parts that were started (built parts of the roles).
func (a *App) Started() []string { return a.started }

// Start connects the stores the parts need and starts each part. ctx
// bounds the whole start-up: cancelling it (SIGTERM while waiting for a
// store) stops the start with its error.
func (a *App) Start(ctx context.Context) error {
	if err := a.startParts(ctx); err != nil {
		return err
	}
	// The collector's tuner is the process's: opens of every kind of
	// socket (presence, the waiting room's line, viewers) make a burst.
	tuner := gctune.New(a.Config.Presence.HeapFloorBytes, a.Config.Presence.BurstHeapBytes, a.Server.Sockets, a.Log)
	a.Go("gc-tuner", func(ctx context.Context) error {
		tuner.Run(ctx)
		return nil
	})
	if err := a.mountPages(); err != nil {
		return err
	}
	addr, err := a.Server.ListenAdmin()
	if err != nil {
		return err
	}
	a.AdminAddr = addr
	if len(a.devMode) > 0 {
		a.Log.Warn("SINGLE-NODE DEVELOPMENT MODE: not for production", "embedded", a.devMode)
	}
	a.Log.Info("roles started", "roles", a.roles, "parts", a.started)
	return nil
}

// startParts connects the stores the parts need and starts each part.
func (a *App) startParts(ctx context.Context) error {
	needs := map[dependency]bool{}
	for _, name := range a.parts {
		if a.table[name].start == nil {
			continue // not built yet: no pool, and no readiness check, for it
		}
		for _, n := range a.table[name].needs {
			needs[n] = true
		}
	}
	if needs[needRedis] {
		if _, err := a.Redis(ctx); err != nil {
			return err
		}
	}
	for _, purpose := range []string{store.PoolMain, store.PoolReadOnly, store.PoolWebhook} {
		if needs[poolNeed(purpose)] {
			if _, err := a.Postgres(ctx, purpose); err != nil {
				return err
			}
		}
	}
	for _, name := range a.parts {
		p := a.table[name]
		if p.start == nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		before := routeKeys(a.Server.Echo)
		if err := p.start(ctx, a, &partHost{a: a, part: name, needs: p.needs}); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		a.partRoutes[name] = newRoutes(a.Server.Echo, before)
		a.started = append(a.started, name)
	}
	return nil
}

// Run serves on ln and runs the background loops until ctx ends or a loop
// fails, then shuts down within http.shutdown_timeout.
func (a *App) Run(ctx context.Context, ln net.Listener) error {
	a.ran.Store(true)
	for _, l := range a.loops {
		a.loopWG.Add(1)
		a.noteLoop(l.name, 1)
		go func(l loop) {
			defer a.loopWG.Done()
			defer a.noteLoop(l.name, -1)
			if err := l.run(a.loopCtx); err != nil && a.loopCtx.Err() == nil {
				select {
				case a.loopErr <- fmt.Errorf("%s: %w", l.name, err):
				default:
				}
			}
		}(l)
	}
	serveErr := make(chan error, 2)
	go func() { serveErr <- a.Server.Serve(ln) }()
	a.Log.Info("listening", "addr", ln.Addr().String())
	if a.AdminAddr != "" {
		go func() {
			if err := a.Server.ServeAdmin(); err != nil {
				serveErr <- fmt.Errorf("admin listener: %w", err)
			}
		}()
		a.Log.Info("admin listener: /metrics and pprof are served here only", "addr", a.AdminAddr)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	case runErr = <-a.loopErr:
	}
	shutdownErr := a.Shutdown()
	return errors.Join(runErr, shutdownErr)
}

// Shutdown drains sockets, finishes in-flight requests, stops the loops and
// closes the stores, in that order, within http.shutdown_timeout.
func (a *App) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), a.Config.HTTP.ShutdownTimeout)
	defer cancel()
	if a.ran.Load() {
		a.Log.Info("shutting down")
	}
	var errs []error
	if err := a.Server.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	a.stopLoops()
	done := make(chan struct{})
	go func() { a.loopWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("background loops did not stop in time: %s", strings.Join(a.runningLoops(), ", ")))
	}
	a.mu.Lock()
	closers := a.closers
	a.closers = nil
	a.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	switch {
	case err != nil:
		a.Log.Warn("stopped with errors", "err", err)
	case a.ran.Load():
		a.Log.Info("stopped")
	}
	return err
}

func (a *App) noteLoop(name string, delta int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running == nil {
		a.running = map[string]int{}
	}
	if a.running[name] += delta; a.running[name] == 0 {
		delete(a.running, name)
	}
}

// runningLoops names the loops that have not returned yet, sorted.
func (a *App) runningLoops() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	names := slices.Sorted(maps.Keys(a.running))
	return names
}

// Go registers a background loop, started by Run and stopped by cancelling
// its context at shutdown. Every loop must be safe to run in several
// processes at once (leases, advisory locks, consumer groups).
func (a *App) Go(name string, run func(ctx context.Context) error) {
	a.loops = append(a.loops, loop{name: name, run: run})
}

// OnStop registers cleanup run at shutdown, after the loops stopped, in
// reverse order of registration.
func (a *App) OnStop(f func() error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closers = append(a.closers, f)
}

// Routes is the root route group modules mount on.
func (a *App) Routes() *echo.Group { return a.Server.Echo.Group("") }

// Redis returns the shared Redis client, connecting on first use and
// starting the embedded development server when no URL is configured.
// LimitRedis is the Redis of limits shared between processes: the one of
// viewers.ratelimit_redis_url, opened once and reported by /readyz as a
// store the process fails open without, else the main Redis.
func (a *App) LimitRedis(ctx context.Context) (redis.UniversalClient, error) {
	v := a.Config.Viewers
	if v.RateLimitRedisURL == "" {
		return a.Redis(ctx)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.limits != nil {
		return a.limits, nil
	}
	rc := a.Config.Redis
	rc.URL, rc.Cluster = v.RateLimitRedisURL, v.RateLimitRedisCluster
	rdb, err := store.OpenRedis(rc)
	if err != nil {
		return nil, fmt.Errorf("viewers.ratelimit_redis_url: %w", err)
	}
	a.limits = rdb
	a.closers = append(a.closers, rdb.Close)
	a.Server.AddOptionalCheck("redis-limits", func(ctx context.Context) error { return store.PingRedis(ctx, rdb) })
	return rdb, nil
}

func (a *App) Redis(ctx context.Context) (redis.UniversalClient, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.redis != nil {
		return a.redis, nil
	}
	cfg := a.Config.Redis
	if cfg.URL == "" {
		emb, err := store.StartEmbeddedRedis(ctx, a.Log)
		if err != nil {
			return nil, err
		}
		a.embRedis = emb
		a.closers = append(a.closers, emb.Stop)
		a.devMode = append(a.devMode, "redis ("+emb.Kind+")")
		cfg.URL, cfg.Cluster = emb.URL, false
		a.Log.Warn("no redis.url configured: started a development Redis", "kind", emb.Kind, "url", emb.URL)
	}
	rdb, err := store.OpenRedis(cfg)
	if err != nil {
		return nil, err
	}
	if err := store.PingRedis(ctx, rdb); err != nil {
		a.Log.Warn("redis does not answer yet; /readyz reports it", "url", store.Redact(cfg.URL), "err", err)
	}
	a.redis = rdb
	a.closers = append(a.closers, rdb.Close)
	a.Server.AddCheck("redis", func(ctx context.Context) error { return store.PingRedis(ctx, rdb) })
	return rdb, nil
}

// Hub returns the process's topic hub over the shared Redis.
func (a *App) Hub(ctx context.Context) (*hub.Hub, error) {
	rdb, err := a.Redis(ctx)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hub == nil {
		h, err := hub.New(rdb, a.Metrics, a.Log)
		if err != nil {
			return nil, err
		}
		a.hub = h
		a.closers = append(a.closers, h.Close)
	}
	return a.hub, nil
}

// Users returns the user JWT verifier.
func (a *App) Users() (*auth.Verifier, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.verifier == nil {
		v, err := auth.NewVerifier(a.loopCtx, a.Config.Auth)
		if err != nil {
			return nil, err
		}
		a.verifier = v
	}
	return a.verifier, nil
}

// RequireAPIKey guards server-to-server routes.
func (a *App) RequireAPIKey() echo.MiddlewareFunc {
	return auth.RequireAPIKey(a.Config.Auth.APIKey)
}

// Postgres returns the pool for purpose (store.PoolMain, PoolReadOnly,
// PoolWebhook), starting the private development cluster when no URL is
// configured and applying migrations on the main pool when configured to.
func (a *App) Postgres(ctx context.Context, purpose string) (*pgxpool.Pool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pool(ctx, purpose)
}

func (a *App) pool(ctx context.Context, purpose string) (*pgxpool.Pool, error) {
	if p := a.pools[purpose]; p != nil {
		return p, nil
	}
	cfg := a.Config.Postgres
	if cfg.URL == "" && a.embPG == nil {
		dir := filepath.Join(a.Config.DataDir, "postgres")
		ep, err := store.StartEmbeddedPostgres(ctx, dir, cfg.BinDir, a.Log)
		if err != nil {
			return nil, err
		}
		a.embPG = ep
		a.closers = append(a.closers, ep.Stop)
		a.devMode = append(a.devMode, "postgres ("+ep.Dir+")")
		if ep.StartedHere() { // a reused server was announced by StartEmbeddedPostgres
			a.Log.Warn("no postgres.url configured: started a private PostgreSQL", "dir", ep.Dir, "port", ep.Port)
		}
	}
	if cfg.URL == "" && purpose != store.PoolMain {
		// The private cluster has nobody else to migrate it: do it through
		// the owner login before handing out the others.
		if _, err := a.pool(ctx, store.PoolMain); err != nil {
			return nil, err
		}
	}
	dsn, size := a.dsnFor(purpose)
	pool, err := store.OpenPostgres(ctx, store.PostgresOptions{
		DSN: dsn, Purpose: purpose, MaxConns: size, Wait: cfg.ConnectWait, Log: a.Log,
		QueryExecMode: cfg.QueryExecMode,
	})
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() error { pool.Close(); return nil })
	if err := store.RegisterPoolMetrics(a.Metrics, purpose, pool); err != nil {
		return nil, err
	}
	if purpose == store.PoolReadOnly {
		// The read-only login may be served by a streaming replica.
		if err := store.RegisterReplicaMetrics(a.Metrics, purpose, pool); err != nil {
			return nil, err
		}
	}
	if purpose == store.PoolMain {
		if err := a.ensureSchema(ctx, pool); err != nil {
			return nil, err
		}
	}
	a.pools[purpose] = pool
	a.Server.AddCheck("postgres-"+purpose, func(ctx context.Context) error { return pool.Ping(ctx) })
	return pool, nil
}

// openedPools lists the purposes of the pools opened so far.
func (a *App) openedPools() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.pools))
	for p := range a.pools {
		out = append(out, p)
	}
	return out
}

func (a *App) dsnFor(purpose string) (string, int32) {
	cfg := a.Config.Postgres
	main := cfg.URL
	if main == "" {
		main = a.embPG.URL(store.DevOwner)
	}
	switch purpose {
	case store.PoolReadOnly:
		switch {
		case cfg.ReadOnlyURL != "":
			return cfg.ReadOnlyURL, cfg.ReadOnlyMaxConns
		case cfg.URL == "":
			return a.embPG.URL(store.DevReadOnlyLogin), cfg.ReadOnlyMaxConns
		}
		return main, cfg.ReadOnlyMaxConns
	case store.PoolWebhook:
		if cfg.WebhookURL != "" {
			return cfg.WebhookURL, cfg.WebhookMaxConns
		}
		return main, cfg.WebhookMaxConns
	}
	return main, cfg.MaxConns
}

// ensureSchema migrates or, when migrations at start are off, refuses to run
// against an out-of-date schema.
func (a *App) ensureSchema(ctx context.Context, pool *pgxpool.Pool) error {
	if a.Config.Postgres.MigrateOnStart {
		if _, err := store.Migrate(ctx, pool, store.Migrations(), a.Log); err != nil {
			return err
		}
		return nil
	}
	pending, err := store.PendingMigrations(ctx, pool, store.Migrations())
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return fmt.Errorf("the database schema is %d migration(s) behind: run `presenced migrate` (or set postgres.migrate_on_start)", len(pending))
	}
	return nil
}

// ResolveSecrets fills the JWT secret and API key of cfg from the data
// folder in development mode (auth.dev_secrets) when none is configured. It
// returns what it filled, for the development-mode warning.
func ResolveSecrets(cfg *config.Config) ([]string, error) {
	a := &cfg.Auth
	needSecret := a.JWTSecret == "" && a.JWKSURL == ""
	if !a.DevSecrets || (!needSecret && a.APIKey != "") {
		return nil, nil
	}
	s, err := auth.LoadOrCreateDevSecrets(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var filled []string
	if needSecret {
		a.JWTSecret = s.JWTSecret
		filled = append(filled, "jwt secret ("+filepath.Join(cfg.DataDir, auth.DevSecretsFile)+")")
	}
	if a.APIKey == "" {
		a.APIKey = s.APIKey
		filled = append(filled, "api key")
	}
	return filled, nil
}
