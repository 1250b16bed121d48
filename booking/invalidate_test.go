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
	require.NoError(t, invalidateScript.Run(ctx, rdb, []string{snap}, topic, "SPUBLISH", msg).Err())
	got, err := sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, msg, got.Payload)
	require.Zero(t, rdb.Exists(ctx, snap).Val(), "the cached map is gone")
}
