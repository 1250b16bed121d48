package testenv_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Helpers may ask for the pool on every poll: it is one pool per package,
// so a few hundred calls open no connections beyond its size.
func TestPostgresIsOnePoolPerPackage(t *testing.T) {
	t.Parallel()
	first := testenv.Postgres(t)
	for i := 0; i < 300; i++ {
		p := testenv.Postgres(t)
		require.Same(t, first, p)
		var one int
		require.NoError(t, p.QueryRow(t.Context(), "SELECT 1").Scan(&one))
	}
	var conns int
	require.NoError(t, first.QueryRow(t.Context(),
		"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()").Scan(&conns))
	require.LessOrEqual(t, conns, int(first.Config().MaxConns))
}

// The cluster comes up and serves every slot.
func TestRedisClusterServesEverySlot(t *testing.T) {
	t.Parallel()
	c := testenv.RedisCluster(t)
	ctx := context.Background()
	shards, err := c.ClusterShards(ctx).Result()
	require.NoError(t, err)
	covered := 0
	for _, s := range shards {
		for _, r := range s.Slots {
			covered += int(r.End-r.Start) + 1
		}
	}
	require.Equal(t, 16384, covered)
	for _, k := range []string{"{a}x", "{b}x", "{c}x", "{d}x"} {
		require.NoError(t, c.Set(ctx, testenv.Prefix(t)+k, "v", 0).Err())
	}
}
