package waitingroom

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// The budget docs/waitingroom.md gives: a queued user costs at most 200
// bytes of Redis memory with 36-byte ids. The line is filled by real joins, one tick runs and the
// sockets' position read refreshes heartbeats, so every key a queued user
// touches is counted, whatever the layout: MEMORY USAGE (exact, SAMPLES 0)
// of every key under the event's hash tag, less what the empty room held.
// Redis's allocations are deterministic for the same commands, so the bound
// holds with margin on every run: the line as one sorted set measures
// 138 B here; the earlier layout of two sorted sets per user (queue and
// heartbeat index) measured 283 B.
func TestQueuedUserCostsAtMost200Bytes(t *testing.T) {
	t.Parallel()
	const n = 20_000
	rdb := testenv.Redis(t)
	b := setup(t, rdb, nil)
	b.openRoom(t, "ev", Settings{Paused: true})
	ctx := context.Background()
	empty := eventMemory(t, rdb, b, "ev")

	joinAll(t, b, "ev", n, userID36)
	require.Equal(t, "paused", b.tick(t, "ev").Status)
	users := make([]string, placesChunk)
	for i := range users {
		users[i] = userID36(i * 37)
	}
	_, places, err := b.line.Places(ctx, "ev", users)
	require.NoError(t, err)
	require.Equal(t, StateQueued, places[1].State)
	stats, err := b.line.Stats(ctx, "ev")
	require.NoError(t, err)
	require.EqualValues(t, n, stats.Queued)

	perUser := float64(eventMemory(t, rdb, b, "ev")-empty) / n
	t.Logf("%.1f bytes of Redis memory per queued user (36-byte ids, %d in line)", perUser, n)
	require.LessOrEqual(t, perUser, 200.0)
}

// eventMemory sums MEMORY USAGE over every key of event's waiting room.
func eventMemory(t testing.TB, rdb redis.UniversalClient, b *bundle, event string) int64 {
	t.Helper()
	ctx := context.Background()
	var total int64
	iter := rdb.Scan(ctx, 0, b.keys.Entity("wr", event).String()+"*", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := rdb.Do(ctx, "MEMORY", "USAGE", iter.Val(), "SAMPLES", "0").Int64()
		require.NoError(t, err)
		total += v
	}
	require.NoError(t, iter.Err())
	return total
}

// joinAll puts n users in event's line through the join script, eight at a
// time.
func joinAll(tb testing.TB, b *bundle, event string, n int, id func(int) string) {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if _, _, err := b.line.Join(context.Background(), event, id(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(tb, <-errs)
}
