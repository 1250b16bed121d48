package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// What a real server and a real cut link return is what Unavailable must
// classify: a call cut in the middle, a refused connection, a timeout, a
// server that cannot serve now are "unavailable"; a wrong call is not.
func TestUnavailableClassifiesRealFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgURL := testenv.PostgresURL(t)
	pgProxy := testenv.NewFaultProxy(t, testenv.HostPort(t, pgURL))
	rds := testenv.NewRedisServer(t)
	redisProxy := testenv.NewFaultProxy(t, testenv.HostPort(t, rds.URL))

	// A query in flight when the link is cut: EOF or a reset mid-read.
	conn, err := pgx.Connect(ctx, pgProxy.Via(pgURL))
	require.NoError(t, err)
	cut := make(chan error, 1)
	go func() { _, err := conn.Exec(ctx, "SELECT pg_sleep(10)"); cut <- err }()
	time.Sleep(300 * time.Millisecond)
	pgProxy.Partition()
	err = <-cut
	require.Error(t, err)
	require.True(t, store.Unavailable(fmt.Errorf("read event: %w", err)), "cut mid-query: %v", err)
	// The same connection afterwards: closed.
	_, err = conn.Exec(ctx, "SELECT 1")
	require.True(t, store.Unavailable(err), "closed connection: %v", err)
	// Refused while the link is down.
	_, err = pgx.Connect(ctx, pgProxy.Via(pgURL))
	require.True(t, store.Unavailable(err), "refused: %v", err)
	pgProxy.Heal()

	direct, err := pgx.Connect(ctx, pgURL)
	require.NoError(t, err)
	defer direct.Close(ctx)
	_, err = direct.Exec(ctx, "SET statement_timeout = 50")
	require.NoError(t, err)
	_, err = direct.Exec(ctx, "SELECT pg_sleep(1)")
	require.True(t, store.Unavailable(err), "statement timeout: %v", err)
	_, err = direct.Exec(ctx, "SET statement_timeout = 0")
	require.NoError(t, err)
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = direct.Exec(tctx, "SELECT pg_sleep(1)")
	cancel()
	require.True(t, store.Unavailable(err), "context deadline: %v", err)
	direct2, err := pgx.Connect(ctx, pgURL)
	require.NoError(t, err)
	defer direct2.Close(ctx)
	for _, sql := range []string{"SELEC 1", "SELECT 1/0", "CREATE TEMP TABLE u (x int PRIMARY KEY); INSERT INTO u VALUES (1), (1)"} {
		_, err = direct2.Exec(ctx, sql)
		require.Error(t, err, sql)
		require.False(t, store.Unavailable(err), "%s is a wrong call: %v", sql, err)
	}
	err = direct2.QueryRow(ctx, "SELECT 1 WHERE false").Scan(new(int))
	require.ErrorIs(t, err, pgx.ErrNoRows)
	require.False(t, store.Unavailable(err))

	// Redis: a blocking call in flight when the link is cut.
	opt, err := redis.ParseURL(redisProxy.Via(rds.URL))
	require.NoError(t, err)
	opt.MaxRetries = -1
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	go func() { cut <- rdb.BLPop(ctx, 10*time.Second, "nothing").Err() }()
	time.Sleep(300 * time.Millisecond)
	redisProxy.Partition()
	err = <-cut
	require.True(t, store.Unavailable(err), "cut mid-call: %v", err)
	err = rdb.Ping(ctx).Err()
	require.True(t, store.Unavailable(err), "refused: %v", err)
	redisProxy.Heal()
	require.NoError(t, rdb.Ping(ctx).Err())
	require.NoError(t, rdb.Set(ctx, "s", "v", 0).Err())
	err = rdb.LPush(ctx, "s", "x").Err()
	require.Error(t, err)
	require.False(t, store.Unavailable(err), "WRONGTYPE is a wrong call: %v", err)
	err = rdb.Get(ctx, "absent").Err()
	require.ErrorIs(t, err, redis.Nil)
	require.False(t, store.Unavailable(err))
	require.False(t, store.Unavailable(errors.New("anything else")))
	require.False(t, store.Unavailable(nil))
}
