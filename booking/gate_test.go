package booking

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// A hold's two script calls (the gate, the extension) run on a Redis
// Cluster: the lease, the rate counter and the hints share the lease's
// slot. A hint refuses another buyer, a replay passes its own hints, and
// the lease is extended to the hold's time.
func TestHoldOnRedisCluster(t *testing.T) {
	t.Parallel()
	b := setupWith(t, testenv.Postgres(t), testenv.RedisCluster(t))
	event, seats := b.event(t, "A:1x10@100")
	status, r, err := b.hold(t, event, "ann", "k", []int64{seats[1], seats[2]}, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	left, err := b.rdb.PTTL(context.Background(), b.holds.hints.hintKeys(event, []int64{seats[2]})[0]).Result()
	require.NoError(t, err)
	require.Greater(t, left, time.Minute, "the hints got the hold's time")
	exp, err := b.rdb.ZScore(context.Background(), b.desk.LeaseKey(event), b.uid("ann")).Result()
	require.NoError(t, err)
	require.WithinDuration(t, r.ExpiresAt, time.UnixMilli(int64(exp)), time.Minute, "the lease was extended to the hold")

	status, again, err := b.hold(t, event, "ann", "k", []int64{seats[1], seats[2]}, "")
	require.NoError(t, err, "a replay is not refused by its own hints")
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, r.ID, again.ID)
	status, _, err = b.hold(t, event, "bea", "k", []int64{seats[2], seats[3]}, "")
	require.Equal(t, http.StatusConflict, status, "%v", err)
	require.Equal(t, float64(1), testutil.ToFloat64(b.m.hintRejections))
	b.requireNoDoubleOwnership(t, event)
}

// The rolling upgrade that moved the hints into the lease's slot: a process
// of the new layout does not read the old one's hints ("{event:<id>}:hint:
// <seat>"). A seat an old process hints but never held is held; a seat it
// held (its hint unseen) is refused by PostgreSQL, and nobody owns a seat
// twice. So old and new processes may serve one sale side by side; the
// old hints lapse with their holds.
func TestHintsOfTheOldLayoutAreIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, seats := b.event(t, "A:1x10@100")
	ctx := context.Background()
	oldHint := func(seat int64) string { return b.ks.Entity("event", event).Key("hint", itoa(seat)) }

	// An old process's claim on seats[1] that never committed.
	require.NoError(t, b.rdb.Set(ctx, oldHint(seats[1]), "old-reservation|old-claim", time.Minute).Err())
	status, _, err := b.hold(t, event, "new", "k", []int64{seats[1]}, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, "the old hint is not read")

	// An old process's committed hold of seats[2]: its hint is in the old
	// layout only.
	status, r, err := b.hold(t, event, "old", "k", []int64{seats[2]}, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	require.NoError(t, b.rdb.Del(ctx, b.holds.hints.hintKeys(event, []int64{seats[2]})...).Err())
	require.NoError(t, b.rdb.Set(ctx, oldHint(seats[2]), r.ID+"|old-claim", time.Minute).Err())
	status, _, err = b.hold(t, event, "next", "k", []int64{seats[2], seats[3]}, "")
	require.Equal(t, http.StatusConflict, status, "PostgreSQL refuses: %v", err)
	b.requireNoDoubleOwnership(t, event)
}
