package presence_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

func clusterConfig(t *testing.T) config.Config {
	cfg := testConfig(t)
	cfg.Redis.URL = testenv.RedisClusterURL(t)
	cfg.Redis.Cluster = true
	return cfg
}

// The key paths against a Redis Cluster: every Lua step stays in one user's
// slot, lifecycle scripts in one shard's slot, changes published with
// SPUBLISH from the script.
func TestClusterKeyPaths(t *testing.T) {
	t.Parallel()
	cfg := clusterConfig(t)
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	snap := alice.subscribe("bob", "carol", "dave")
	require.Len(t, snap, 3)

	bob := connect(t, s, "bob")
	alice.statusOf("bob", "online")
	carol := connect(t, s, "carol")
	alice.statusOf("carol", "online")

	id := bob.send("presence:update", map[string]any{"status": "away"})
	require.Equal(t, "presence:updated", bob.reply(id).Event)
	alice.statusOf("bob", "away")

	bob.send("session:disconnect", nil)
	alice.statusOf("bob", "offline")

	start := time.Now()
	carol.closeAbruptly()
	alice.statusOf("carol", "offline")
	require.GreaterOrEqual(t, time.Since(start), cfg.Presence.Grace)

	id = alice.send("subscriptions:remove", map[string]any{"users": []string{"carol"}})
	alice.send("presence:update", map[string]any{"status": "busy"})
	_ = id
	dave := connect(t, s, "dave")
	alice.statusOf("dave", "online")
	_ = dave
}

// Subscriptions shared across gateways and one-time notifications on a
// cluster: control messages travel on shard channels, watcher and subject
// keys live in different slots.
func TestClusterSubscriptionsAndNotifications(t *testing.T) {
	t.Parallel()
	cfg := clusterConfig(t)
	s1, s2 := startGateways(t, cfg)

	phone := connect(t, s1, "alice")
	desk := connect(t, s2, "alice")
	phone.subscribe("bob", "erin")
	desk.quietReply(desk.send("notifications:subscribe", map[string]any{"user": "frank", "on": "online"}))

	bob := connect(t, s2, "bob")
	desk.statusOf("bob", "online")
	phone.statusOf("bob", "online")
	bob.send("presence:update", map[string]any{"status": "busy"})
	desk.statusOf("bob", "busy")

	connect(t, s1, "frank")
	for _, c := range []*wsClient{phone, desk} {
		f := c.next("notifications:received")
		require.JSONEq(t, `"frank"`, string(mustField(t, f.Payload, "user")))
	}

	phone.send("session:disconnect", nil)
	desk.send("session:disconnect", nil)
	rdb := testenv.RedisCluster(t)
	testenv.Eventually(t, 5*time.Second, func() bool {
		n, err := rdb.SCard(context.Background(), cfg.Redis.Prefix+"{presence:bob}:followers").Result()
		require.NoError(t, err, "an error must not pass for an empty set")
		return n == 0
	}, "followers cleaned across slots")
}
