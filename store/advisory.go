package store

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// AdvisoryLock is a session-level PostgreSQL advisory lock held on its own
// connection: the tool for "one leader among several workers" when the
// leader works in PostgreSQL anyway (outbox relay, controllers). The lock
// dies with the connection, so a crashed holder frees it at once.
type AdvisoryLock struct {
	conn *pgxpool.Conn
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
	id := LockID(name)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("advisory lock %s: %w", name, err)
	}
	if !ok {
		conn.Release()
		return nil, nil
	}
	return &AdvisoryLock{conn: conn, id: id}, nil
}

// Alive checks that the holding connection still works (and so still holds
// the lock).
func (l *AdvisoryLock) Alive(ctx context.Context) bool {
	return l.conn.Ping(ctx) == nil
}

// Release unlocks and returns the connection to the pool.
func (l *AdvisoryLock) Release() {
	ctx := context.Background()
	if _, err := l.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", l.id); err != nil {
		// The session is broken: destroy it, which also frees the lock.
		_ = l.conn.Conn().Close(ctx)
	}
	l.conn.Release()
}
