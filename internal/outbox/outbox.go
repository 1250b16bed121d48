// Package outbox is the transactional outbox: a domain change and its events
// commit in one PostgreSQL transaction (Add), and a relay publishes them
// afterwards to a Redis stream, at least once and in id order, after running
// the derived effects registered for their kind (cache invalidations).
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/presenced/presenced/store"
)

// Event is one outbox row.
type Event struct {
	ID          int64           `json:"id"`
	Kind        string          `json:"kind"`
	AggregateID string          `json:"aggregateId"`
	Payload     json.RawMessage `json:"payload"`
	CreatedAt   time.Time       `json:"createdAt"`
}

// Execer is what Add needs: a transaction (pgx.Tx) in practice, so the event
// commits or rolls back with the change it describes.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

var _ Execer = pgx.Tx(nil)

const insertEvent = `INSERT INTO outbox (kind, aggregate_id, payload) VALUES ($1, $2, $3)`

// Queue adds the insert of an event to a batch sent in the caller's
// transaction, saving a round trip.
func Queue(b *pgx.Batch, kind, aggregateID string, payload any) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("outbox %s: encode payload: %w", kind, err)
	}
	b.Queue(insertEvent, kind, aggregateID, body)
	return nil
}

// Add records an event in tx.
func Add(ctx context.Context, tx Execer, kind, aggregateID string, payload any) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("outbox %s: encode payload: %w", kind, err)
	}
	if _, err := tx.Exec(ctx, insertEvent, kind, aggregateID, body); err != nil {
		return fmt.Errorf("outbox %s: %w", kind, err)
	}
	return nil
}

// Stream is the Redis stream the relay appends events to, under the
// deployment's key prefix: every consumer group reads it.
func Stream(keys store.Keyspace) string { return keys.Global("outbox").Key("events") }
