package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// openThrough opens a pool of the package database through a private
// PgBouncer in transaction mode with one server connection, so every
// client shares one server session: what goes wrong behind a pooler goes
// wrong every time.
func openThrough(t *testing.T, bouncer, mode string) *pgxpool.Pool {
	t.Helper()
	pool, err := store.OpenPostgres(context.Background(), store.PostgresOptions{
		DSN: bouncer, Purpose: store.PoolMain, MaxConns: 4, Wait: 10 * time.Second, QueryExecMode: mode,
	})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Behind PgBouncer in transaction mode the leader lock of the relay and the
// controllers has one holder. A session-level lock would not: the second
// worker's query runs on the same server session, where the lock is
// re-entrant, and both would lead.
func TestAdvisoryLockBehindTransactionPooler(t *testing.T) {
	t.Parallel()
	bouncer := testenv.PgBouncer(t, testenv.PostgresURL(t), "transaction", 1)
	ctx := context.Background()
	a := openThrough(t, bouncer, "cache_describe")
	b := openThrough(t, bouncer, "cache_describe")
	name := t.Name()

	// One server session: prove the pooler really shares it.
	var pidA, pidB int
	require.NoError(t, a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pidA))
	require.NoError(t, b.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pidB))
	require.Equal(t, pidA, pidB, "both clients on one server session")

	l1, err := store.TryAdvisoryLock(ctx, a, name)
	require.NoError(t, err)
	require.NotNil(t, l1)
	// The holder pins the only server session: the other worker waits for
	// it (PgBouncer queues the client), so it asks with a deadline.
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	l2, err := store.TryAdvisoryLock(tctx, b, name)
	cancel()
	if l2 != nil {
		l2.Release()
		l1.Release()
		t.Fatal("a second holder behind the pooler")
	}
	_ = err // refused or timed out waiting for the pinned session: either way not a holder
	require.True(t, l1.Alive(ctx))
	l1.Release()

	l3, err := store.TryAdvisoryLock(ctx, b, name)
	require.NoError(t, err)
	require.NotNil(t, l3, "free again once released")
	l3.Release()
}

// The statement cache mode decides whether presenced works behind a
// transaction-mode pooler: named prepared statements (pgx's default) break
// as soon as two clients share a server session; cache_describe (what the
// docs say to set), exec and simple_protocol work.
func TestQueryExecModeBehindTransactionPooler(t *testing.T) {
	t.Parallel()
	bouncer := testenv.PgBouncer(t, testenv.PostgresURL(t), "transaction", 1)
	ctx := context.Background()

	run := func(mode string) error {
		pools := []*pgxpool.Pool{openThrough(t, bouncer, mode), openThrough(t, bouncer, mode)}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for _, p := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 20; j++ {
					var n int
					// The same statement from both clients: each names it
					// alike and prepares it on the one server session.
					if err := p.QueryRow(ctx, "SELECT $1::int + 1", j).Scan(&n); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	require.Error(t, run("cache_statement"), "named prepared statements across a shared server session")
	require.NoError(t, run("cache_describe"))
	require.NoError(t, run("exec"))
	require.NoError(t, run("simple_protocol"))
}
