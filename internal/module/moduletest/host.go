// Package moduletest gives module tests a module.Host over real stores: the
// test decides which stores the part gets, loops run until the test ends.
package moduletest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/internal/spectest"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web"
	"github.com/presenced/presenced/web/socket"
)

// Stores are what a test host hands out; a nil store is undeclared.
type Stores struct {
	Redis redis.UniversalClient
	// LimitRedis is the Redis of shared limits; nil: Redis.
	LimitRedis redis.UniversalClient
	Hub        *hub.Hub
	Postgres   *pgxpool.Pool
	ReadOnly   *pgxpool.Pool
	Webhook    *pgxpool.Pool
	Users      *auth.Verifier
	APIKey     string
}

// Host is a module.Host for tests.
type Host struct {
	srv    *web.Server
	stores Stores
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	loops []string
	errs  []error
}

var _ module.Host = (*Host)(nil)

// New returns a host serving routes on srv (nil for parts that mount
// nothing). Loops start at once and stop when the test ends; a loop's error
// fails the test. Every response and socket frame of srv in a test (not a
// benchmark) is checked against docs/openapi.yaml and docs/asyncapi.yaml.
func New(t testing.TB, srv *web.Server, s Stores) *Host {
	if _, bench := t.(*testing.B); srv != nil && !bench {
		spectest.Validate(t, srv.Echo)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Host{srv: srv, stores: s, ctx: ctx, cancel: cancel}
	t.Cleanup(func() {
		h.Stop()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, err := range h.errs {
			t.Errorf("loop: %v", err)
		}
	})
	return h
}

// Stop cancels the loops and waits for them, as a process stopping would.
func (h *Host) Stop() {
	h.cancel()
	h.wg.Wait()
}

// Loops lists the loops started so far, by name.
func (h *Host) Loops() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.loops...)
}

func (h *Host) Routes() *echo.Group                { return h.srv.Echo.Group("") }
func (h *Host) Sockets() *socket.Sockets           { return h.srv.Sockets }
func (h *Host) RequireAPIKey() echo.MiddlewareFunc { return auth.RequireAPIKey(h.stores.APIKey) }

func (h *Host) Go(name string, run func(ctx context.Context) error) {
	h.mu.Lock()
	h.loops = append(h.loops, name)
	h.mu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		if err := run(h.ctx); err != nil && h.ctx.Err() == nil {
			h.mu.Lock()
			h.errs = append(h.errs, fmt.Errorf("%s: %w", name, err))
			h.mu.Unlock()
		}
	}()
}

func (h *Host) Users() (*auth.Verifier, error) {
	return given(h.stores.Users, "user verifier")
}

func (h *Host) Redis(context.Context) (redis.UniversalClient, error) {
	return given(h.stores.Redis, "redis")
}

func (h *Host) Hub(context.Context) (*hub.Hub, error) { return given(h.stores.Hub, "hub") }

func (h *Host) LimitRedis(ctx context.Context) (redis.UniversalClient, error) {
	if h.stores.LimitRedis != nil {
		return h.stores.LimitRedis, nil
	}
	return h.Redis(ctx)
}

func (h *Host) Postgres(_ context.Context, purpose string) (*pgxpool.Pool, error) {
	switch purpose {
	case store.PoolMain:
		return given(h.stores.Postgres, "postgres")
	case store.PoolReadOnly:
		return given(h.stores.ReadOnly, "postgres-readonly")
	case store.PoolWebhook:
		return given(h.stores.Webhook, "postgres-webhook")
	}
	return nil, fmt.Errorf("unknown pool %q", purpose)
}

func given[T comparable](v T, what string) (T, error) {
	var zero T
	if v == zero {
		return zero, fmt.Errorf("%s: %w", what, module.ErrUndeclared)
	}
	return v, nil
}
