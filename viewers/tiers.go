package viewers

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// shardTier is a hotel's shard count for reads and for writes, each 1, 16 or 64.
// Readers always cover writers, so a count unions max(Read, Write) shards.
type shardTier struct {
	Read, Write int
}

// readShards is how many shards a count must union.
func (t shardTier) readShards() int { return max(t.Read, t.Write) }

// hot hotels flush more often.
func (t shardTier) hot() bool { return t.Read > 1 || t.Write > 1 }

var baseTier = shardTier{Read: 1, Write: 1}

// tierCache holds every hot hotel's tier, re-read from PostgreSQL every
// tier_cache_ttl. A hotel absent from it has one shard. Reads are one
// atomic load and a map lookup; PostgreSQL being down only means the
// snapshot ages, which is safe: writing with a lower tier than the truth is
// always counted, because readers union every shard of the read tier.
type tierCache struct {
	db  *pgxpool.Pool
	ttl time.Duration
	log *slog.Logger
	m   *metrics

	snap   atomic.Pointer[map[string]shardTier]
	loaded atomic.Bool
	// refreshMu makes refreshes store in the order they read: a slow one
	// that read before a tier changed must not overwrite a later one that
	// read after (the loop and a direct refresh, as after a promotion).
	refreshMu sync.Mutex
}

func newTierCache(db *pgxpool.Pool, ttl time.Duration, m *metrics, log *slog.Logger) *tierCache {
	t := &tierCache{db: db, ttl: ttl, log: log, m: m}
	empty := map[string]shardTier{}
	t.snap.Store(&empty)
	return t
}

func (t *tierCache) get(hotel string) shardTier {
	if v, ok := (*t.snap.Load())[hotel]; ok {
		return v
	}
	return baseTier
}

// refresh reloads the hot hotels.
func (t *tierCache) refresh(ctx context.Context) error {
	t.refreshMu.Lock()
	defer t.refreshMu.Unlock()
	rows, err := t.db.Query(ctx, `SELECT hotel_id, read_tier, write_tier FROM viewers_hotel_tiers WHERE read_tier > 1 OR write_tier > 1`)
	if err != nil {
		return fmt.Errorf("load tiers: %w", err)
	}
	defer rows.Close()
	next := map[string]shardTier{}
	byTier := map[int]int{16: 0, 64: 0}
	for rows.Next() {
		var id string
		var r, w int16
		if err := rows.Scan(&id, &r, &w); err != nil {
			return fmt.Errorf("load tiers: %w", err)
		}
		next[id] = shardTier{Read: int(r), Write: int(w)}
		byTier[int(r)]++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load tiers: %w", err)
	}
	t.snap.Store(&next)
	t.loaded.Store(true)
	for tier, n := range byTier {
		t.m.hotHotels.WithLabelValues(strconv.Itoa(tier)).Set(float64(n))
	}
	return nil
}

// run refreshes until ctx ends; until the first load succeeds it retries
// every second.
func (t *tierCache) run(ctx context.Context) error {
	for {
		wait := t.ttl
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := t.refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			t.log.Warn("viewers: tier refresh failed; keeping the last snapshot", "err", err)
		}
		if !t.loaded.Load() {
			wait = min(wait, time.Second)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}
