package streams

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func add(t *testing.T, rdb redis.UniversalClient, stream string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: []any{"n", i}}).Result()
		require.NoError(t, err)
		ids[i] = id
	}
	return ids
}

func ids(msgs []redis.XMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// A group reads what was written before it existed, each entry once per
// group, and one whose stream was deleted under it is made again.
func TestReadCreatesAndRecreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t)
	stream := testenv.Prefix(t) + "{s}:a"
	written := add(t, rdb, stream, 3)
	g := NewGroup(rdb, "readers", ConsumerName("t1"))
	require.NoError(t, g.Create(ctx, stream))
	require.NoError(t, g.Create(ctx, stream), "a group that exists is fine")

	got, err := g.Read(ctx, 10, -1, stream)
	require.NoError(t, err)
	require.Equal(t, written, ids(got[stream]))
	got, err = g.Read(ctx, 10, -1, stream)
	require.NoError(t, err)
	require.Empty(t, got, "each entry once")

	require.NoError(t, rdb.Del(ctx, stream).Err())
	got, err = g.Read(ctx, 10, -1, stream)
	require.NoError(t, err, "a deleted stream's group comes back")
	require.Empty(t, got)
	again := add(t, rdb, stream, 1)
	got, err = g.ReadEach(ctx, 10, stream)
	require.NoError(t, err)
	require.Equal(t, again, ids(got[stream]))
}

// Blocking reads wait for the first entry of any of their streams.
func TestReadBlocksUntilAnEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t)
	p := testenv.Prefix(t)
	a, b := p+"{s}:a", p+"{s}:b"
	g := NewGroup(rdb, "blockers", ConsumerName("t2"))
	require.NoError(t, g.Create(ctx, a, b))
	done := make(chan map[string][]redis.XMessage, 1)
	go func() {
		got, err := g.Read(ctx, 10, 5*time.Second, a, b)
		require.NoError(t, err)
		done <- got
	}()
	time.Sleep(50 * time.Millisecond)
	written := add(t, rdb, b, 1)
	select {
	case got := <-done:
		require.Equal(t, written, ids(got[b]))
	case <-time.After(5 * time.Second):
		t.Fatal("the blocked read did not return with the entry")
	}
}

// Entries a dead consumer left pending are taken over by another; those
// delivered MaxDeliveries times go to the dead-letter stream instead, and
// entries trimmed meanwhile are only acknowledged.
func TestReclaimTakesOverAndDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t)
	p := testenv.Prefix(t)
	stream, dead := p+"{s}:work", p+"{s}:dead"
	written := add(t, rdb, stream, 4)
	gone := NewGroup(rdb, "workers", "gone")
	require.NoError(t, gone.Create(ctx, stream))
	_, err := gone.Read(ctx, 10, -1, stream)
	require.NoError(t, err)
	// The first entry failed twice more elsewhere; the last was trimmed.
	for range 2 {
		_, err = rdb.XClaim(ctx, &redis.XClaimArgs{Stream: stream, Group: "workers", Consumer: "gone", Messages: written[:1]}).Result()
		require.NoError(t, err)
	}
	require.NoError(t, rdb.XDel(ctx, stream, written[3]).Err())
	time.Sleep(20 * time.Millisecond)

	g := NewGroup(rdb, "workers", "alive")
	got, err := g.Reclaim(ctx, stream, Reclaim{MinIdle: 10 * time.Millisecond, Count: 10, MaxDeliveries: 3, DeadLetter: dead})
	require.NoError(t, err)
	require.Equal(t, written[1:3], ids(got.Entries))
	require.Equal(t, 1, got.Dead)
	letters, err := rdb.XRange(ctx, dead, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, letters, 1)
	require.Equal(t, written[0], letters[0].Values["id"])
	require.Equal(t, "delivered 3 times", letters[0].Values["why"])
	pending, err := rdb.XPending(ctx, stream, "workers").Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, pending.Count, "the two taken over wait for their ack; dead and trimmed ones are not pending")
	require.NoError(t, g.Ack(ctx, stream, ids(got.Entries)...))
	pending, err = rdb.XPending(ctx, stream, "workers").Result()
	require.NoError(t, err)
	require.Zero(t, pending.Count)

	require.NoError(t, g.Prune(ctx, stream, 0))
	consumers, err := rdb.XInfoConsumers(ctx, stream, "workers").Result()
	require.NoError(t, err)
	require.Len(t, consumers, 1, "the gone consumer, with nothing pending, was removed")
	require.Equal(t, "alive", consumers[0].Name)
}

// On Redis Cluster: streams in several slots are read with ReadEach, and a
// dead-letter stream in another slot still gets the entry.
func TestClusterStreamsInSeveralSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.RedisCluster(t)
	p := testenv.Prefix(t)
	a, b, dead := p+"{a}:s", p+"{b}:s", p+"{c}:dead"
	g := NewGroup(rdb, "cluster", "c1")
	require.NoError(t, g.Create(ctx, a, b))
	wa, wb := add(t, rdb, a, 1), add(t, rdb, b, 2)
	got, err := g.ReadEach(ctx, 10, a, b)
	require.NoError(t, err)
	require.Equal(t, wa, ids(got[a]))
	require.Equal(t, wb, ids(got[b]))
	require.NoError(t, g.DeadLetter(ctx, b, dead, got[b][0], "test"))
	n, err := rdb.XLen(ctx, dead).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	pending, err := rdb.XPending(ctx, b, "cluster").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, pending.Count, "the dead-lettered entry is acknowledged")
}

func TestHashTag(t *testing.T) {
	t.Parallel()
	require.Equal(t, "presence-shard:3", hashTag("pd:{presence-shard:3}:pings"))
	require.Equal(t, "a{}b", hashTag("a{}b"))
	require.Equal(t, "x", hashTag("{x}{y}"))
	require.Equal(t, "plain", hashTag("plain"))
}
