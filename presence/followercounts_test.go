package presence

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// read claims the sizes of ids and reports them as read: what a caller of
// fullSubjects does.
func readSizes(t *testing.T, fc *followerCounts, sizes map[string]int64) {
	t.Helper()
	var ids []string
	for id := range sizes {
		ids = append(ids, id)
	}
	c := fc.claim(ids)
	require.Len(t, c.mine, len(ids))
	n := make([]int64, len(c.mine))
	for i, at := range c.mine {
		n[i] = sizes[ids[at]]
	}
	fc.done(c.entries, n)
}

func TestFollowerCountsAreReadOnceWhileFarFromTheCap(t *testing.T) {
	t.Parallel()
	fc := newFollowerCounts(100)
	ids := []string{"a", "b", "c"}
	readSizes(t, fc, map[string]int64{"a": 10, "b": 89, "c": 90})
	c := fc.claim(ids)
	require.Equal(t, []int{2}, c.mine, "c is within a tenth of the cap")
	fc.done(c.entries, []int64{90})
	fc.added([]string{"b", "x"})
	require.Equal(t, []int{1, 2}, fc.claim(ids).mine, "b reached the margin with a follower added here")
	require.Equal(t, []int{0}, fc.claim([]string{"x"}).mine, "an add does not make a size known")

	fc.mu.Lock()
	fc.resetAt = time.Now().Add(-fc.ttl)
	fc.mu.Unlock()
	require.Equal(t, []int{0, 1, 2}, fc.claim(ids).mine, "sizes older than the TTL are read again")
}

func TestFollowerCountsWithASmallCapReadAtTheCap(t *testing.T) {
	t.Parallel()
	fc := newFollowerCounts(2)
	readSizes(t, fc, map[string]int64{"w": 0})
	require.Empty(t, fc.claim([]string{"w"}).mine)
	fc.added([]string{"w"})
	require.Empty(t, fc.claim([]string{"w"}).mine, "one of two")
	fc.added([]string{"w"})
	require.Equal(t, []int{0}, fc.claim([]string{"w"}).mine, "at the cap the size is read, so the refusal is exact")
}

// A size being read is waited for, not read again; a failed read leaves
// the waiters to read it themselves.
func TestFollowerCountsShareAReadOnItsWay(t *testing.T) {
	t.Parallel()
	fc := newFollowerCounts(100)
	first := fc.claim([]string{"a", "b"})
	require.Equal(t, []int{0, 1}, first.mine)
	second := fc.claim([]string{"b", "c"})
	require.Equal(t, []int{1}, second.mine, "c is new")
	require.Equal(t, []int{0}, second.waiting, "b is on its way")
	require.False(t, isClosed(second.pending[0].read))
	fc.done(first.entries, []int64{3, 4})
	require.True(t, isClosed(second.pending[0].read))
	require.True(t, fc.trusted(second.pending[0]))

	third := fc.claim([]string{"d"})
	fourth := fc.claim([]string{"d"})
	require.Equal(t, []int{0}, fourth.waiting)
	fc.done(third.entries, nil)
	require.False(t, fc.trusted(fourth.pending[0]), "the read failed")
	require.Equal(t, []int{0}, fc.claim([]string{"d"}).mine, "and the next caller reads it")
}

// A second user following the same 20 users in the same second sends no
// size read: the first one's are reused.
func TestFollowersOfTheSameUsersReadTheirSizesOnce(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	m.st.counts.ttl = time.Hour // a stalled machine must not expire them
	ctx := context.Background()
	ids := subjects(20)
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

// Eight users following the same 20 users at once read each size once
// between them: a follower arriving while a size is being read waits for
// that read.
func TestConcurrentFollowersShareTheSizeReads(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	m.st.counts.ttl = time.Hour
	ctx := context.Background()
	ids := subjects(20)
	users := make([]string, 8)
	sids := make([]string, 8)
	for i := range users {
		users[i], sids[i] = fmt.Sprintf("user-%d", i), store.NewToken()[:16]
		_, err := m.st.step(ctx, users[i], "open", sids[i])
		require.NoError(t, err)
	}
	rt := &testenv.RedisTrips{}
	rdb.AddHook(rt)
	rt.Start()
	var wg sync.WaitGroup
	for i := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := m.st.changeSubscriptions(ctx, users[i], sids[i], subSet, ids)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	_, names := rt.Count()
	scards := 0
	for _, n := range names {
		if n == "scard" {
			scards++
		}
	}
	require.Equal(t, len(ids), scards, "one size read per followed user")
	n, err := rdb.SCard(ctx, m.keys.user("subject-3").followers).Result()
	require.NoError(t, err)
	require.EqualValues(t, len(users), n)
}
