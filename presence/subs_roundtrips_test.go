package presence

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// roundTrips counts what a Redis client sends: one per command outside a
// pipeline, one per pipeline.
type roundTrips struct {
	mu    sync.Mutex
	on    bool
	trips int
	names []string
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.note(cmd)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.note(cmds...)
		return next(ctx, cmds)
	}
}

func (r *roundTrips) note(cmds ...redis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on || connectionSetup(cmds) {
		return
	}
	r.trips++
	for _, c := range cmds {
		r.names = append(r.names, strings.ToLower(c.Name()))
	}
}

// connectionSetup tells the commands a new pool connection sends first,
// which are no round trip of the code under test.
func connectionSetup(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		switch strings.ToLower(c.Name()) {
		case "hello", "client", "auth", "select":
		default:
			return false
		}
	}
	return true
}

func (r *roundTrips) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.trips, r.names = true, 0, nil
}

// A connect's subscriptions:set of 20 users takes three round trips (the
// follower counts, the script, the follower sets) and no WATCH/MULTI/EXEC,
// which took five and a third of the connect's CPU.
func TestSubscriptionSetTakesThreeRoundTrips(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	ctx := context.Background()
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("subject-%d", i))
	}
	// Once before counting: Redis learns the script.
	warm := store.NewToken()[:16]
	_, err := m.st.step(ctx, "warm", "open", warm)
	require.NoError(t, err)
	_, err = m.st.changeSubscriptions(ctx, "warm", warm, subSet, ids)
	require.NoError(t, err)

	sid := store.NewToken()[:16]
	_, err = m.st.step(ctx, "alice", "open", sid)
	require.NoError(t, err)
	rt := &roundTrips{}
	rdb.AddHook(rt)
	rt.start()
	change, err := m.st.changeSubscriptions(ctx, "alice", sid, subSet, ids)
	require.NoError(t, err)
	require.ElementsMatch(t, ids, change.Added)
	require.LessOrEqual(t, rt.trips, 3, "round trips: %v", rt.names)
	for _, name := range rt.names {
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
