package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool purposes: each is a separate pgx pool with its own login and size, so a
// flood on one (webhooks, browsing) cannot take the connections of another.
const (
	PoolMain     = "main"
	PoolReadOnly = "readonly"
	PoolWebhook  = "webhook"
)

// PostgresOptions describe one pool and how long to wait for its server.
type PostgresOptions struct {
	DSN      string
	Purpose  string // PoolMain, PoolReadOnly, PoolWebhook
	MaxConns int32
	// Wait is how long a starting process waits for the server to answer
	// (postgres.connect_wait), so processes started together with their
	// database come up cleanly.
	Wait time.Duration
	// Log gets a progress line every waitProgressEvery while waiting.
	Log *slog.Logger
	// QueryExecMode (postgres.query_exec_mode) overrides the DSN's
	// statement mode when set: cache_describe behind a transaction-mode
	// pooler.
	QueryExecMode string
}

// queryExecModes maps postgres.query_exec_mode to pgx's modes.
var queryExecModes = map[string]pgx.QueryExecMode{
	"cache_statement": pgx.QueryExecModeCacheStatement,
	"cache_describe":  pgx.QueryExecModeCacheDescribe,
	"describe_exec":   pgx.QueryExecModeDescribeExec,
	"exec":            pgx.QueryExecModeExec,
	"simple_protocol": pgx.QueryExecModeSimpleProtocol,
}

// waitProgressEvery spaces the "still waiting" lines.
const waitProgressEvery = 5 * time.Second

// OpenPostgres creates a pool and waits until the server answers or
// opt.Wait passes.
func OpenPostgres(ctx context.Context, opt PostgresOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(opt.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres %s pool: parse dsn: %w", opt.Purpose, redactErr(err, opt.DSN))
	}
	cfg.MaxConns = opt.MaxConns
	if opt.QueryExecMode != "" {
		mode, ok := queryExecModes[opt.QueryExecMode]
		if !ok {
			return nil, fmt.Errorf("postgres %s pool: unknown query exec mode %q", opt.Purpose, opt.QueryExecMode)
		}
		cfg.ConnConfig.DefaultQueryExecMode = mode
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "presenced-" + opt.Purpose
	addr := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres %s pool: %w", opt.Purpose, err)
	}
	start := time.Now()
	nextNote := start.Add(waitProgressEvery)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = pool.Ping(pctx)
		cancel()
		if err == nil {
			return pool, nil
		}
		if time.Since(start) >= opt.Wait || ctx.Err() != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres %s pool: %s (%s) did not answer within %s (postgres.connect_wait): %s",
				opt.Purpose, addr, Redact(opt.DSN), opt.Wait, oneLine(errors.Join(err, ctx.Err())))
		}
		if now := time.Now(); now.After(nextNote) && opt.Log != nil {
			opt.Log.Info("waiting for PostgreSQL", "addr", addr, "pool", opt.Purpose,
				"waited", now.Sub(start).Round(time.Second), "gives_up_after", opt.Wait, "err", oneLine(err))
			nextNote = now.Add(waitProgressEvery)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// oneLine folds pgx's multi-line connect errors (one line per address
// tried) into one, so a fatal error stays one line.
func oneLine(err error) string {
	if err == nil {
		return ""
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " | ")), " ")
}
