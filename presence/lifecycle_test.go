package presence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/module/moduletest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// newTestModule builds a module over rdb without any HTTP part.
func newTestModule(t testing.TB, rdb redis.UniversalClient, prefix string, mutate func(*config.Presence)) *Module {
	t.Helper()
	cfg := config.Default().Presence
	cfg.Shards = 2
	cfg.PingInterval = time.Second
	cfg.MissBudget = 2
	cfg.SchedulerInterval = 50 * time.Millisecond
	cfg.StreamPoll = 10 * time.Millisecond
	cfg.ClaimIdle = 300 * time.Millisecond
	cfg.MaxDeliveries = 3
	if mutate != nil {
		mutate(&cfg)
	}
	reg := prometheus.NewRegistry()
	h, err := hub.New(rdb, reg, testenv.Logger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	m, err := New(Deps{Config: cfg, Keys: store.NewKeyspace(prefix), Metrics: reg, Log: testenv.Logger()})
	require.NoError(t, err)
	host := moduletest.New(t, nil, moduletest.Stores{Redis: rdb, Hub: h})
	require.NoError(t, m.StartChanges(context.Background(), host))
	return m
}

func runLifecycle(t *testing.T, m *Module) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.lifecycle(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// openSession registers a session the way the gateway does.
func openSession(t *testing.T, m *Module, user string) string {
	t.Helper()
	ctx := context.Background()
	sid := store.NewToken()[:16]
	_, err := m.st.step(ctx, user, "open", sid)
	require.NoError(t, err)
	require.NoError(t, m.st.pingOpened(ctx, sid, user, subChange{}))
	return sid
}

func statusOf(t *testing.T, m *Module, user string) *Status {
	t.Helper()
	sts, err := m.st.statuses(context.Background(), []string{user})
	require.NoError(t, err)
	return sts[0]
}

// Sessions whose pings stop expire through pings → deadlines → scheduler →
// events → cleanup, once each even with several workers running.
func TestLifecycleExpiresOnceWithSeveralWorkers(t *testing.T) {
	t.Parallel()
	expireOnce(t, testenv.Redis(t))
}

func TestLifecycleExpiresOnceWithSeveralWorkersOnACluster(t *testing.T) {
	t.Parallel()
	expireOnce(t, testenv.RedisCluster(t))
}

func expireOnce(t *testing.T, rdb redis.UniversalClient) {
	prefix := testenv.Prefix(t)
	workers := []*Module{newTestModule(t, rdb, prefix, nil), newTestModule(t, rdb, prefix, nil), newTestModule(t, rdb, prefix, nil)}
	gw := workers[0]
	const n = 40
	for i := 0; i < n; i++ {
		openSession(t, gw, fmt.Sprintf("u%d", i))
	}
	for _, w := range workers {
		runLifecycle(t, w)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		for i := 0; i < n; i++ {
			if statusOf(t, gw, fmt.Sprintf("u%d", i)).Status != StatusOffline {
				return false
			}
		}
		return true
	}, "every session expired")
	ctx := context.Background()
	var events int64
	for shard := 0; shard < gw.cfg.Shards; shard++ {
		l, err := rdb.XLen(ctx, gw.keys.shard(shard).events).Result()
		require.NoError(t, err)
		events += l
	}
	require.Equal(t, int64(n), events, "one inactive event per session, whatever the number of schedulers")
	for i := 0; i < n; i++ {
		require.Equal(t, int64(2), statusOf(t, gw, fmt.Sprintf("u%d", i)).V, "online then offline, nothing more")
	}
	var cleaned float64
	for _, w := range workers {
		cleaned += testutil.ToFloat64(w.m.cleanups.WithLabelValues("timeout", "ended"))
	}
	require.Equal(t, float64(n), cleaned)
}

// Cleanup is idempotent: the same inactive event handled again changes
// nothing.
func TestCleanupIsIdempotent(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)
	sid := openSession(t, m, "ida")
	msg := redis.XMessage{ID: "1-1", Values: map[string]any{"m": member(sid, "ida"), "r": "timeout"}}
	c := newConsumer(m, "events", groupCleanup, func(n int) string { return m.keys.shard(n).events })
	ctx := context.Background()
	require.Equal(t, []string{"1-1"}, m.cleanup(ctx, c, 0, []redis.XMessage{msg}))
	first := statusOf(t, m, "ida")
	require.Equal(t, StatusOffline, first.Status)
	require.Equal(t, []string{"1-1"}, m.cleanup(ctx, c, 0, []redis.XMessage{msg}))
	require.Equal(t, first, statusOf(t, m, "ida"))
	require.Equal(t, 1.0, testutil.ToFloat64(m.m.cleanups.WithLabelValues("timeout", "absent")))
}

