package presence

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// subjects names n users to follow: subject-0 … subject-<n-1>.
func subjects(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("subject-%d", i)
	}
	return ids
}

// A connect's subscriptions:set of 20 users takes three round trips (the
// follower counts, the script, the follower sets) and no WATCH/MULTI/EXEC,
// which took five and a third of the connect's CPU.
func TestSubscriptionSetTakesThreeRoundTrips(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	ctx := context.Background()
	ids := subjects(20)
	// Once before counting: Redis learns the script.
	warm := store.NewToken()[:16]
	_, err := m.st.step(ctx, "warm", "open", warm)
	require.NoError(t, err)
	_, err = m.st.changeSubscriptions(ctx, "warm", warm, subSet, ids)
	require.NoError(t, err)

	sid := store.NewToken()[:16]
	_, err = m.st.step(ctx, "alice", "open", sid)
	require.NoError(t, err)
	rt := &testenv.RedisTrips{}
	rdb.AddHook(rt)
	rt.Start()
	change, err := m.st.changeSubscriptions(ctx, "alice", sid, subSet, ids)
	require.NoError(t, err)
	require.ElementsMatch(t, ids, change.Added)
	trips, names := rt.Count()
	require.LessOrEqual(t, trips, 3, "round trips: %v", names)
	for _, name := range names {
		require.NotContains(t, []string{"watch", "multi", "exec", "unwatch"}, name)
	}

	subs, err := rdb.SMembers(ctx, m.keys.user("alice").subs).Result()
	require.NoError(t, err)
	require.ElementsMatch(t, ids, subs)
	followers, err := rdb.SMembers(ctx, m.keys.user("subject-7").followers).Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"warm", "alice"}, followers)
}

// Two devices changing subscriptions at once both land: the script
// serialises them, as the transaction did.
func TestConcurrentSubscriptionAddsAllLand(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	ctx := context.Background()
	sids := []string{store.NewToken()[:16], store.NewToken()[:16]}
	for _, sid := range sids {
		_, err := m.st.step(ctx, "alice", "open", sid)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for d, sid := range sids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				_, err := m.st.changeSubscriptions(ctx, "alice", sid, subAdd, []string{fmt.Sprintf("d%d-%d", d, i)})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	n, err := rdb.SCard(ctx, m.keys.user("alice").subs).Result()
	require.NoError(t, err)
	require.EqualValues(t, 100, n)

	// A session that ended changes nothing.
	_, err = m.st.step(ctx, "alice", "close", sids[0])
	require.NoError(t, err)
	_, err = m.st.changeSubscriptions(ctx, "alice", sids[0], subSet, []string{"x"})
	require.ErrorIs(t, err, errNoSession)
	n, err = rdb.SCard(ctx, m.keys.user("alice").subs).Result()
	require.NoError(t, err)
	require.EqualValues(t, 100, n)
}

// The script names what a command added and removed; when it added every
// user of the command it says so in one word, and the list is the
// command's.
func TestSubscriptionChangesNameWhatTheyAddedAndRemoved(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	ctx := context.Background()
	sid := store.NewToken()[:16]
	_, err := m.st.step(ctx, "alice", "open", sid)
	require.NoError(t, err)
	steps := []struct {
		op             subOp
		ids            []string
		added, removed []string
	}{
		{subSet, []string{"a", "b"}, []string{"a", "b"}, nil},
		{subSet, []string{"b", "c"}, []string{"c"}, []string{"a"}},
		{subAdd, []string{"c", "d"}, []string{"d"}, nil},
		{subAdd, []string{"e", "f"}, []string{"e", "f"}, nil},
		{subRemove, []string{"b", "x"}, nil, []string{"b"}},
		{subSet, []string{"c", "d", "e", "f"}, nil, nil},
		// From an empty set (the script's short way): the same answers.
		{subSet, []string{}, nil, []string{"c", "d", "e", "f"}},
		{subSet, []string{}, nil, nil},
		{subRemove, []string{"c"}, nil, nil},
		{subAdd, []string{"g", "h"}, []string{"g", "h"}, nil},
		{subRemove, []string{"g", "h"}, nil, []string{"g", "h"}},
		{subSet, []string{"c", "d", "e", "f"}, []string{"c", "d", "e", "f"}, nil},
	}
	for i, s := range steps {
		change, err := m.st.changeSubscriptions(ctx, "alice", sid, s.op, s.ids)
		require.NoError(t, err)
		require.ElementsMatch(t, s.added, change.Added, "step %d", i)
		require.ElementsMatch(t, s.removed, change.Removed, "step %d", i)
	}
	subs, err := rdb.SMembers(ctx, m.keys.user("alice").subs).Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"c", "d", "e", "f"}, subs)
}

