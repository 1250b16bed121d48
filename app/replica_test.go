package app

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// The browse plane's read-only login points at a real streaming replica
// (pg_basebackup from the local binaries): an event written on the primary
// by the booking plane shows in a seat map served from the replica, the
// browse pool's connections are on the replica and none on the primary,
// and /metrics says the pool is on a replica and how far it lags.
func TestSeatMapFromStreamingReplica(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"booking", "browse", "worker"}
	cfg.Postgres.ReadOnlyURL = testenv.ReplicaURL(t, cfg.Postgres.URL, store.DevReadOnlyLogin)
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	c := client{t: t, base: serve(t, a)}
	admin := map[string]string{auth.APIKeyHeader: a.Config.Auth.APIKey}
	event := fmt.Sprintf("replica-%d", time.Now().UnixNano())

	code, _, out := c.do("POST", "/v1/admin/events", admin,
		`{"id":"`+event+`","currency":"EUR","startsAt":"2031-01-01T20:00:00Z","sections":[{"id":"A","rows":2,"seatsPerRow":5,"basePrice":5000}]}`)
	require.Equal(t, 201, code, out)

	// The replica replays the new event shortly after the primary commits
	// it; until then browse answers as for an unknown event.
	var seats []any
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, _, m := c.do("GET", "/v1/events/"+event+"/seats", nil, "")
		if code != 200 {
			return false
		}
		seats, _ = m["seats"].([]any)
		return len(seats) == 10
	}, "the seat map served from the replica")

	// Where the browse pool's connections are: the pool itself is on a
	// server in recovery, and the replica sees connections of the pool's
	// application_name. (Other tests of this package browse on the primary
	// at the same time, so the primary's count says nothing.)
	ro, err := a.Postgres(context.Background(), store.PoolReadOnly)
	require.NoError(t, err)
	var inRecovery bool
	require.NoError(t, ro.QueryRow(context.Background(), `SELECT pg_is_in_recovery()`).Scan(&inRecovery))
	require.True(t, inRecovery, "the browse pool is on the replica")
	browsing := func(url string) int {
		pool, err := pgxpool.New(context.Background(), url)
		require.NoError(t, err)
		defer pool.Close()
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = 'presenced-`+store.PoolReadOnly+`'
			   AND datname = current_database()`).Scan(&n))
		return n
	}
	require.Positive(t, browsing(testenv.ReplicaURL(t, cfg.Postgres.URL, store.DevOwner)), "browse connections on the replica")

	_, body := get(t, c.base+"/metrics")
	gauge := func(name string) float64 {
		m := regexp.MustCompile(`(?m)^` + name + `\{pool="` + store.PoolReadOnly + `"\} (\S+)$`).FindStringSubmatch(body)
		require.NotNil(t, m, "%s in /metrics", name)
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	require.Equal(t, 1.0, gauge("presenced_postgres_in_recovery"))
	require.Equal(t, 1.0, gauge("presenced_postgres_replica_receiving"))
	lag := gauge("presenced_postgres_replica_lag_seconds")
	require.GreaterOrEqual(t, lag, 0.0)
	require.Less(t, lag, 60.0, "a streaming replica on loopback keeps up")
}
