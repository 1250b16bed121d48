package outbox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func relayFor(t *testing.T, stream string) *Relay {
	t.Helper()
	r, err := NewRelay(RelayConfig{
		Pool: testenv.Postgres(t), Redis: testenv.Redis(t), Stream: stream, StreamMaxLen: 10_000,
		Batch: 50, PollInterval: 5 * time.Millisecond, Retention: time.Hour,
		Registerer: prometheus.NewRegistry(), Log: testenv.Logger(),
	})
	require.NoError(t, err)
	return r
}

// Several relays run at once; the advisory lock lets one publish at a time,
// so every committed event reaches the stream once and in commit order of
// ids, and rolled-back events never do.
func TestRelaysPublishEachCommittedEventOnce(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	agg := testenv.Prefix(t)
	stream := store.NewKeyspace(agg).Global("outbox").Key("events")
	var effects sync.Map
	var dup atomic.Int64
	relays := []*Relay{relayFor(t, stream), relayFor(t, stream), relayFor(t, stream)}
	for _, r := range relays {
		r.Handle("test.happened", func(_ context.Context, e Event) error {
			if _, loaded := effects.LoadOrStore(e.ID, true); loaded {
				dup.Add(1)
			}
			return nil
		})
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range relays {
		wg.Add(1)
		go func(r *Relay) { defer wg.Done(); _ = r.Run(rctx) }(r)
	}
	const n = 200
	for i := 0; i < n; i++ {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, Add(ctx, tx, "test.happened", agg, map[string]int{"i": i}))
		if i%10 == 9 {
			require.NoError(t, tx.Rollback(ctx)) // never published
			continue
		}
		require.NoError(t, tx.Commit(ctx))
	}
	rdb := testenv.Redis(t)
	testenv.Eventually(t, 10*time.Second, func() bool {
		l, _ := rdb.XLen(ctx, stream).Result()
		return l >= n-n/10
	}, "all committed events published")
	time.Sleep(50 * time.Millisecond)
	cancel()
	wg.Wait()
	entries, err := rdb.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, n-n/10)
	require.Zero(t, dup.Load(), "one relay at a time: no event handled twice")
	prev := ""
	for _, e := range entries {
		require.Equal(t, agg, e.Values["aggregate"])
		id := e.Values["id"].(string)
		require.True(t, prev == "" || len(id) > len(prev) || (len(id) == len(prev) && id > prev), "in id order")
		prev = id
	}
}

// A failing derived effect stops the relay at that event; it is retried
// and published once the effect succeeds.
func TestFailingEffectStopsAndRetries(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	agg := testenv.Prefix(t)
	stream := store.NewKeyspace(agg).Global("outbox").Key("events")
	r := relayFor(t, stream)
	var fail atomic.Bool
	fail.Store(true)
	r.Handle("test.fragile", func(context.Context, Event) error {
		if fail.Load() {
			return errors.New("cache down")
		}
		return nil
	})
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, Add(ctx, tx, "test.fragile", agg, map[string]string{}))
	require.NoError(t, tx.Commit(ctx))
	_, err = r.RelayOnce(ctx)
	require.ErrorContains(t, err, "cache down")
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL AND aggregate_id = $1`, agg).Scan(&left))
	require.Equal(t, 1, left, "the failing event stays unpublished")
	fail.Store(false)
	_, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	var published bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT published_at IS NOT NULL FROM outbox WHERE aggregate_id = $1`, agg).Scan(&published))
	require.True(t, published)
}