// A lagging ping consumer cannot make the scheduler expire a live session:
// deadlines count only up to the point every ping has been applied.
func TestSchedulerWaitsForLaggingConsumers(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), func(p *config.Presence) { p.Shards = 1 })
	ctx := context.Background()
	pings := newConsumer(m, "pings", groupPings, func(n int) string { return m.keys.shard(n).pings })
	events := newConsumer(m, "events", groupCleanup, func(n int) string { return m.keys.shard(n).events })
	require.NoError(t, pings.ensureGroups(ctx))
	sk := m.keys.shard(0)

	sid := openSession(t, m, "lag")
	require.NoError(t, m.st.ping(ctx, sid, "lag", false))
	mem := member(sid, "lag")
	unread, err := rdb.XRange(ctx, sk.pings, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, unread, 1)
	// A deadline that passed just after the ping the gateway wrote, as if
	// an earlier ping were the last applied: that ping is still unread.
	require.NoError(t, rdb.ZAdd(ctx, sk.deadlines, redis.Z{Score: float64(idMillis(unread[0].ID) + 1), Member: mem}).Err())
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, m.scheduleOnce(ctx, pings, events))
	n, err := rdb.XLen(ctx, sk.events).Result()
	require.NoError(t, err)
	require.Zero(t, n, "an unread ping holds the scheduler back")
	require.Equal(t, 1.0, testutil.ToFloat64(m.m.streamLag.WithLabelValues("pings")))

	// Read but not acknowledged (a consumer that died mid-batch): still held.
	_, err = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: groupPings, Consumer: "dead", Streams: []string{sk.pings, ">"}, Count: 10, Block: -1}).Result()
	require.NoError(t, err)
	require.NoError(t, m.scheduleOnce(ctx, pings, events))
	n, _ = rdb.XLen(ctx, sk.events).Result()
	require.Zero(t, n)
	require.Equal(t, 1.0, testutil.ToFloat64(m.m.streamPending.WithLabelValues("pings")))

	// Without the watermark this deadline would have expired the session.
	// Once applied, the deadline is the ping's and the session lives on.
	msgs, err := rdb.XRange(ctx, sk.pings, "-", "+").Result()
	require.NoError(t, err)
	ids := m.applyPings(ctx, pings, 0, msgs)
	require.NoError(t, pings.ack(ctx, 0, ids))
	require.NoError(t, m.scheduleOnce(ctx, pings, events))
	n, _ = rdb.XLen(ctx, sk.events).Result()
	require.Zero(t, n)
	score, err := rdb.ZScore(ctx, sk.deadlines, mem).Result()
	require.NoError(t, err)
	require.Greater(t, score, float64(time.Now().UnixMilli()))
}

// Entries a dead consumer took are claimed by a live one; entries that keep
// failing, or cannot be parsed, go to the dead-letter stream.
func TestReclaimAndDeadLetter(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), func(p *config.Presence) { p.Shards = 1 })
	ctx := context.Background()
	sk := m.keys.shard(0)
	pings := newConsumer(m, "pings", groupPings, func(n int) string { return m.keys.shard(n).pings })
	require.NoError(t, pings.ensureGroups(ctx))

	sid := openSession(t, m, "rec")
	opened, err := rdb.ZScore(ctx, sk.deadlines, member(sid, "rec")).Result()
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // the ping's deadline is a later millisecond than the open's
	require.NoError(t, m.st.ping(ctx, sid, "rec", false))
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: sk.pings, Values: []any{"m", "garbage", "t", "x"}}).Err())
	taken, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: groupPings, Consumer: "dead", Streams: []string{sk.pings, ">"}, Count: 10, Block: -1}).Result()
	require.NoError(t, err)
	require.Len(t, taken[0].Messages, 2)

	runLifecycle(t, m)
	testenv.Eventually(t, 5*time.Second, func() bool {
		p, err := rdb.XPending(ctx, sk.pings, groupPings).Result()
		return err == nil && p.Count == 0
	}, "the dead consumer's entries were claimed and handled")
	score, err := rdb.ZScore(ctx, sk.deadlines, member(sid, "rec")).Result()
	require.NoError(t, err)
	require.Greater(t, score, opened, "the claimed ping was applied over the open's record")
	dead, err := rdb.XRange(ctx, sk.dead, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, dead, 1, "the malformed ping was dead-lettered")
	require.Equal(t, sk.pings, dead[0].Values["stream"])
	require.Equal(t, 1.0, testutil.ToFloat64(m.m.deadLetters.WithLabelValues("pings")))
	require.GreaterOrEqual(t, testutil.ToFloat64(m.m.reclaimed.WithLabelValues("pings")), 2.0)
}

