package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool purposes: each is a separate pgx pool with its own login and size, so a
// flood on one (webhooks, browsing) cannot take the connections of another.
const (
	PoolMain     = "main"
	PoolReadOnly = "readonly"
	PoolWebhook  = "webhook"
)

// OpenPostgres creates a pool for dsn and waits (up to wait) for the server to
// answer, so processes started together with their database come up cleanly.
func OpenPostgres(ctx context.Context, dsn, purpose string, maxConns int32, wait time.Duration) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres %s pool: parse dsn: %w", purpose, redactErr(err, dsn))
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = "presenced-" + purpose
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres %s pool: %w", purpose, err)
	}
	deadline := time.Now().Add(wait)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = pool.Ping(pctx)
		cancel()
		if err == nil {
			return pool, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres %s pool: %s does not answer: %w", purpose, Redact(dsn), errors.Join(err, ctx.Err()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}
