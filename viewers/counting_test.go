package viewers

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// addAll feeds session hashes through the write path as heartbeats would.
func addAll(t testing.TB, e *env, hotel string, hs []uint64, tier shardTier) {
	t.Helper()
	now := time.Now()
	for _, h := range hs {
		require.NoError(t, e.mod.writer.add(hotel, h, tier, now))
	}
	e.flush()
}

// Counts stay within 2 % of the truth at 100, 10,000 and 100,000 distinct
// sessions, each heartbeating several times.
func TestAccuracy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: func(v *cfgViewers) { v.Bucket = time.Hour; v.MaxPending = 1 << 22 }})
	for i, n := range []int{100, 10_000, 100_000} {
		hotel := fmt.Sprintf("acc-%d", n)
		hs := hashes(uint64(i+1), n)
		addAll(t, e, hotel, hs, baseTier)
		addAll(t, e, hotel, hs[:n/2], baseTier) // repeats count once
		got := e.countOf(hotel).Count
		t.Logf("%d sessions: count %d (%.2f%% off)", n, got, 100*float64(got-int64(n))/float64(n))
		requireNear(t, n, got)
	}
}

// A tier change mid-stream neither drops nor double-counts sessions: half
// the sessions heartbeat on one shard, then the hotel goes to 16 and 64
// shards and every session (old and new) heartbeats again.
func TestAccuracyAcrossTierChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: func(v *cfgViewers) { v.Bucket = time.Hour; v.MaxPending = 1 << 22 }})
	const hotel = "tiered"
	hs := hashes(42, 20_000)
	addAll(t, e, hotel, hs[:10_000], baseTier)
	requireNear(t, 10_000, e.countOf(hotel).Count)

	// Readers first: the writers still use one shard.
	setTier(t, e, hotel, shardTier{Read: 16, Write: 1})
	requireNear(t, 10_000, e.countOf(hotel).Count)
	addAll(t, e, hotel, hs[5_000:12_000], e.mod.tiers.get(hotel))
	requireNear(t, 12_000, e.countOf(hotel).Count)

	// Writers follow; the same sessions now land on other shards.
	setTier(t, e, hotel, shardTier{Read: 16, Write: 16})
	addAll(t, e, hotel, hs[:15_000], e.mod.tiers.get(hotel))
	requireNear(t, 15_000, e.countOf(hotel).Count)

	setTier(t, e, hotel, shardTier{Read: 64, Write: 64})
	addAll(t, e, hotel, hs, e.mod.tiers.get(hotel))
	got := e.countOf(hotel).Count
	t.Logf("20000 sessions over tiers 1, 16, 64: count %d", got)
	requireNear(t, 20_000, got)

	// Demotion: writers back to one shard, readers still union 64.
	setTier(t, e, hotel, shardTier{Read: 64, Write: 1})
	addAll(t, e, hotel, hs[:100], e.mod.tiers.get(hotel))
	requireNear(t, 20_000, e.countOf(hotel).Count)
	n, err := e.rdb.Exists(t.Context(), e.mod.keys.hll(hotel, bucketOf(time.Now(), e.cfg.Bucket), 63)).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "64 shards were written")
}

// setTier writes the tier table as the controller would and reloads it.
func setTier(t testing.TB, e *env, hotel string, tier shardTier) {
	t.Helper()
	db := testenv.Postgres(t)
	target := tier.Read
	if tier.Write < tier.Read {
		target = tier.Read
	}
	var next any
	if tier.Read != tier.Write {
		next = time.Now().Add(time.Hour)
	}
	_, err := db.Exec(t.Context(), `INSERT INTO viewers_hotel_tiers (hotel_id, read_tier, write_tier, target_tier, next_step_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (hotel_id) DO UPDATE SET read_tier = $2, write_tier = $3, target_tier = $4, next_step_at = $5`,
		hotel, tier.Read, tier.Write, target, next)
	require.NoError(t, err)
	// A hot hotel left behind would be demoted by the next controller
	// test (under -count, the same database), and counted in its steps.
	t.Cleanup(func() {
		_, _ = db.Exec(context.Background(), `DELETE FROM viewers_hotel_tiers WHERE hotel_id = $1`, hotel)
	})
	require.NoError(t, e.mod.tiers.refresh(t.Context()))
	require.Equal(t, tier, e.mod.tiers.get(hotel))
}

// A session that stops heartbeating stops being counted within two
// buckets (60 s in production; 1 s buckets here).
func TestSlidingWindowForgetsSilentSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: func(v *cfgViewers) {
		v.Bucket = time.Second
		v.FlushWindow = 20 * time.Millisecond
		v.HotFlushWindow = 10 * time.Millisecond
	}})
	stays, leaves := e.client(), e.client()
	stays.heartbeat("window")
	leaves.heartbeat("window")
	e.flush()
	require.Equal(t, int64(2), e.countOf("window").Count)
	left := time.Now()
	testenv.Eventually(t, 5*time.Second, func() bool {
		stays.heartbeat("window") // keeps heartbeating
		e.flush()
		return e.countOf("window").Count == 1
	}, "the silent session is forgotten")
	gone := time.Since(left)
	t.Logf("silent session forgotten after %s (bucket 1s)", gone)
	require.LessOrEqual(t, gone, 2*time.Second+500*time.Millisecond, "within two buckets")
	require.Greater(t, gone, 900*time.Millisecond, "not before one bucket")
}

