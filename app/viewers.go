package app

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/viewers"
)

// The viewers module is built once per process and shared by its parts
// (heartbeat, count, push, controller, abuse).
func viewersModule(a *App) (*viewers.Module, error) {
	v, err := a.memo("viewers", func() (any, error) { return buildViewers(a) })
	if err != nil {
		return nil, err
	}
	return v.(*viewers.Module), nil
}

func buildViewers(a *App) (*viewers.Module, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := a.Config.Viewers
	rdb, err := a.Redis(ctx)
	if err != nil {
		return nil, err
	}
	var limitRdb redis.UniversalClient
	if cfg.RateLimitRedisURL != "" {
		rc := a.Config.Redis
		rc.URL, rc.Cluster = cfg.RateLimitRedisURL, cfg.RateLimitRedisCluster
		if limitRdb, err = store.OpenRedis(rc); err != nil {
			return nil, fmt.Errorf("viewers.ratelimit_redis_url: %w", err)
		}
		a.OnStop(limitRdb.Close)
	}
	db, err := a.Postgres(ctx, store.PoolMain)
	if err != nil {
		return nil, err
	}
	h, err := a.Hub(ctx)
	if err != nil {
		return nil, err
	}
	ring, err := viewersKeyring(a.Config)
	if err != nil {
		return nil, err
	}
	m, err := viewers.New(viewers.Deps{
		Config: cfg, Redis: rdb, LimitRedis: limitRdb, DB: db, Hub: h, Sockets: a.Server.Sockets,
		Keys: a.Keys, Ring: ring, APIKey: a.RequireAPIKey(), Metrics: a.Metrics, Log: a.Log.With("module", "viewers"),
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// viewersKeyring is the session cookie key ring: configured keys, or a
// development key kept under data_dir when none are configured.
func viewersKeyring(cfg config.Config) (*keyring.Ring, error) {
	v := cfg.Viewers
	if v.CookieSigningKey == "" && len(v.CookieVerifyKeys) == 0 {
		r, err := keyring.LoadOrCreateDev(cfg.DataDir, "viewers-cookie")
		if err != nil {
			return nil, fmt.Errorf("viewers: development cookie key: %w", err)
		}
		return r, nil
	}
	r, err := keyring.Parse(v.CookieSigningKey, v.CookieVerifyKeys)
	if err != nil {
		return nil, fmt.Errorf("viewers.cookie_signing_key / cookie_verify_keys: %w", err)
	}
	return r, nil
}

func startViewersHeartbeat(a *App) error {
	m, err := viewersModule(a)
	if err != nil {
		return err
	}
	return m.StartHeartbeat(a.loopCtx, a.Routes(), a)
}

func startViewersCount(a *App) error {
	m, err := viewersModule(a)
	if err != nil {
		return err
	}
	return m.StartCount(a.loopCtx, a.Routes(), a)
}

func startViewersPush(a *App) error {
	m, err := viewersModule(a)
	if err != nil {
		return err
	}
	return m.StartPush(a.loopCtx, a.Routes(), a)
}

func startViewersController(a *App) error {
	m, err := viewersModule(a)
	if err != nil {
		return err
	}
	return m.StartController(a.loopCtx, a)
}

func startViewersAbuse(a *App) error {
	m, err := viewersModule(a)
	if err != nil {
		return err
	}
	return m.StartAbuse(a.loopCtx, a)
}
