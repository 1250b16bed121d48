package presence

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// holdFirst holds the first counted single command until release closes,
// so the steps started meanwhile queue behind it; it counts round trips and
// can run a function before each pipeline or each round trip.
type holdFirst struct {
	testenv.RedisTrips
	entered    chan struct{}
	release    chan struct{}
	once       sync.Once
	onPipeline func()
	// onTrip, when set, runs before each counted round trip after the
	// held one.
	onTrip func()
}

func newHoldFirst() *holdFirst {
	return &holdFirst{entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.Note(ctx, cmd)
		if !h.Counts(ctx) {
			return next(ctx, cmd)
		}
		held := false
		h.once.Do(func() {
			held = true
			close(h.entered)
			<-h.release
		})
		if !held && h.onTrip != nil {
			h.onTrip()
		}
		return next(ctx, cmd)
	}
}

func (h *holdFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.Note(ctx, cmds...)
		if h.onPipeline != nil {
			h.onPipeline()
		}
		if h.onTrip != nil && h.Counts(ctx) {
			h.onTrip()
		}
		return next(ctx, cmds)
	}
}

// burst opens one session per user while the first step is held, so the
// others queue; it returns each user's result.
func burst(t *testing.T, m *Module, h *holdFirst, users int) []stepResult {
	t.Helper()
	ctx := context.Background()
	out := make([]stepResult, users)
	errs := make([]error, users)
	var wg sync.WaitGroup
	start := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = m.st.step(ctx, fmt.Sprintf("u%d", i), "open", store.NewToken()[:16])
		}()
	}
	start(0)
	<-h.entered
	for i := 1; i < users; i++ {
		start(i)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return m.st.batch.Queued() == users-1 }, "the other steps queued")
	close(h.release)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "user %d", i)
	}
	return out
}

// behindHeld starts a step that h holds in flight (its first counted call),
// runs call(i) for each i < n meanwhile, releases the held step once all n
// have queued behind it, and requires every call to succeed. done, if not
// nil, counts the calls that have returned.
func behindHeld(t *testing.T, ctx context.Context, m *Module, h *holdFirst, n int, done *atomic.Int32, call func(i int) error) {
	t.Helper()
	held := make(chan error, 1)
	go func() {
		_, err := m.st.step(ctx, "holder", "open", store.NewToken()[:16])
		held <- err
	}()
	<-h.entered
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if done != nil {
				defer done.Add(1)
			}
			errs[i] = call(i)
		}()
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return m.st.batch.Queued() == n }, "the calls queued")
	close(h.release)
	wg.Wait()
	require.NoError(t, <-held)
	for i, err := range errs {
		require.NoError(t, err, "call %d", i)
	}
}

// Steps started while one is in flight leave together in one pipeline,
// and each caller gets its own result.
func TestStepsInFlightTogetherShareOneRoundTrip(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	_, err := m.st.step(context.Background(), "warm", "open", store.NewToken()[:16])
	require.NoError(t, err)
	h := newHoldFirst()
	rdb.AddHook(h)
	h.Start()
	const users = 40
	res := burst(t, m, h, users)
	for i, r := range res {
		require.Equal(t, fmt.Sprintf("u%d", i), r.Status.User)
		require.Equal(t, StatusOnline, r.Status.Status)
		require.True(t, r.Changed)
		require.Equal(t, 1, r.Sessions)
	}
	trips, names := h.Count()
	require.Equal(t, 2, trips, "the held step, then one pipeline of the %d queued: %v", users-1, names)
	for i := range users {
		require.Equal(t, StatusOnline, statusOf(t, m, fmt.Sprintf("u%d", i)).Status)
	}
}

// Redis forgetting the script between two batches (a restart, a SCRIPT
// FLUSH) costs one more round trip for the refused calls, not an error.
func TestBatchedStepsSurviveAFlushedScriptCache(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := testenv.RedisClient(t, srv.URL)
	admin := testenv.RedisClient(t, srv.URL)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	h := newHoldFirst()
	h.onPipeline = func() { require.NoError(t, admin.ScriptFlush(context.Background()).Err()) }
	rdb.AddHook(h)
	h.Start()
	res := burst(t, m, h, 10)
	for i, r := range res {
		require.Equal(t, fmt.Sprintf("u%d", i), r.Status.User)
		require.Equal(t, StatusOnline, r.Status.Status)
	}
	// The held step (EVALSHA, and EVAL on a Redis that never saw the
	// script), the nine queued refused together, and sent again together;
	// one by one the retries would be nine or eighteen more.
	trips, names := h.Count()
	require.LessOrEqual(t, trips, 4, "round trips: %v", names)
}

