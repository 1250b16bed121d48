package waitingroom

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// A rolling upgrade during a sale: people queued by a binary of the old
// layout (queue user -> sequence, heartbeats user -> ms) keep their places.
// Once a tick has marked the room, whatever touches them (join, the
// sockets' re-read) moves them into the line; each tick moves a bounded
// slice from the old queue's head and
// admits nobody from behind it, so admission stays first in, first out
// across both, abandoned old entries are never admitted, and someone an old
// binary queued again at the back keeps the earlier place.
func TestRollingUpgradeKeepsOldLayoutPlaces(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, func(c *config.Waitingroom) { c.CleanupLimit = 5; c.SweepLimit = 5 })
		b.openRoom(t, "ev", Settings{Paused: true, Capacity: 1000, Batch: 100, HeartbeatTimeoutSeconds: 30})
		ctx := context.Background()
		k := keysOf(b.keys, "ev")
		now := redisNow(t, rdb, "")

		// The old layout, as its join script left it: a drawn lottery entry
		// first, then sequences 1..20, two of them silent past the timeout.
		var want []string
		old := func(user string, score float64, beat int64) {
			require.NoError(t, rdb.ZAdd(ctx, k.oldQueue, redis.Z{Score: score, Member: user}).Err())
			require.NoError(t, rdb.ZAdd(ctx, k.oldBeats, redis.Z{Score: float64(beat), Member: user}).Err())
		}
		old("lucky", -1234567890123, now)
		want = append(want, "lucky")
		for i := 1; i <= 20; i++ {
			u := fmt.Sprintf("old-%02d", i)
			if i == 3 || i == 7 {
				old(u, float64(i), now-31_000)
				continue
			}
			old(u, float64(i), now)
			want = append(want, u)
		}
		require.NoError(t, rdb.Set(ctx, k.sequence, 20, 0).Err())

		// The first tick of a new worker (the room is paused) moves the old
		// queue's head over (sweep_limit 5 a tick: lucky, old-01..04, of
		// whom old-03 is abandoned) and marks the room for joins.
		r := b.tick(t, "ev")
		require.Equal(t, 1, r.Abandoned)
		require.Empty(t, r.Admitted)

		// New joiners queue behind everyone; old ones keep their places.
		for i := 1; i <= 5; i++ {
			u := fmt.Sprintf("new-%02d", i)
			require.EqualValues(t, 19+i, b.join(t, "ev", u).Rank)
			want = append(want, u)
		}
		require.EqualValues(t, 14, b.join(t, "ev", "old-15").Rank, "moved over with its place")
		_, places, err := b.line.Places(ctx, "ev", []string{"old-18", "new-02", "nobody"})
		require.NoError(t, err)
		require.EqualValues(t, 17, places[0].Rank)
		require.EqualValues(t, 21, places[1].Rank)
		require.Equal(t, StateAbsent, places[2].State)
		// An old admit node queues old-18 again at the back: it keeps its place.
		require.NoError(t, rdb.ZAdd(ctx, k.oldQueue, redis.Z{Score: 26, Member: "old-18"}).Err())
		require.NoError(t, rdb.ZAdd(ctx, k.oldBeats, redis.Z{Score: float64(now), Member: "old-18"}).Err())
		stats, err := b.line.Stats(ctx, "ev")
		require.NoError(t, err)
		require.Equal(t, 26, stats.Queued, "both layouts counted (old-18 twice until it moves)")

		b.openRoom(t, "ev", Settings{Capacity: 1000, Batch: 100, HeartbeatTimeoutSeconds: 30})
		var admitted []string
		abandoned := 1
		for i := 0; i < 10 && len(admitted) < len(want); i++ {
			r = b.tick(t, "ev")
			require.Equal(t, "ok", r.Status)
			admitted = append(admitted, r.Admitted...)
			abandoned += r.Abandoned
		}
		require.Equal(t, want, admitted, "first in, first out across both layouts")
		require.Equal(t, 2, abandoned, "the silent old entries")
		n, err := rdb.Exists(ctx, k.oldQueue, k.oldBeats).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the old layout is emptied")
		require.Equal(t, "0", rdb.HGet(ctx, k.state, "old").Val(), "joins stop looking for it")
		n, err = rdb.ZCard(ctx, k.line).Result()
		require.NoError(t, err)
		require.Zero(t, n)
	})
}