// The limits hold on a user's first set as on any other: the script takes a
// short way when the stored set is empty.
func TestFirstSubscriptionSetKeepsTheLimits(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), func(c *config.Presence) {
		c.MaxSubscriptions = 3
		c.MaxFollowers = 1
	})
	ctx := context.Background()
	sid := store.NewToken()[:16]
	_, err := m.st.step(ctx, "alice", "open", sid)
	require.NoError(t, err)
	// Before any count is read: counts read are reused for a second.
	require.NoError(t, rdb.SAdd(ctx, m.keys.user("b").followers, "someone").Err())
	var le *limitError
	_, err = m.st.changeSubscriptions(ctx, "alice", sid, subAdd, []string{"a", "x", "c", "d"})
	require.ErrorAs(t, err, &le)
	require.Contains(t, le.msg, "at most 3 subscriptions")

	_, err = m.st.changeSubscriptions(ctx, "alice", sid, subSet, []string{"a", "b", "c"})
	require.ErrorAs(t, err, &le)
	require.Equal(t, []string{"b"}, le.users, "b has the most followers allowed")
	n, err := rdb.Exists(ctx, m.keys.user("alice").subs, m.keys.user("a").followers).Result()
	require.NoError(t, err)
	require.Zero(t, n, "a refused command writes nothing")

	_, err = m.st.changeSubscriptions(ctx, "alice", "no-such-session", subSet, []string{"a"})
	require.ErrorIs(t, err, errNoSession)
}

// The open and the set are one script: a connection naming 20 users costs
// the open's round trips plus the follower counts and the follower sets,
// and runs no subscriptions script.
func TestOpenSubscribingIsOneScript(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	ctx := context.Background()
	ids := subjects(20)
	// Once before counting: Redis learns the scripts.
	warm := store.NewToken()[:16]
	_, warmed, err := m.st.openSubscribing(ctx, "warm", warm, ids)
	require.NoError(t, err)
	require.NoError(t, m.st.pingOpened(ctx, warm, "warm", warmed))

	rt := &testenv.RedisTrips{}
	rdb.AddHook(rt)
	rt.Start()
	sid := store.NewToken()[:16]
	res, change, err := m.st.openSubscribing(ctx, "alice", sid, ids)
	require.NoError(t, err)
	trips, names := rt.Count()
	require.LessOrEqual(t, trips, 2, "at most the follower counts and the session script: %v", names)
	scripts := 0
	for _, name := range names {
		if name == "evalsha" || name == "eval" {
			scripts++
		}
	}
	require.Equal(t, 1, scripts, "one script: %v", names)
	require.Equal(t, ids, change.Added)
	require.Empty(t, change.Removed)
	require.Equal(t, 1, change.Sessions)
	require.Equal(t, ids, res.Following)
	require.Equal(t, "online", res.Status.Status)
	subs, err := rdb.SMembers(ctx, m.keys.user("alice").subs).Result()
	require.NoError(t, err)
	require.ElementsMatch(t, ids, subs)

	// The follower sets are written with the open's first ping: one more
	// trip.
	rt.Start()
	require.NoError(t, m.st.pingOpened(ctx, sid, "alice", change))
	trips, names = rt.Count()
	require.Equal(t, 1, trips, "the ping and the follower sets: %v", names)
	require.Equal(t, "evalsha", names[0])
	followers, err := rdb.SMembers(ctx, m.keys.user("subject-7").followers).Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"warm", "alice"}, followers)

	// A second session naming a different set: the diff, and the session
	// count the caller needs to tell the other session.
	_, change, err = m.st.openSubscribing(ctx, "alice", store.NewToken()[:16], []string{"subject-3", "other"})
	require.NoError(t, err)
	require.Equal(t, []string{"other"}, change.Added)
	require.Len(t, change.Removed, 19)
	require.NotContains(t, change.Removed, "subject-3")
	require.Equal(t, 2, change.Sessions)
}

// A user with thousands of followers who changes who may see them has
// every follower's gateway told in a round trip per thousand followers,
// not one each.
func TestRecheckingThousandsOfFollowersTakesARoundTripPerThousand(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	ctx := context.Background()
	followers := subjects(2500)
	members := make([]any, len(followers))
	for i, f := range followers {
		members[i] = f
	}
	require.NoError(t, rdb.SAdd(ctx, m.keys.user("star").followers, members...).Err())

	rt := &testenv.RedisTrips{}
	rdb.AddHook(rt)
	rt.Start()
	m.recheckFollowers("star")
	trips, names := rt.Count()
	require.Equal(t, 5, trips, "the change counted, the followers' read, then three batches: %v", names[:min(len(names), 5)])
	published := 0
	for _, n := range names {
		if n == "publish" {
			published++
		}
	}
	require.Equal(t, len(followers), published, "one control message per follower")
}
