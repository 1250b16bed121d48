package booking

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/batch"
	"github.com/presenced/presenced/internal/refusal"
)

// heldWrites runs holds at once, each in its own goroutine, and collects
// their answers.
type heldWrites struct {
	b       *bundle
	wg      sync.WaitGroup
	mu      sync.Mutex
	answers map[string]holdAnswer
}

type holdAnswer struct {
	status int
	result holdResult
	err    error
}

func (b *bundle) concurrent() *heldWrites {
	return &heldWrites{b: b, answers: map[string]holdAnswer{}}
}

// start sends a hold of user (admitted first) under name.
func (hw *heldWrites) start(name, event, user, key string, seats []int64) {
	hw.send(name, event, user, func(in holdInput) (holdResult, error) {
		in.Key, in.Seats = key, seats
		return hw.b.holds.Hold(context.Background(), in)
	})
}

// send runs hold for user (admitted first) in its own goroutine and keeps
// its answer under name.
func (hw *heldWrites) send(name, event, user string, hold func(holdInput) (holdResult, error)) {
	user = hw.b.uid(user)
	pass := hw.b.desk.admit(event, user)
	hw.wg.Add(1)
	go func() {
		defer hw.wg.Done()
		res, err := hold(holdInput{User: user, Event: event, Pass: pass})
		a := holdAnswer{status: res.Status, result: res, err: err}
		if e := answerOf(err); e != nil {
			a.status = e.Status
		}
		hw.mu.Lock()
		hw.answers[name] = a
		hw.mu.Unlock()
	}()
}

func (hw *heldWrites) wait() map[string]holdAnswer {
	hw.wg.Wait()
	return hw.answers
}

// waitQueued waits until n callers wait for a batch of g.
func waitQueued[T any](t *testing.T, g *batch.Group[T], n int) {
	t.Helper()
	require.Eventually(t, func() bool { return g.Queued() == n }, 10*time.Second, 2*time.Millisecond, "%d queued", n)
}

// blockWriters takes every write slot, so that holds queue.
func (b *bundle) blockWriters() func() { return b.holds.writers.Pause() }

// blockReaders takes every read slot, and every write slot so that holds
// go the batched way (a hold that finds a writer free is read and written
// in one statement, holdAlone) and queue for a reader.
func (b *bundle) blockReaders() func() {
	writers := b.holds.writers.Pause()
	readers := b.holds.readers.Pause()
	return func() { readers(); writers() }
}

// waitQueued waits until n holds wait for a writer.
func (b *bundle) waitQueued(t *testing.T, n int) { t.Helper(); waitQueued(t, b.holds.writers.Group, n) }

func histogramOf(t *testing.T, m interface{ Write(*dto.Metric) error }) (count uint64, sum float64) {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	return d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()
}

// Holds that wait for a writer together are written in one statement and
// one commit, each with its own reservation, items, prices, stored answer
// and counters, and one inventory event per section of the batch.
func TestHoldsQueuedTogetherAreWrittenInOneStatement(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.HoldWriters = 1 })
	event, seats := b.event(t, "A:2x10@1000,B:1x10@2000")
	other, otherSeats := b.event(t, "A:1x10@500")
	carts := map[string]struct {
		event string
		seats []int64
	}{
		"ann": {event, []int64{seats[25], seats[0]}}, "ben": {event, []int64{seats[1]}},
		"cat": {event, []int64{seats[2], seats[3]}}, "dan": {other, []int64{otherSeats[0]}},
		"eve": {other, []int64{otherSeats[1], otherSeats[2]}},
	}

	release := b.blockWriters()
	hw := b.concurrent()
	for user, c := range carts {
		hw.start(user, c.event, user, "k", c.seats)
	}
	b.waitQueued(t, len(carts))
	release()
	answers := hw.wait()

	count, sum := histogramOf(t, b.m.writeBatch)
	require.Equal(t, uint64(1), count, "one statement")
	require.Equal(t, float64(len(carts)), sum, "for every hold")
	require.Zero(t, testutil.ToFloat64(b.m.writeBatchRefused))
	for user, c := range carts {
		a := answers[user]
		require.NoError(t, a.err, user)
		require.Equal(t, http.StatusCreated, a.status, user)
		var r Reservation
		require.NoError(t, json.Unmarshal(a.result.Body, &r))
		require.Len(t, r.Items, len(c.seats), user)
		var total int64
		for _, it := range r.Items {
			require.Contains(t, c.seats, it.Seat)
			total += it.Price
		}
		require.Equal(t, total, r.Total, user)

		// The stored answer is the hold's own, byte for byte.
		again, err := b.holds.Hold(context.Background(), holdInput{User: b.uid(user), Event: c.event,
			Pass: b.desk.admit(c.event, b.uid(user)), Key: "k", Seats: c.seats})
		require.NoError(t, err, user)
		require.True(t, again.Replayed, user)
		require.Equal(t, string(a.result.Body), string(again.Body), user)

		var status string
		var total2 int64
		require.NoError(t, b.db.QueryRow(context.Background(),
			`SELECT status, total FROM reservations WHERE id = $1`, r.ID).Scan(&status, &total2))
		require.Equal(t, StatusPending, status)
		require.Equal(t, r.Total, total2)
	}
	b.requireNoDoubleOwnership(t, event)
	b.requireNoDoubleOwnership(t, other)

	for ev, sections := range map[string]int{event: 2, other: 1} {
		var n int
		require.NoError(t, b.db.QueryRow(context.Background(),
			`SELECT count(*) FROM outbox WHERE kind = $1 AND aggregate_id = $2`, KindInventoryChanged, ev).Scan(&n))
		require.Equal(t, sections, n, "one inventory event per section of %s", ev)
	}
}