// An entry whose handling keeps failing is dead-lettered after
// max_deliveries instead of blocking its consumer forever.
func TestPoisonEntryIsDeadLettered(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), func(p *config.Presence) { p.Shards = 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newConsumer(m, "events", groupCleanup, func(n int) string { return m.keys.shard(n).events })
	sk := m.keys.shard(0)
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: sk.events, Values: []any{"m", "abc:poison", "r", "timeout"}}).Err())
	var mu sync.Mutex
	attempts := 0
	failing := func(ctx context.Context, c *consumer, shard int, msgs []redis.XMessage) []string {
		mu.Lock()
		attempts += len(msgs)
		mu.Unlock()
		return nil // never acknowledged
	}
	go func() { _ = c.loop(ctx, failing) }()
	testenv.Eventually(t, 10*time.Second, func() bool {
		n, _ := rdb.XLen(ctx, sk.dead).Result()
		return n == 1
	}, "dead-lettered")
	p, err := rdb.XPending(ctx, sk.events, groupCleanup).Result()
	require.NoError(t, err)
	require.Zero(t, p.Count)
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, attempts, 2)
}

func TestWatermark(t *testing.T) {
	t.Parallel()
	require.Greater(t, watermark(groupState{}), time.Now().UnixMilli(), "nothing in flight: no limit")
	require.Equal(t, int64(100), watermark(groupState{pending: 2, oldestPending: "100-0", lastDelivered: "300-0", lastEntry: "300-0"}))
	require.Equal(t, int64(300), watermark(groupState{lastDelivered: "300-0", lastEntry: "301-0"}))
	require.Equal(t, int64(100), watermark(groupState{pending: 1, oldestPending: "100-5", lastDelivered: "300-0", lastEntry: "400-0"}))
	require.Greater(t, watermark(groupState{lastDelivered: "300-0", lastEntry: "300-0"}), time.Now().UnixMilli())
}

// onePingShard is a module of one shard and a consumer of its pings,
// whose entries the tests apply directly.
func onePingShard(t *testing.T) (redis.UniversalClient, *Module, *consumer) {
	t.Helper()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), func(p *config.Presence) { p.Shards = 1 })
	return rdb, m, newConsumer(m, "pings", groupPings, func(n int) string { return m.keys.shard(n).pings })
}

// A close ends a session's pings whatever the order its entries are read
// in, or written in (a gateway appends its plain pings in batches, so a
// ping taken before the close can land after it): the close applies over
// any ping, no ping applies after it, and among one kind the later entry
// wins.
func TestACloseEndsTheSessionsPingsWhateverTheOrder(t *testing.T) {
	t.Parallel()
	rdb, m, c := onePingShard(t)
	ctx, sk := context.Background(), m.keys.shard(0)
	now := time.Now().UnixMilli()
	mk := func(ms int64, ttl int64, kind string) redis.XMessage {
		return redis.XMessage{ID: fmt.Sprintf("%d-0", ms), Values: map[string]any{"m": "s1:u", "t": fmt.Sprint(ttl), "k": kind}}
	}
	score := func(key string) float64 {
		score, err := rdb.ZScore(ctx, key, "s1:u").Result()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		require.NoError(t, err)
		return score
	}
	m.applyPings(ctx, c, 0, []redis.XMessage{mk(now+10, 60000, "p")})
	m.applyPings(ctx, c, 0, []redis.XMessage{mk(now+5, 60000, "p")})
	require.Equal(t, float64(now+10+60000), score(sk.deadlines), "an older ping is ignored")
	m.applyPings(ctx, c, 0, []redis.XMessage{mk(now, 500, "c")})
	require.Zero(t, score(sk.deadlines), "the close applies over a ping written after it")
	require.Equal(t, float64(now+500), score(sk.closing))
	m.applyPings(ctx, c, 0, []redis.XMessage{mk(now+15, 60000, "p")})
	require.Zero(t, score(sk.deadlines), "no ping applies after the close")
	require.Equal(t, float64(now+500), score(sk.closing))
	m.applyPings(ctx, c, 0, []redis.XMessage{mk(now+20, 500, "c")})
	require.Equal(t, float64(now+20+500), score(sk.closing), "a later close applies")
	m.applyPings(ctx, c, 0, []redis.XMessage{mk(now+1, 500, "c")})
	require.Equal(t, float64(now+20+500), score(sk.closing), "an older close is ignored")
	require.Zero(t, score(sk.deadlines))
}

