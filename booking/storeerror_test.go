package booking

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/refusal"
)

// startingPostgres answers every connection as a PostgreSQL server that is
// still starting up (or restarting): SQLSTATE 57P03 to the startup message.
func startingPostgres(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				be := pgproto3.NewBackend(conn, conn)
				for {
					msg, err := be.ReceiveStartupMessage()
					if err != nil {
						return
					}
					if _, ok := msg.(*pgproto3.SSLRequest); ok {
						if _, err := conn.Write([]byte("N")); err != nil {
							return
						}
						continue
					}
					break
				}
				be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "57P03", Message: "the database system is starting up"})
				_ = be.Flush()
			}()
		}
	}()
	return "postgres://u@" + ln.Addr().String() + "/db?sslmode=disable&connect_timeout=5"
}

// A PostgreSQL restarting refuses connections with 57P03 inside a
// ConnectError: that is "retry", not a bug.
func TestStoreErrorRestartingDatabaseIs503(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), startingPostgres(t))
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Begin(context.Background())
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "the refusal carries the server's error: %v", err)
	require.Equal(t, "57P03", pgErr.Code)

	mapped := storeError("begin hold", err)
	require.ErrorIs(t, mapped, refusal.ErrBusy, "a refusal to retry, not a 500: %v", err)
	require.Positive(t, refusal.RetryAfter(mapped))
	require.Equal(t, http.StatusServiceUnavailable, answerOf(mapped).Status)
}

func TestStoreErrorRetryableStates(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"57P01", "57P02", "57P03", "08006", "08001", "53300", "53200", "55P03", "57014", "40001", "40P01"} {
		err := storeError("x", &pgconn.PgError{Code: code})
		require.ErrorIsf(t, err, refusal.ErrBusy, "%s: %v", code, err)
		require.Equalf(t, http.StatusServiceUnavailable, answerOf(err).Status, "%s", code)
	}
	for _, code := range []string{"22P02", "42601", "23503"} {
		var r *refusal.Error
		err := storeError("x", &pgconn.PgError{Code: code})
		require.Falsef(t, errors.As(err, &r), "%s is a bug, not a retry", code)
		require.Nilf(t, answerOf(err), "%s is answered 500", code)
	}
}
