package booking

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// The relay's invalidation (drop the cached map, publish to the section's
// topic, in one script) runs on a Redis Cluster: the map key and the topic
// share the event's hash tag, and SPUBLISH reaches a sharded subscriber.
func TestInvalidationRunsOnRedisCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testenv.RedisCluster(t)
	k := keys{ks: store.NewKeyspace(testenv.Prefix(t))}
	snap, topic := k.snapshot("ev-cluster", allScope), k.liveTopic("ev-cluster", "B")
	require.NoError(t, rdb.Set(ctx, snap, "a cached map", time.Minute).Err())
	sub := rdb.SSubscribe(ctx, topic)
	defer sub.Close()
	_, err := sub.Receive(ctx) // the subscription confirmed
	require.NoError(t, err)

	msg := `{"type":"invalidate","section":"B"}`
	pause := k.livePause("ev-cluster")
	require.NoError(t, invalidateScript.Run(ctx, rdb, []string{snap, pause}, topic, "SPUBLISH", msg).Err())
	got, err := sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, msg, got.Payload)
	require.Zero(t, rdb.Exists(ctx, snap).Val(), "the cached map is gone")

	// The live-pause switch shares the tag: pausing tells every section's
	// topic, and a paused invalidation drops the map but publishes nothing
	// (the resume's reset is the next message).
	paused := `{"type":"paused","pollMs":5000}`
	require.NoError(t, livePauseScript.Run(ctx, rdb, []string{pause}, "5000", "SPUBLISH", paused, k.liveTopic("ev-cluster", "A"), topic).Err())
	got, err = sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, paused, got.Payload)
	require.NoError(t, rdb.Set(ctx, snap, "a cached map", time.Minute).Err())
	require.NoError(t, invalidateScript.Run(ctx, rdb, []string{snap, pause}, topic, "SPUBLISH", msg).Err())
	require.Zero(t, rdb.Exists(ctx, snap).Val(), "the cached map is gone while paused too")
	require.NoError(t, livePauseScript.Run(ctx, rdb, []string{pause}, "", "SPUBLISH", `{"type":"reset"}`, topic).Err())
	got, err = sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, `{"type":"reset"}`, got.Payload, "no invalidation went out while paused")
	require.Zero(t, rdb.Exists(ctx, pause).Val())
}

// The relay hands the invalidator a whole batch: every section it names is
// invalidated once, in one pipeline whose calls go to different slots of a
// Redis Cluster (one hash tag per event), however many events name it.
func TestBatchInvalidationNamesEachSectionOnceOnRedisCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testenv.RedisCluster(t)
	h, err := hub.New(rdb, prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	ks := store.NewKeyspace(testenv.Prefix(t))
	k := keys{ks: ks}
	events := []string{"ev-one", "ev-two"}
	var subs []*redis.PubSub
	for _, ev := range events {
		require.NoError(t, rdb.Set(ctx, k.snapshot(ev, allScope), "a cached map", time.Minute).Err())
		sub := rdb.SSubscribe(ctx, k.liveTopic(ev, "A"))
		defer sub.Close()
		_, err := sub.Receive(ctx)
		require.NoError(t, err)
		subs = append(subs, sub)
	}
	var batch []outbox.Event
	for i := range 50 {
		p, _ := json.Marshal(InventoryChanged{Event: events[i%2], Section: "A"})
		batch = append(batch, outbox.Event{ID: int64(i + 1), Kind: KindInventoryChanged, Payload: p})
	}
	// Loaded on every node first: a pipeline that meets NOSCRIPT on one
	// node runs all its calls again (harmless for an invalidation, but the
	// count below would see it).
	require.NoError(t, store.Load(ctx, rdb, invalidateScript))
	require.NoError(t, newInvalidator(rdb, h, ks).Handle(ctx, batch))
	for i, ev := range events {
		require.Zero(t, rdb.Exists(ctx, k.snapshot(ev, allScope)).Val(), "the cached map of %s is gone", ev)
		got, err := subs[i].ReceiveMessage(ctx)
		require.NoError(t, err)
		require.JSONEq(t, `{"type":"invalidate","section":"A"}`, got.Payload)
		more, cancelMore := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = subs[i].ReceiveMessage(more)
		cancelMore()
		require.Error(t, err, "one invalidation for the 25 events of %s", ev)
	}
}
