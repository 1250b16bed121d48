package booking

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/batch"
	"github.com/presenced/presenced/internal/testenv"
)

// Holds that wait for a reader together are read in one round trip, and
// each gets the answer it would have had read alone: a hold, a hold of
// another event, a replay of a committed request, and a seat that is not
// the event's.
func TestHoldsQueuedTogetherAreReadInOneRoundTrip(t *testing.T) {
	t.Parallel()
	db, trips := countingPool(t, 4)
	b := setupWith(t, db, testenv.Redis(t))
	event, seats := b.event(t, "A:1x10@100")
	other, otherSeats := b.event(t, "B:1x10@200")
	status, done, err := b.hold(t, event, "done", "k", []int64{seats[9]}, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)

	release := b.blockReaders()
	hw := b.concurrent()
	hw.start("ann", event, "ann", "k", []int64{seats[0], seats[1]})
	hw.start("dan", other, "dan", "k", []int64{otherSeats[0]})
	hw.start("done", event, "done", "k", []int64{seats[9]})
	hw.start("lost", event, "lost", "k", []int64{seats[2], otherSeats[5]})
	waitQueued(t, b.holds.readers.Group, 4)
	trips.take()
	release()
	answers := hw.wait()
	n, statements := trips.take()

	count, sum := histogramOf(t, b.m.readBatch)
	require.Equal(t, uint64(1), count, "one batch (the first hold was read and written in one statement)")
	require.Equal(t, float64(4), sum)
	require.Zero(t, testutil.ToFloat64(b.m.readBatchFailed))
	require.LessOrEqual(t, n, 1+3, "one read and at most three writes")
	require.GreaterOrEqual(t, statements, 4*2, "every hold's event and seats")

	for _, user := range []string{"ann", "dan"} {
		require.NoError(t, answers[user].err, user)
		require.Equal(t, http.StatusCreated, answers[user].status, user)
	}
	require.True(t, answers["done"].result.Replayed)
	var again Reservation
	require.NoError(t, json.Unmarshal(answers["done"].result.Body, &again))
	require.Equal(t, done.ID, again.ID)
	require.Equal(t, http.StatusBadRequest, answers["lost"].status, "%v", answers["lost"].err)
	b.requireNoDoubleOwnership(t, event)
	b.requireNoDoubleOwnership(t, other)
}

// A batch of reads in which a statement fails (here a key PostgreSQL
// refuses, put into the batch behind the readers' back) reads each of its
// holds alone, and each gets its own answer.
func TestAReadBatchThatFailsReadsEachHoldAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, seats := b.event(t, "A:1x10@100")
	r := b.holds.readers
	r.Group = batch.New(r.Slots(), maxReadBatch, func(ctx context.Context, calls []*batch.Call[*pendingRead]) {
		if len(calls) > 1 {
			bad := *calls[0].Item
			bad.in.Key = "bad\x00key"
			calls[0].Item = &bad
		}
		r.run(ctx, calls)
	}, errReadAlone)

	release := b.blockReaders()
	hw := b.concurrent()
	hw.start("ann", event, "ann", "k", []int64{seats[0]})
	hw.start("bea", event, "bea", "k", []int64{seats[1]})
	hw.start("cid", event, "cid", "k", []int64{seats[2], seats[3]})
	waitQueued(t, b.holds.readers.Group, 3)
	release()
	answers := hw.wait()

	require.Equal(t, float64(1), testutil.ToFloat64(b.m.readBatchFailed))
	for _, user := range []string{"ann", "bea", "cid"} {
		require.NoError(t, answers[user].err, user)
		require.Equal(t, http.StatusCreated, answers[user].status, user)
	}
	b.requireNoDoubleOwnership(t, event)
}