// The relay marks what it published in one statement per batch, not one
// per event, and only what it published: an effect failing mid-batch
// leaves that event and the rest unpublished.
func TestRelayMarksABatchPublishedInOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = store.Migrate(ctx, pool, store.Migrations(), testenv.Logger())
	require.NoError(t, err)
	// A statement-level trigger counts the UPDATE statements on outbox.
	_, err = pool.Exec(ctx, `
CREATE TABLE updates_seen (n integer NOT NULL);
INSERT INTO updates_seen VALUES (0);
CREATE FUNCTION count_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE updates_seen SET n = n + 1; RETURN NULL; END $$;
CREATE TRIGGER count_update AFTER UPDATE ON outbox FOR EACH STATEMENT EXECUTE FUNCTION count_update();`)
	require.NoError(t, err)
	updates := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT n FROM updates_seen`).Scan(&n))
		return n
	}
	stream := store.NewKeyspace(testenv.Prefix(t)).Global("outbox").Key("events")
	r, err := NewRelay(RelayConfig{
		Pool: pool, Redis: testenv.Redis(t), Stream: stream, StreamMaxLen: 10_000,
		Batch: 100, PollInterval: time.Second, Retention: time.Hour,
		Registerer: prometheus.NewRegistry(), Log: testenv.Logger(),
	})
	require.NoError(t, err)
	add := func(kind string, n int) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		for i := 0; i < n; i++ {
			require.NoError(t, Add(ctx, tx, kind, "agg", map[string]int{"i": i}))
		}
		require.NoError(t, tx.Commit(ctx))
	}

	add("test.fine", 60)
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 60, n)
	require.Equal(t, 1, updates(), "60 events marked by one statement")

	var fail atomic.Bool
	fail.Store(true)
	r.Handle("test.fragile", func(context.Context, Event) error {
		if fail.Load() {
			return errors.New("cache down")
		}
		return nil
	})
	add("test.fine", 5)
	add("test.fragile", 1)
	add("test.fine", 5)
	n, err = r.RelayOnce(ctx)
	require.ErrorContains(t, err, "cache down")
	require.Equal(t, 5, n, "the events before the failing one went out")
	require.Equal(t, 2, updates())
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&left))
	require.Equal(t, 6, left, "the failing event and those after it wait")
	l, err := testenv.Redis(t).XLen(ctx, stream).Result()
	require.NoError(t, err)
	require.EqualValues(t, 65, l)

	fail.Store(false)
	n, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.Equal(t, 3, updates())
}

// freshRelay is a relay on a database of the test's own, so RelayOnce sees
// only the test's events.
func freshRelay(t *testing.T) (*Relay, *pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = store.Migrate(ctx, pool, store.Migrations(), testenv.Logger())
	require.NoError(t, err)
	stream := store.NewKeyspace(testenv.Prefix(t)).Global("outbox").Key("events")
	r, err := NewRelay(RelayConfig{
		Pool: pool, Redis: testenv.Redis(t), Stream: stream, StreamMaxLen: 10_000,
		Batch: 100, PollInterval: time.Second, Retention: time.Hour,
		Registerer: prometheus.NewRegistry(), Log: testenv.Logger(),
	})
	require.NoError(t, err)
	return r, pool, stream
}

func addEvents(t *testing.T, pool *pgxpool.Pool, kind string, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	for i := 0; i < n; i++ {
		require.NoError(t, Add(ctx, tx, kind, "agg", map[string]int{"i": i}))
	}
	require.NoError(t, tx.Commit(ctx))
}

// A batch effect is applied once per relayed batch to all the events of its
// kind in it, in id order; a failing one stops the relay before the first
// of them, and the events before it go out.
func TestBatchEffectRunsOncePerBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, pool, stream := freshRelay(t)
	var calls atomic.Int64
	var fail atomic.Bool
	var seen []int64
	r.HandleBatch("test.batched", func(_ context.Context, es []Event) error {
		calls.Add(1)
		if fail.Load() {
			return errors.New("cache down")
		}
		for _, e := range es {
			require.Equal(t, "test.batched", e.Kind)
			seen = append(seen, e.ID)
		}
		return nil
	})
	addEvents(t, pool, "test.fine", 3)
	addEvents(t, pool, "test.batched", 40)
	addEvents(t, pool, "test.fine", 3)
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 46, n)
	require.EqualValues(t, 1, calls.Load(), "one call for the batch")
	require.Len(t, seen, 40)
	require.True(t, slices.IsSorted(seen), "in id order")

	fail.Store(true)
	addEvents(t, pool, "test.fine", 2)
	addEvents(t, pool, "test.batched", 2)
	addEvents(t, pool, "test.fine", 2)
	n, err = r.RelayOnce(ctx)
	require.ErrorContains(t, err, "cache down")
	require.Equal(t, 2, n, "the events before the first of the failing kind went out")
	l, err := testenv.Redis(t).XLen(ctx, stream).Result()
	require.NoError(t, err)
	require.EqualValues(t, 48, l)
	fail.Store(false)
	n, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
}

// A routed kind goes to its own stream as well as to the relay's, so its
// consumer reads only its events; other kinds do not reach that stream.
func TestRoutedKindGoesToItsOwnStreamToo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, pool, stream := freshRelay(t)
	own := stream + ":routed"
	r.Route("test.routed", own)
	addEvents(t, pool, "test.other", 5)
	addEvents(t, pool, "test.routed", 2)
	addEvents(t, pool, "test.other", 5)
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 12, n)
	rdb := testenv.Redis(t)
	all, err := rdb.XLen(ctx, stream).Result()
	require.NoError(t, err)
	require.EqualValues(t, 12, all, "every event is in the relay's stream")
	routed, err := rdb.XRange(ctx, own, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, routed, 2)
	for _, e := range routed {
		require.Equal(t, "test.routed", e.Values["kind"])
	}
}
