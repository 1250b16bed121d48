package booking

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
