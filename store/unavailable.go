package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

// Unavailable tells whether err means a store was out of reach for the
// call that returned it, rather than that the call was wrong: the
// connection was refused, reset, closed or timed out, before the call or in
// the middle of it (a server killed mid-query ends the read with EOF); the
// server is starting, shutting down or out of connections; a Redis Cluster
// slot has no master, or a Redis is loading or read-only after a failover.
//
// A call cut in the middle may or may not have been applied, so the
// answer to the client is the retryable 503 with Retry-After: every write
// a client may retry is idempotent by key. Handlers map it so
// (web.ErrorHandler does for any error it is not told about), which is why
// this is a classification of the error's types and codes, never of its
// message.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	// A connection that ended: EOF mid-message, or closed under the call.
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EPIPE, syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true // dial, read and write failures and their timeouts
	}
	if postgresUnavailable(err) || redisUnavailable(err) {
		return true
	}
	return false
}

// postgresUnavailable: pgx's connection failures, and the SQLSTATEs of a
// server that cannot serve now (class 08 connection exceptions, class 53
// out of resources, 57P01-57P03 and 57P05 shutting down, crashed,
// starting, idle session timeout; 57014 a statement timeout).
func postgresUnavailable(err error) bool {
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, pgx.ErrTxClosed) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "57P01", "57P02", "57P03", "57P05", "57014", "58030":
		return true
	}
	return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53")
}

// redisUnavailable: go-redis's pool and client failures, and the replies
// of a node that cannot serve now.
func redisUnavailable(err error) bool {
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) || errors.Is(err, redis.ErrClosed) {
		return true
	}
	return redis.IsClusterDownError(err) || redis.IsLoadingError(err) || redis.IsReadOnlyError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err)
}
