package waitingroom

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// Abandoned entries anywhere in the line, not only at its head, leave it:
// each tick's sweep reads a bounded stretch of the line from where the last
// one stopped, removes at most cleanup_limit, and wraps around at the end.
// Nobody who kept heartbeating is removed, and the order of those left is
// the join order. The room is paused: the sweep alone does the work.
func TestSweepRemovesAbandonedEntriesAlongTheLine(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, func(c *config.Waitingroom) { c.CleanupLimit = 3; c.SweepLimit = 7 })
		b.openRoom(t, "ev", Settings{Paused: true, HeartbeatTimeoutSeconds: 30})
		var here []string
		old := redisNow(t, rdb, "") - 31_000
		stale := map[string]bool{}
		for i := 0; i < 60; i++ {
			u := fmt.Sprintf("u-%02d", i)
			b.join(t, "ev", u)
			if i%4 == 1 || (i >= 40 && i < 50) { // scattered, and a run of ten deep in line
				stale[u] = true
				continue
			}
			here = append(here, u)
		}
		for u := range stale {
			b.setHeartbeat(t, "ev", u, old)
		}
		abandoned := 0
		for i := 0; i < 40 && abandoned < len(stale); i++ {
			r := b.tick(t, "ev")
			require.Equal(t, "paused", r.Status)
			require.LessOrEqual(t, r.Abandoned, 3, "cleanup_limit per tick")
			abandoned += r.Abandoned
		}
		require.Equal(t, len(stale), abandoned)
		left, err := rdb.ZRange(context.Background(), keysOf(b.keys, "ev").line, 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, here, left, "the heartbeating entries, in join order")
		for i, u := range here {
			require.EqualValues(t, i, b.join(t, "ev", u).Rank)
		}
		// Another full round finds nothing more to remove.
		for i := 0; i < 10; i++ {
			require.Zero(t, b.tick(t, "ev").Abandoned)
		}
	})
}

// Heartbeats rewrite only the low part of an entry's score: refreshing
// them in any order never moves anyone, including at the largest places a
// score holds (sequence numbers near 2^32 and drawn keys near -2^32, where
// Lua's own number formatting would lose digits).
func TestHeartbeatsNeverMoveAnyone(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	b := setup(t, rdb, nil)
	b.openRoom(t, "ev", Settings{Paused: true, HeartbeatTimeoutSeconds: 10})
	ctx := context.Background()
	k := keysOf(b.keys, "ev")
	require.NoError(t, rdb.Set(ctx, k.sequence, maxPlace-5, 0).Err())
	users := []string{"z", "y", "x", "w", "v"}
	for i, u := range users {
		require.EqualValues(t, i, b.join(t, "ev", u).Rank)
	}
	// One entry drawn to the most negative place: it sorts first.
	old := redisNow(t, rdb, "") - 60_000
	require.NoError(t, rdb.ZAdd(ctx, k.line, redis.Z{Score: entryScore(-maxPlace, old/1000), Member: "drawn"}).Err())
	for _, u := range users {
		b.setHeartbeat(t, "ev", u, old)
	}
	// The sockets' re-read refreshes every heartbeat (all are overdue).
	_, places, err := b.line.Places(ctx, "ev", append([]string{"drawn"}, users...))
	require.NoError(t, err)
	for i, p := range places {
		require.Equal(t, StateQueued, p.State)
		require.EqualValues(t, i, p.Rank)
	}
	scores, err := rdb.ZRangeWithScores(ctx, k.line, 0, -1).Result()
	require.NoError(t, err)
	now := redisNow(t, rdb, "")
	for i, z := range scores {
		require.Equal(t, append([]string{"drawn"}, users...)[i], z.Member)
		want := int64(maxPlace - 5 + i)
		if i == 0 {
			want = -maxPlace
		}
		require.Equal(t, want, entryPlace(z.Score), "place of %s", z.Member)
		require.InDelta(t, now, b.heartbeat(t, "ev", z.Member.(string)), 2000, "heartbeat of %s refreshed", z.Member)
	}
	// The sequence is spent: a new joiner is refused (fails closed), nobody moves.
	_, _, err = b.line.Join(ctx, "ev", "one-too-many")
	require.ErrorContains(t, err, "sequence exhausted")
	require.EqualValues(t, 5, b.join(t, "ev", "v").Rank)
}
