package presence

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

func TestFollowerCountsAreReadOnceWhileFarFromTheCap(t *testing.T) {
	t.Parallel()
	fc := newFollowerCounts(100)
	ids := []string{"a", "b", "c"}
	require.Equal(t, []int{0, 1, 2}, fc.unknown(ids), "nothing read yet")
	fc.read("a", 10)
	fc.read("b", 89)
	fc.read("c", 90)
	require.Equal(t, []int{2}, fc.unknown(ids), "c is within a tenth of the cap")
	fc.added([]string{"b", "x"})
	require.Equal(t, []int{1, 2}, fc.unknown(ids), "b reached the margin with a follower added here")
	require.Equal(t, []int{0}, fc.unknown([]string{"x"}), "an add does not make a size known")

	fc.mu.Lock()
	fc.resetAt = time.Now().Add(-fc.ttl)
	fc.mu.Unlock()
	require.Equal(t, []int{0, 1, 2}, fc.unknown(ids), "sizes older than the TTL are read again")
}

func TestFollowerCountsWithASmallCapReadAtTheCap(t *testing.T) {
	t.Parallel()
	fc := newFollowerCounts(2)
	fc.read("w", 0)
	require.Empty(t, fc.unknown([]string{"w"}))
	fc.added([]string{"w"})
	require.Empty(t, fc.unknown([]string{"w"}), "one of two")
	fc.added([]string{"w"})
	require.Equal(t, []int{0}, fc.unknown([]string{"w"}), "at the cap the size is read, so the refusal is exact")
}

// A second user following the same 20 users in the same second sends no
// size read: the first one's are reused.
func TestFollowersOfTheSameUsersReadTheirSizesOnce(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	m.st.counts.ttl = time.Hour // a stalled machine must not expire them
	ctx := context.Background()
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("subject-%d", i))
	}
	follow := func(user string) []string {
		sid := store.NewToken()[:16]
		_, err := m.st.step(ctx, user, "open", sid)
		require.NoError(t, err)
		rt := &testenv.RedisTrips{}
		rdb.AddHook(rt)
		rt.Start()
		mctx := rt.Mark(ctx)
		_, err = m.st.changeSubscriptions(mctx, user, sid, subSet, ids)
		require.NoError(t, err)
		_, names := rt.Count()
		return names
	}
	first := follow("alice")
	second := follow("bob")
	require.Contains(t, first, "scard")
	require.False(t, slices.Contains(second, "scard"), "sizes read again: %v", second)
	followers, err := rdb.SMembers(ctx, m.keys.user("subject-7").followers).Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"alice", "bob"}, followers)
}