// A batch is all or nothing. When one of its holds is refused (here a seat
// another hold of the batch wants, and a key another request of the batch
// uses), the batch writes nothing and each hold is written alone, getting
// the answer it would have had without batching.
func TestABatchRefusedAsAWholeWritesEachHoldAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.HoldWriters = 1 })
	event, seats := b.event(t, "A:1x10@100")

	release := b.blockWriters()
	hw := b.concurrent()
	hw.start("ann", event, "ann", "k", []int64{seats[0], seats[1]})
	b.waitQueued(t, 1)
	// Redis lost ann's seat hints: only PostgreSQL can refuse bob now.
	require.NoError(t, b.rdb.Del(context.Background(), b.holds.hints.hintKeys(event, []int64{seats[0], seats[1]})...).Err())
	hw.start("bob", event, "bob", "k", []int64{seats[1]})
	b.waitQueued(t, 2)
	hw.start("cat", event, "cat", "k", []int64{seats[5]})
	b.waitQueued(t, 3)
	// The same request twice at once (a client's retry of a timed-out call).
	hw.start("dan", event, "dan", "k", []int64{seats[7]})
	hw.start("dan again", event, "dan", "k", []int64{seats[7]})
	b.waitQueued(t, 5)
	release()
	answers := hw.wait()

	require.Equal(t, float64(1), testutil.ToFloat64(b.m.writeBatchRefused))
	ann, bob := answers["ann"], answers["bob"]
	require.ElementsMatch(t, []int{http.StatusCreated, http.StatusConflict}, []int{ann.status, bob.status},
		"ann: %v, bob: %v", ann.err, bob.err)
	require.Equal(t, http.StatusCreated, answers["cat"].status, "%v", answers["cat"].err)
	dan, again := answers["dan"], answers["dan again"]
	require.NoError(t, dan.err)
	require.NoError(t, again.err)
	require.Equal(t, http.StatusCreated, dan.status)
	require.Equal(t, http.StatusCreated, again.status)
	require.NotEqual(t, dan.result.Replayed, again.result.Replayed, "one wrote, the other was answered its stored response")
	require.Equal(t, string(dan.result.Body), string(again.result.Body))

	won := 1 // bob's one seat
	if ann.status == http.StatusCreated {
		won = 2
	}
	live := b.liveItems(t, event)
	require.Len(t, live, won+2, "the winner's seats, cat's and dan's: %v", live)
	b.requireNoDoubleOwnership(t, event)
}

// A hold whose request ends while it waits for a reader or a writer is
// not written: it gets the retryable 503 of a store that did not answer,
// its seats stay free for the next buyer, and the hold queued before it
// is written.
func TestAHoldWhoseRequestEndsWhileQueuedIsNotWritten(t *testing.T) {
	t.Parallel()
	stages := map[string]struct {
		pause  func(*bundle) func()
		queued func(*testing.T, *bundle, int)
	}{
		"reader": {
			func(b *bundle) func() { return b.blockReaders() },
			func(t *testing.T, b *bundle, n int) { waitQueued(t, b.holds.readers.Group, n) },
		},
		"writer": {
			func(b *bundle) func() { return b.holds.writers.Pause() },
			func(t *testing.T, b *bundle, n int) { waitQueued(t, b.holds.writers.Group, n) },
		},
	}
	for name, stage := range stages {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *config.Booking) { c.HoldReaders, c.HoldWriters = 1, 1 })
			event, seats := b.event(t, "A:1x10@100")
			release := stage.pause(b)
			queued := func(n int) { stage.queued(t, b, n) }

			hw := b.concurrent()
			hw.start("ann", event, "ann", "k", []int64{seats[0]})
			queued(1)
			user := b.uid("quitter")
			pass := b.desk.admit(event, user)
			ctx, cancel := context.WithCancel(context.Background())
			gaveUp := make(chan error, 1)
			go func() {
				_, err := b.holds.Hold(ctx, holdInput{User: user, Event: event, Pass: pass, Key: "k", Seats: []int64{seats[1]}})
				gaveUp <- err
			}()
			queued(2)
			cancel()
			err := <-gaveUp
			require.ErrorIs(t, err, refusal.ErrBusy, "%v", err)
			queued(1)
			release()
			answers := hw.wait()

			require.Equal(t, http.StatusCreated, answers["ann"].status, "%v", answers["ann"].err)
			require.Equal(t, map[int64]int{seats[0]: 1}, b.liveItems(t, event), "only ann's seat is held")
			status, _, err := b.hold(t, event, "bob", "k", []int64{seats[1]}, "")
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, status, "the quitter's seat is free")
			b.requireNoDoubleOwnership(t, event)
		})
	}
}

// Holds on distinct seats racing through one writer end up written, each
// once, whatever batches they formed; overlapping carts get one winner.
func TestManyHoldsThroughOneWriter(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.HoldWriters = 1 })
	event, seats := b.event(t, "A:4x10@100,B:4x10@200")
	const buyers = 40
	statuses := race(t, buyers, func(i int) int {
		cart := []int64{seats[i], seats[40+i]}
		if i%10 == 9 {
			cart = []int64{seats[i-1]} // wants a seat of the buyer before
		}
		status, _, _ := b.hold(t, event, fmt.Sprintf("buyer%d", i), "k", cart, "")
		return status
	})
	// Of each buyer before a tenth and that tenth, one wins.
	require.Equal(t, buyers-buyers/10, statuses[http.StatusCreated], "%v", statuses)
	require.Equal(t, buyers/10, statuses[http.StatusConflict], "%v", statuses)
	b.requireNoDoubleOwnership(t, event)
}