// A ping of a session the live index does not hold (its record was lost,
// or the scheduler ended it already) records it again, so a session whose
// gateway keeps it open always has a deadline; the cleanup ending it twice
// changes nothing.
func TestAPingRecordsASessionTheIndexLost(t *testing.T) {
	t.Parallel()
	rdb, m, c := onePingShard(t)
	ctx, sk := context.Background(), m.keys.shard(0)
	now := time.Now().UnixMilli()
	ping := redis.XMessage{ID: fmt.Sprintf("%d-0", now), Values: map[string]any{"m": "s1:u s2:u", "t": "60000", "k": "p"}}
	require.Len(t, m.applyPings(ctx, c, 0, []redis.XMessage{ping}), 1)
	for _, mem := range []string{"s1:u", "s2:u"} {
		score, err := rdb.ZScore(ctx, sk.deadlines, mem).Result()
		require.NoError(t, err)
		require.Equal(t, float64(now+60000), score)
	}
	n, err := rdb.ZCard(ctx, sk.closing).Result()
	require.NoError(t, err)
	require.Zero(t, n)
}

// An entry of a gateway's batch applies to each of its members as a ping
// of that member alone would: a live session's deadline moves later (never
// earlier), a session the live index lost is recorded again, and a closed
// one stays closed; a close entry of several members closes each.
func TestAnEntryOfManyPingsAppliesToEachMemberAsAlone(t *testing.T) {
	t.Parallel()
	rdb, m, c := onePingShard(t)
	ctx, sk := context.Background(), m.keys.shard(0)
	now := time.Now().UnixMilli()
	require.NoError(t, rdb.ZAdd(ctx, sk.deadlines, redis.Z{Score: float64(now + 1000), Member: "live:u"},
		redis.Z{Score: float64(now + 600000), Member: "later:u"}).Err())
	require.NoError(t, rdb.ZAdd(ctx, sk.closing, redis.Z{Score: float64(now + 500), Member: "closed:u"}).Err())
	entry := func(ms int64, kind, mems string) redis.XMessage {
		return redis.XMessage{ID: fmt.Sprintf("%d-0", ms), Values: map[string]any{"m": mems, "t": "60000", "k": kind}}
	}
	ids := m.applyPings(ctx, c, 0, []redis.XMessage{
		entry(now, "p", "live:u lost:u closed:u later:u"),
		entry(now+1, "c", "gone1:u gone2:u"),
	})
	require.Len(t, ids, 2)
	scores := func(key string, mems ...string) []float64 {
		got, err := rdb.ZMScore(ctx, key, mems...).Result()
		require.NoError(t, err)
		return got
	}
	require.Equal(t, []float64{float64(now + 60000), float64(now + 60000), 0, float64(now + 600000)},
		scores(sk.deadlines, "live:u", "lost:u", "closed:u", "later:u"), "moved, recorded again, still closed, never earlier")
	require.Equal(t, []float64{float64(now + 500), float64(now + 1 + 60000), float64(now + 1 + 60000)},
		scores(sk.closing, "closed:u", "gone1:u", "gone2:u"))
	require.Equal(t, []float64{0, 0}, scores(sk.deadlines, "gone1:u", "gone2:u"))
}

