package booking

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// startBest sends a best-available hold of user (admitted first) under
// name.
func (hw *heldWrites) startBest(name, event, user, key string, best bestInput) {
	hw.send(name, event, user, func(in holdInput) (holdResult, error) {
		in.Key = key
		return hw.b.holds.HoldBest(context.Background(), in, best)
	})
}

// Best-available holds that wait for a slot together run in one
// transaction, one after another: each picks as it would have alone after
// the ones before it (the documented order, no seat twice), a refusal
// writes nothing and leaves the others alone, and each answer is stored
// as its own.
func TestBestHoldsQueuedTogetherPickAsIfOneAfterAnother(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.HoldWriters = 1 })
	event, _ := b.event(t, "B:2x10@200,C:1x3@100")
	other, _ := b.event(t, "D:1x4@100")
	pair := bestInput{Section: "B", Quantity: 2, Adjacent: true}
	status, early, err := b.holdBest(t, other, "early", "k", bestInput{Section: "D", Quantity: 1}, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)

	release := b.holds.bests.Pause()
	hw := b.concurrent()
	names := []string{}
	for i := range 6 {
		name := fmt.Sprintf("u%d", i)
		hw.startBest(name, event, name, "k", pair)
		names = append(names, name)
		waitQueued(t, b.holds.bests.Group, len(names))
	}
	// The same user again: its checkout from the first hold of the batch
	// is pending.
	hw.startBest("u0-again", event, "u0", "k2", pair)
	waitQueued(t, b.holds.bests.Group, 7)
	// More adjacent seats than a row has.
	hw.startBest("too-many", event, "wide", "k", bestInput{Section: "C", Quantity: 4, Adjacent: true})
	waitQueued(t, b.holds.bests.Group, 8)
	// A retry of a hold committed before the batch, and a hold of another
	// event.
	hw.startBest("early-retry", other, "early", "k", bestInput{Section: "D", Quantity: 1})
	waitQueued(t, b.holds.bests.Group, 9)
	hw.startBest("other-event", other, "later", "k", bestInput{Section: "D", Quantity: 1})
	waitQueued(t, b.holds.bests.Group, 10)
	release()
	answers := hw.wait()

	count, sum := histogramOf(t, b.m.writeBatch)
	require.Equal(t, uint64(2), count, "the early hold alone, then one batch")
	require.Equal(t, float64(11), sum, "of every hold")
	require.Zero(t, testutil.ToFloat64(b.m.writeBatchRefused))

	retry := answers["early-retry"]
	require.NoError(t, retry.err)
	require.True(t, retry.result.Replayed)
	var replayed Reservation
	require.NoError(t, json.Unmarshal(retry.result.Body, &replayed))
	require.Equal(t, early.ID, replayed.ID)
	later := answers["other-event"]
	require.NoError(t, later.err)
	var laterRes Reservation
	require.NoError(t, json.Unmarshal(later.result.Body, &laterRes))
	require.Equal(t, other, laterRes.Event)
	require.NotEqual(t, early.Items[0].Seat, laterRes.Items[0].Seat)
	b.requireNoDoubleOwnership(t, other)

	want := [][2]int{{1, 5}, {1, 3}, {1, 7}, {1, 1}, {1, 9}, {2, 5}} // (row, first seat), as alone
	for i, name := range names {
		a := answers[name]
		require.NoError(t, a.err, name)
		require.Equal(t, http.StatusCreated, a.status, name)
		var r Reservation
		require.NoError(t, json.Unmarshal(a.result.Body, &r))
		require.Len(t, r.Items, 2, name)
		requireAdjacent(t, &r)
		// The batch priced every hold from the counters it read: half the
		// section held one after another would have raised the last
		// one's surge.
		require.Equal(t, int64(400), r.Total, name)
		require.Equal(t, want[i][0], r.Items[0].Row, name)
		require.Equal(t, want[i][1], min(r.Items[0].Number, r.Items[1].Number), name)

		again, err := b.holds.HoldBest(context.Background(), holdInput{User: b.uid(name), Event: event,
			Pass: b.desk.admit(event, b.uid(name)), Key: "k"}, pair)
		require.NoError(t, err, name)
		require.True(t, again.Replayed, name)
		require.Equal(t, string(a.result.Body), string(again.Body), name)
	}
	var pending *PendingCheckoutError
	require.ErrorAs(t, answers["u0-again"].err, &pending)
	require.Equal(t, "no_seats_available", answerOf(answers["too-many"].err).Code)
	b.requireNoDoubleOwnership(t, event)
	var held int
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT count(*) FROM seats WHERE event_id = $1 AND status = 'HELD'`, event).Scan(&held))
	require.Equal(t, 12, held)
}

// A batch is all or nothing on errors. Here its statements wait for a
// section counter another transaction holds locked, past the batch's
// short lock wait: the batch's transaction ends having written nothing,
// and each hold runs alone, waiting up to booking.lock_timeout, and gets
// the answer it would have had without the batch.
func TestABestBatchThatFailsWritesNothingAndItsHoldsRunAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.HoldWriters = 1; c.LockTimeout = 10 * time.Second })
	event, _ := b.event(t, "B:1x10@200")
	pair := bestInput{Section: "B", Quantity: 2, Adjacent: true}

	ctx := context.Background()
	blocker, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(ctx) }()
	_, err = blocker.Exec(ctx, `SELECT FROM section_occupancy WHERE event_id = $1 FOR UPDATE`, event)
	require.NoError(t, err)

	release := b.holds.bests.Pause()
	hw := b.concurrent()
	hw.startBest("ann", event, "ann", "k", pair)
	hw.startBest("ben", event, "ben", "k", pair)
	waitQueued(t, b.holds.bests.Group, 2)
	release()
	require.Eventually(t, func() bool { return testutil.ToFloat64(b.m.writeBatchRefused) == 1 },
		10*time.Second, 5*time.Millisecond, "the batch fails on its lock wait")
	require.NoError(t, blocker.Commit(ctx))
	answers := hw.wait()

	seen := map[int]bool{}
	for _, name := range []string{"ann", "ben"} {
		a := answers[name]
		require.NoError(t, a.err, name)
		require.Equal(t, http.StatusCreated, a.status, name)
		var r Reservation
		require.NoError(t, json.Unmarshal(a.result.Body, &r))
		requireAdjacent(t, &r)
		first := min(r.Items[0].Number, r.Items[1].Number)
		require.False(t, seen[first], "%s: a run picked twice", name)
		seen[first] = true
		var n int
		require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM reservations WHERE user_id = $1`, b.uid(name)).Scan(&n))
		require.Equal(t, 1, n, "%s: one reservation", name)
	}
	b.requireNoDoubleOwnership(t, event)
	var taken int64
	require.NoError(t, b.db.QueryRow(ctx,
		`SELECT sum(taken) FROM section_occupancy WHERE event_id = $1`, event).Scan(&taken))
	require.Equal(t, int64(4), taken, "the counters count each hold once")
}
