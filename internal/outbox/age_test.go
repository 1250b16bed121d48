package outbox

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// The oldest unpublished event's age is read from the database at each
// scrape, by any process with the outbox's pool: it grows with no relay
// running, drops to 0 once everything is published, and is left out (not
// made up) when the database cannot be read.
func TestAgeIsReadAtScrapeWithoutARelay(t *testing.T) {
	ctx := context.Background()
	// A database of its own: other tests' unpublished events would be
	// the oldest in a shared one.
	pool, err := pgxpool.New(ctx, testenv.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = store.Migrate(ctx, pool, store.Migrations(), testenv.Logger())
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, RegisterAgeMetric(reg, pool))
	age := func() []float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		var out []float64
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				out = append(out, m.GetGauge().GetValue())
			}
		}
		return out
	}
	require.Equal(t, []float64{0}, age(), "nothing unpublished")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, Add(ctx, tx, "test.happened", "a1", map[string]int{"n": 1}))
	require.NoError(t, tx.Commit(ctx))
	_, err = pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '90 seconds'`)
	require.NoError(t, err)
	got := age()
	require.Len(t, got, 1)
	require.GreaterOrEqual(t, got[0], 90.0, "the unpublished event's age, with no relay at all")

	_, err = pool.Exec(ctx, `UPDATE outbox SET published_at = now()`)
	require.NoError(t, err)
	require.Equal(t, []float64{0}, age(), "all published")

	pool.Close()
	require.Empty(t, age(), "a failed read exports nothing")
}