// An open's first ping is recorded directly, below every stream entry:
// the session's later pings and its close override it, and it never
// overrides what is recorded.
func TestFirstPingIsRecordedDirectlyBelowTheStream(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), func(p *config.Presence) { p.Shards = 1 })
	ctx := context.Background()
	sk := m.keys.shard(0)
	before := time.Now().UnixMilli()
	sid := openSession(t, m, "u")
	mem := member(sid, "u")
	n, err := rdb.XLen(ctx, sk.pings).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing goes through the stream")
	ttl := (m.cfg.PingInterval * time.Duration(m.cfg.MissBudget)).Milliseconds()
	score, err := rdb.ZScore(ctx, sk.deadlines, mem).Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, int64(score), before+ttl)
	require.LessOrEqual(t, int64(score), time.Now().UnixMilli()+ttl)

	// The session closes: its close entry (any stream position) wins.
	c := newConsumer(m, "pings", groupPings, func(n int) string { return m.keys.shard(n).pings })
	closedAt := time.Now().UnixMilli()
	m.applyPings(ctx, c, 0, []redis.XMessage{{ID: fmt.Sprintf("%d-0", closedAt), Values: map[string]any{"m": mem, "t": "500", "k": "c"}}})
	score, err = rdb.ZScore(ctx, sk.closing, mem).Result()
	require.NoError(t, err)
	require.Equal(t, float64(closedAt+500), score)
	requireNotLive := func() {
		t.Helper()
		_, err := rdb.ZScore(ctx, sk.deadlines, mem).Result()
		require.ErrorIs(t, err, redis.Nil)
	}
	requireNotLive()

	// Recorded again (it cannot happen: session ids are new), it changes nothing.
	require.NoError(t, m.st.pingOpened(ctx, sid, "u", subChange{}))
	requireNotLive()
	score, err = rdb.ZScore(ctx, sk.closing, mem).Result()
	require.NoError(t, err)
	require.Equal(t, float64(closedAt+500), score)
}

// For contrast: the same deadline with every ping applied expires.
func TestSchedulerExpiresPassedDeadlines(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), func(p *config.Presence) { p.Shards = 1 })
	ctx := context.Background()
	pings := newConsumer(m, "pings", groupPings, func(n int) string { return m.keys.shard(n).pings })
	events := newConsumer(m, "events", groupCleanup, func(n int) string { return m.keys.shard(n).events })
	require.NoError(t, pings.ensureGroups(ctx))
	sk := m.keys.shard(0)
	sid := openSession(t, m, "gone")
	require.NoError(t, m.st.ping(ctx, sid, "gone", false))
	msgs, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: groupPings, Consumer: "live", Streams: []string{sk.pings, ">"}, Count: 10, Block: -1}).Result()
	require.NoError(t, err)
	require.NoError(t, pings.ack(ctx, 0, m.applyPings(ctx, pings, 0, msgs[0].Messages)))
	require.NoError(t, rdb.ZAdd(ctx, sk.deadlines, redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: member(sid, "gone")}).Err())
	require.NoError(t, m.scheduleOnce(ctx, pings, events))
	n, err := rdb.XLen(ctx, sk.events).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

// Consumers of processes long gone leave their group once idle with
// nothing pending; live ones and those with pending entries stay.
func TestGoneConsumersArePruned(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), func(p *config.Presence) { p.Shards = 1 })
	ctx := context.Background()
	c := newConsumer(m, "events", groupCleanup, func(n int) string { return m.keys.shard(n).events })
	c.pruneAfter = 100 * time.Millisecond
	require.NoError(t, c.ensureGroups(ctx))
	stream := c.stream(0)
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"m", "x"}}).Err())
	require.NoError(t, rdb.XGroupCreateConsumer(ctx, stream, groupCleanup, "gone").Err())
	_, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: groupCleanup, Consumer: "holding", Streams: []string{stream, ">"}, Block: -1}).Result()
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, c.group.Prune(ctx, stream, c.pruneAfter))
	list, err := rdb.XInfoConsumers(ctx, stream, groupCleanup).Result()
	require.NoError(t, err)
	var names []string
	for _, x := range list {
		names = append(names, x.Name)
	}
	require.Equal(t, []string{"holding"}, names, "the idle consumer without pending entries is gone")
}
