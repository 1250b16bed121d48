package presence_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// A gateway appends its sessions' plain pings to the pings streams in
// batches: one entry per shard per period naming every session that
// pinged, not an entry per ping.
func TestPlainPingsAreAppendedInBatches(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.Shards = 2
	s := startServer(t, cfg)
	rdb := redisFor(t, cfg)
	const users, pings = 6, 3
	for i := range users {
		c := connect(t, s, fmt.Sprintf("pinger-%d", i))
		for range pings {
			c.send("session:ping", nil)
		}
	}
	ctx := context.Background()
	var entries []redis.XMessage
	seen := map[string]bool{}
	require.Eventually(t, func() bool {
		entries, seen = nil, map[string]bool{}
		for n := range cfg.Presence.Shards {
			msgs, err := rdb.XRange(ctx, fmt.Sprintf("%s{presence-shard:%d}:pings", cfg.Redis.Prefix, n), "-", "+").Result()
			require.NoError(t, err)
			entries = append(entries, msgs...)
		}
		for _, e := range entries {
			for _, mem := range strings.Fields(e.Values["m"].(string)) {
				seen[mem] = true
			}
		}
		return len(seen) == users
	}, waitFor, 50*time.Millisecond)
	// The sends take far less than a period: each shard's pings went out
	// in one or two flushes (18 entries, one per ping, before batching).
	require.LessOrEqual(t, len(entries), 2*cfg.Presence.Shards, "entries: %v", entries)
	for _, e := range entries {
		require.Equal(t, "p", e.Values["k"])
	}
}
