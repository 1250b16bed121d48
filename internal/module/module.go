// Package module is the contract between the process and its domain
// modules. Every module is built the same way: a Module made by New(Deps),
// whose Deps are configuration, keys, metrics, a logger and the ports of
// other modules (never a store), and whose parts start with one signature,
// StartX(ctx, host). A part takes its stores from the Host as it starts, so
// the role table's declaration of what each part needs is checked by the
// code, not only by reading.
package module

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/web/socket"
)

// Host is what the process hands a module part as it starts.
type Host interface {
	// Routes is the group the part mounts its HTTP routes on.
	Routes() *echo.Group
	// Go registers a background loop. It runs from when the process starts
	// serving until shutdown cancels its context; a loop that returns an
	// error stops the process. Every loop must be safe to run in several
	// processes at once (leases, advisory locks, consumer groups).
	Go(name string, run func(ctx context.Context) error)
	// Sockets upgrades WebSockets and opens SSE streams, and drains them at
	// shutdown.
	Sockets() *socket.Sockets
	// Users verifies user JWTs.
	Users() (*auth.Verifier, error)
	// RequireAPIKey guards server-to-server routes.
	RequireAPIKey() echo.MiddlewareFunc

	// Redis is the shared coordination store.
	Redis(ctx context.Context) (redis.UniversalClient, error)
	// LimitRedis is the Redis of limits shared between processes (the
	// viewers' prefix buckets): its own server when one is configured, so
	// an abusive flood cannot slow the coordination store, else the main
	// one. A part fails open when it is down; /readyz reports it without
	// turning the process unready.
	LimitRedis(ctx context.Context) (redis.UniversalClient, error)
	// Hub is the process's pub/sub fan-out over Redis.
	Hub(ctx context.Context) (*hub.Hub, error)
	// Postgres is the pool for a purpose: store.PoolMain, store.PoolReadOnly
	// or store.PoolWebhook.
	Postgres(ctx context.Context, purpose string) (*pgxpool.Pool, error)
}

// ErrUndeclared is returned by a Host when a part asks for a store it did
// not declare in the role table.
var ErrUndeclared = errors.New("store not declared by this part in the role table")