// On a Redis Cluster every key of a hotel sits in one slot, so a count
// over 64 shards and two buckets is one PFCOUNT, and the bundle and merge
// scripts work.
func TestClusterKeepsAHotelInOneSlot(t *testing.T) {
	t.Parallel()
	cl := testenv.RedisCluster(t)
	// This test is about where keys go, not about slow reads: a count read
	// that outlasts its timeout (two in a row open the breaker) answers 503
	// for a hotel whose count was never cached, which on a loaded machine
	// happened with the cluster's three servers starved of CPU. Timeouts
	// and the breaker have their own tests.
	e := newEnv(t, envOpts{rdb: cl, cfg: func(v *cfgViewers) {
		v.Bucket = time.Hour
		v.CountTimeout = time.Minute
		v.BreakerFailures = 1000
	}})
	ctx := t.Context()
	tier := shardTier{Read: 64, Write: 64}
	for h := 0; h < 3; h++ {
		hotel := fmt.Sprintf("cluster-%d", h)
		setTier(t, e, hotel, tier)
		hs := hashes(uint64(100+h), 5000)
		addAll(t, e, hotel, hs, tier)
		requireNear(t, 5000, e.countOf(hotel).Count)
		keys := e.mod.keys.window(hotel, bucketOf(time.Now(), e.cfg.Bucket), 64)
		slot, err := cl.ClusterKeySlot(ctx, keys[0]).Result()
		require.NoError(t, err)
		for _, k := range append(keys, e.mod.keys.topic(hotel), e.mod.keys.publishLease(hotel)) {
			s, err := cl.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			require.Equal(t, slot, s, k)
		}
		blob, _, err := e.mod.counter.bundle(ctx, hotel)
		require.NoError(t, err)
		require.Equal(t, "HYLL", string(blob[:4]))
		n, err := e.mod.counter.mergedCount(ctx, hotel, keys, [][]byte{blob})
		require.NoError(t, err)
		requireNear(t, 5000, n)
	}
	// The HTTP path end to end on the cluster.
	c := e.client()
	require.Equal(t, http.StatusNoContent, c.heartbeat("cluster-http").StatusCode)
	e.flush()
	require.Equal(t, int64(1), e.countOf("cluster-http").Count)

	// Pipelined scripts route per key across nodes: prefix buckets of many
	// networks (many slots) in one sync, and publish leases.
	var debits []prefixDebit
	for i := 0; i < 20; i++ {
		p, _ := prefixOf(fmt.Sprintf("203.0.%d.1", i))
		debits = append(debits, prefixDebit{p: p, st: &prefixState{}, n: 3})
	}
	require.NoError(t, e.mod.prefixes.debit(ctx, debits))
	for _, d := range debits {
		left, err := d.cmd.Int64()
		require.NoError(t, err)
		require.Equal(t, int64(e.cfg.PrefixBurst-3)*1000, left)
	}
	// Live counts over sharded pub/sub.
	ws := dialWS(t, e)
	require.NoError(t, ws.WriteJSON(map[string]any{"v": 1, "event": "count:subscribe", "payload": map[string]any{"hotels": []string{"cluster-live"}}}))
	require.Equal(t, int64(0), countPayload(t, readEnvelope(t, ws)).Count)
	e.client().heartbeat("cluster-live")
	awaitCount(t, ws, "cluster-live", 1)
}

// Concurrent misses for one hotel share one Redis read.
func TestConcurrentMissesShareOneRead(t *testing.T) {
	t.Parallel()
	rdb := newTestRedis(t)
	cc := &commandCounter{}
	rdb.AddHook(cc)
	e := newEnv(t, envOpts{rdb: rdb, cfg: func(v *cfgViewers) { v.CountCacheTTL = time.Hour }})
	addAll(t, e, "sf", hashes(7, 50), baseTier)
	cc.reset()
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.mod.counter.get("sf")
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.Equal(t, 1, cc.get("pfcount"), "50 readers, one PFCOUNT")
	require.Equal(t, float64(49), e.metric(e.mod.m.countCache.WithLabelValues("hit"))+e.metric(e.mod.m.countCache.WithLabelValues("miss"))-1)
}

// Hot hotels are refreshed before their cache entry expires, so readers
// never wait for Redis.
func TestHotHotelsRefreshEarly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{cfg: func(v *cfgViewers) { v.CountCacheTTL = 200 * time.Millisecond; v.EarlyRefreshBeta = 1e6 }})
	addAll(t, e, "early", hashes(9, 10), baseTier)
	_, err := e.mod.counter.get("early")
	require.NoError(t, err)
	testenv.Eventually(t, 5*time.Second, func() bool {
		_, err := e.mod.counter.get("early")
		require.NoError(t, err)
		return e.metric(e.mod.m.countCache.WithLabelValues("early_refresh")) > 0
	}, "an early refresh happened")
	_ = context.Background()
}
