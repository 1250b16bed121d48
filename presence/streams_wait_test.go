package presence

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/streams"
	"github.com/presenced/presenced/internal/testenv"
)

// A process started before its Redis answers waits for it: the stream
// groups the lifecycle needs are created once Redis is up, instead of the
// lifecycle failing (which stopped the whole process). It gives up only
// when it is told to stop.
func TestStreamGroupsWaitForRedisToAnswer(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	m := newTestModule(t, rdb, testenv.Prefix(t), nil)

	var up atomic.Bool
	opt := *rdb.Options()
	opt.MaxRetries = -1
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !up.Load() {
			return nil, errors.New("connection refused (redis not up yet)")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	down := redis.NewClient(&opt)
	t.Cleanup(func() { _ = down.Close() })

	c := newConsumer(m, "pings", groupPings, func(n int) string { return m.keys.shard(n).pings })
	c.group = streams.NewGroup(down, groupPings, "waiting")
	done := make(chan error, 1)
	go func() { done <- c.ensureGroups(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("gave up while Redis was down: %v", err)
	case <-time.After(500 * time.Millisecond):
	}

	up.Store(true)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after Redis came up")
	}
	for n := 0; n < m.cfg.Shards; n++ {
		groups, err := rdb.XInfoGroups(context.Background(), m.keys.shard(n).pings).Result()
		require.NoError(t, err)
		require.Len(t, groups, 1)
		require.Equal(t, groupPings, groups[0].Name)
	}

	// Told to stop while Redis is down, it stops, with the error.
	up.Store(false)
	stillDown := redis.NewClient(&opt)
	t.Cleanup(func() { _ = stillDown.Close() })
	c.group = streams.NewGroup(stillDown, "another", "waiting")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	require.Error(t, c.ensureGroups(ctx))
}
