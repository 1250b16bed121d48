package booking

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// A hold's script calls (the gate, the extension after the first commit of
// the event in a process, the undo of a refused hold) run on a Redis
// Cluster: the lease, the rate counter and the hints share the lease's
// slot. A hint refuses another buyer, a replay passes its own hints, the
// lease is moved to the hold's time, and a seat PostgreSQL refuses is
// hinted again for its holder.
func TestHoldOnRedisCluster(t *testing.T) {
	t.Parallel()
	b := setupWith(t, testenv.Postgres(t), testenv.RedisCluster(t))
	event, seats := b.event(t, "A:1x10@100")
	status, r, err := b.hold(t, event, "ann", "k", []int64{seats[1], seats[2]}, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	ctx := context.Background()
	left, err := b.rdb.PTTL(ctx, b.holds.hints.hintKeys(event, []int64{seats[2]})[0]).Result()
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

	// The gate that moves the lease itself (the event's hold time known
	// now), and the undo of a hold PostgreSQL refused.
	status, c, err := b.hold(t, event, "cid", "k", []int64{seats[5]}, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	exp, err = b.rdb.ZScore(ctx, b.desk.LeaseKey(event), b.uid("cid")).Result()
	require.NoError(t, err)
	require.WithinDuration(t, c.ExpiresAt, time.UnixMilli(int64(exp)), time.Minute, "the gate moved the lease to the hold")
	lost := b.holds.hints.hintKeys(event, []int64{seats[1], seats[6]})
	require.NoError(t, b.rdb.Del(ctx, lost[0]).Err())
	status, _, err = b.hold(t, event, "dan", "k", []int64{seats[1], seats[6]}, "")
	require.Equal(t, http.StatusConflict, status, "%v", err)
	require.True(t, strings.HasPrefix(b.rdb.Get(ctx, lost[0]).Val(), r.ID+"|"), "hinted again for its holder")
	require.Zero(t, b.rdb.Exists(ctx, lost[1]).Val(), "the refused hold's own hint dropped")
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

// A hold refused after the gate took its hints and moved the lease (here
// a pass of another user) puts the lease back where it found it and drops
// its hints: a refused attempt never lengthens a buyer's admission.
func TestARefusedHoldPutsTheLeaseBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	event, seats := b.event(t, "A:1x10@100")
	status, _, err := b.hold(t, event, "first", "k", []int64{seats[0]}, "") // the process learns the event's hold time
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)

	eve := b.uid("eve")
	b.desk.admit(event, eve)
	leased, err := b.rdb.ZScore(ctx, b.desk.LeaseKey(event), eve).Result()
	require.NoError(t, err)
	_, err = b.holds.Hold(ctx, holdInput{User: eve, Event: event, Pass: b.desk.admit(event, b.uid("other")), Key: "k", Seats: []int64{seats[1]}})
	require.Equal(t, http.StatusForbidden, answerOf(err).Status, "%v", err)
	again, err := b.rdb.ZScore(ctx, b.desk.LeaseKey(event), eve).Result()
	require.NoError(t, err)
	require.Equal(t, leased, again, "the lease is where the gate found it")
	require.Zero(t, b.rdb.Exists(ctx, b.holds.hints.hintKeys(event, []int64{seats[1]})...).Val(), "the hint is gone")
}
