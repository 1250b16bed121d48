package store

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AdvisoryLock is a PostgreSQL advisory lock held on its own connection: the
// tool for "one leader among several workers" when the leader works in
// PostgreSQL anyway (outbox relay, controllers).
//
// The lock is transaction-scoped and the transaction stays open while the
// lock is held. A session-level lock would be wrong behind a pooler in
// transaction mode (PgBouncer): the pooler hands the server session to
// other clients between statements, and advisory locks are re-entrant per
// session, so a second worker would "take" the lock it already holds on
// that session, and the unlock could run on another session. An open
// transaction pins the server session to this connection, directly or
// through the pooler. It takes no transaction id and, in READ COMMITTED,
// holds no snapshot between statements, so it does not hold back vacuum.
// The lock dies with the connection or the transaction, so a crashed
// holder frees it at once.
type AdvisoryLock struct {
	conn *pgxpool.Conn
	tx   pgx.Tx
	id   int64
}

// LockID derives a stable advisory lock id from a name.
func LockID(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("presenced:" + name))
	return int64(h.Sum64())
}

// TryAdvisoryLock takes the named lock without waiting. It returns nil, nil
// when another session holds it.
func TryAdvisoryLock(ctx context.Context, pool *pgxpool.Pool, name string) (*AdvisoryLock, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("advisory lock %s: %w", name, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		return nil, fmt.Errorf("advisory lock %s: begin: %w", name, err)
	}
	id := LockID(name)
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", id).Scan(&ok); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		conn.Release()
		return nil, fmt.Errorf("advisory lock %s: %w", name, err)
	}
	if !ok {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		conn.Release()
		return nil, nil
	}
	return &AdvisoryLock{conn: conn, tx: tx, id: id}, nil
}

// Alive checks that the holding transaction still works (and so still
// holds the lock): a statement in a broken or aborted transaction fails.
func (l *AdvisoryLock) Alive(ctx context.Context) bool {
	_, err := l.tx.Exec(ctx, "SELECT 1")
	return err == nil
}

// Release ends the transaction, which frees the lock, and returns the
// connection to the pool.
func (l *AdvisoryLock) Release() {
	ctx := context.Background()
	if err := l.tx.Rollback(ctx); err != nil {
		// The session is broken: destroy it, which also frees the lock.
		_ = l.conn.Conn().Close(ctx)
	}
	l.conn.Release()
}
