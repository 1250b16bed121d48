package app

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/socket"
)

// partHost is the module.Host of one starting part: it hands out only the
// stores the part declared in the role table.
type partHost struct {
	a     *App
	part  string
	needs []dependency
}

var _ module.Host = (*partHost)(nil)

func (h *partHost) Routes() *echo.Group            { return h.a.Routes() }
func (h *partHost) Sockets() *socket.Sockets       { return h.a.Server.Sockets }
func (h *partHost) Users() (*auth.Verifier, error) { return h.a.Users() }
func (h *partHost) RequireAPIKey() echo.MiddlewareFunc {
	return auth.RequireAPIKey(h.a.Config.Auth.APIKey)
}
func (h *partHost) Go(name string, run func(context.Context) error) { h.a.Go(name, run) }

func (h *partHost) Redis(ctx context.Context) (redis.UniversalClient, error) {
	if err := h.declared(needRedis); err != nil {
		return nil, err
	}
	return h.a.Redis(ctx)
}

func (h *partHost) LimitRedis(ctx context.Context) (redis.UniversalClient, error) {
	if err := h.declared(needLimits); err != nil {
		return nil, err
	}
	return h.a.LimitRedis(ctx)
}

func (h *partHost) Hub(ctx context.Context) (*hub.Hub, error) {
	if err := h.declared(needRedis); err != nil {
		return nil, err
	}
	return h.a.Hub(ctx)
}

func (h *partHost) Postgres(ctx context.Context, purpose string) (*pgxpool.Pool, error) {
	if err := h.declared(poolNeed(purpose)); err != nil {
		return nil, err
	}
	return h.a.Postgres(ctx, purpose)
}

func (h *partHost) declared(d dependency) error {
	if !slices.Contains(h.needs, d) {
		return fmt.Errorf("part %s asked for %s: %w", h.part, d, module.ErrUndeclared)
	}
	return nil
}

// poolNeed is the dependency a pool purpose stands for.
func poolNeed(purpose string) dependency {
	switch purpose {
	case store.PoolMain:
		return needPostgres
	case store.PoolReadOnly:
		return needReadOnly
	case store.PoolWebhook:
		return needWebhook
	}
	return dependency("postgres-" + purpose)
}