// A caller that gives up while queued leaves the queue without running.
func TestQueuedStepGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	h := newHoldFirst()
	rdb.AddHook(h)
	done := make(chan error, 1)
	go func() {
		_, err := m.st.step(context.Background(), "first", "open", store.NewToken()[:16])
		done <- err
	}()
	<-h.entered
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := m.st.step(ctx, "quitter", "open", store.NewToken()[:16])
		gaveUp <- err
	}()
	testenv.Eventually(t, 10*time.Second, func() bool { return m.st.batch.Queued() == 1 }, "the step queued")
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	require.Zero(t, m.st.batch.Queued())
	close(h.release)
	require.NoError(t, <-done)
	require.Equal(t, StatusOffline, statusOf(t, m, "quitter").Status, "the abandoned step never ran")
}

// Subscription changes of connections opening together share round trips:
// the follower counts, the scripts and the follower writes of the changes
// queued behind one call in flight leave in a few pipelines, not three
// round trips each. Each round trip waits until every change still running
// has reached the batcher, so the count does not depend on how quickly a
// busy machine wakes the callers between their three parts.
func TestSubscriptionChangesInFlightShareRoundTrips(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	const users = 30
	sids := make([]string, users)
	for i := range users {
		sids[i] = store.NewToken()[:16]
		_, err := m.st.step(context.Background(), fmt.Sprintf("u%d", i), "open", sids[i])
		require.NoError(t, err)
	}
	// Nobody follows the same user: a follower count being read by one
	// caller would be waited for by the others instead of queued
	// (followerCounts), and this counts what queues.
	follow := func(i int) []string {
		var ids []string
		for j := range 20 {
			ids = append(ids, fmt.Sprintf("s%d", i*20+j))
		}
		return ids
	}
	// Once before counting: Redis learns the script.
	warm := store.NewToken()[:16]
	_, err := m.st.step(context.Background(), "warm", "open", warm)
	require.NoError(t, err)
	_, err = m.st.changeSubscriptions(context.Background(), "warm", warm, subSet, []string{"elsewhere"})
	require.NoError(t, err)
	h := newHoldFirst()
	ctx := h.Mark(context.Background())
	var done atomic.Int32
	h.onTrip = func() {
		// Not Eventually: this runs on the batch sender's goroutine, which
		// must go on (and the test fail) if the callers never arrive.
		for deadline := time.Now().Add(10 * time.Second); m.st.batch.Waiting()+int(done.Load()) < users; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("only %d of %d changes reached the batcher", m.st.batch.Waiting()+int(done.Load()), users)
				return
			}
		}
	}
	rdb.AddHook(h)
	h.Start()
	behindHeld(t, ctx, m, h, users, &done, func(i int) error {
		_, err := m.st.changeSubscriptions(ctx, fmt.Sprintf("u%d", i), sids[i], subSet, follow(i))
		return err
	})
	// One at a time this is 1 + 3 × 30 = 91. Batched: the held step, the
	// 30 follower counts together, then for each of the two later parts
	// the first caller there alone and the other 29 together.
	trips, names := h.Count()
	require.LessOrEqual(t, trips, 6, "round trips: %v", names)
	for i := range users {
		subs, err := rdb.SMembers(ctx, m.keys.user(fmt.Sprintf("u%d", i)).subs).Result()
		require.NoError(t, err)
		require.ElementsMatch(t, follow(i), subs)
	}
	want := map[string][]string{}
	for i := range users {
		for _, s := range follow(i) {
			want[s] = append(want[s], fmt.Sprintf("u%d", i))
		}
	}
	for s, followers := range want {
		got, err := rdb.SMembers(ctx, m.keys.user(s).followers).Result()
		require.NoError(t, err)
		require.ElementsMatch(t, followers, got, "followers of %s", s)
	}
}
