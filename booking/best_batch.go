package booking

import (
	"context"
	"errors"
	"time"

	"github.com/presenced/presenced/internal/batch"
)

// Group commit of best-available holds. Buyers of one hot section all
// want its best free seats, so their statements, run side by side, pick
// the same runs: each finds the runs before its own locked by the others
// (a few failed locks a hold), waits on the section's counters, and
// spends the core PostgreSQL shares with them on statements that queue.
// A process therefore runs few best-available holds at once (as many as
// booking.hold_writers), and the holds that arrive while they run wait
// for the next free slot, which runs all of them in one transaction
// (runBestMany): one statement reads and picks for every hold in their
// order, each pick leaving out the seats of the picks before it, and one
// more writes them all, one commit. The holds of a batch never meet each
// other's locks, and a refused hold writes nothing and leaves the others
// alone. A hold that finds a slot free runs alone, in one statement
// (bestAloneSQL); so does one with a promotion code.
//
// A batch is all or nothing on errors: a statement that fails (a key a
// concurrent retry wrote, a lock wait past bestBatchLockTimeout, a
// timeout) ends the transaction, and each of its holds then runs alone,
// as it would without the batch.

// bestBatchLockTimeout bounds a lock wait inside a batch: a batch keeps
// the seats it picked locked until it commits, so a wait for another
// transaction's lock holds up every hold of the batch, holding locks.
// Past this, the batch fails and its holds run alone, each waiting up to
// booking.lock_timeout.
const bestBatchLockTimeout = 50 * time.Millisecond

// bestCall is one best-available hold: what it asks and, once run, what
// was answered (the 201's body, or what was read when nothing was
// written).
type bestCall struct {
	in    holdInput
	best  bestInput
	fp    []byte
	resID string

	body []byte
	view *bestView
}

// bestWriters runs best-available holds, batched by a group.
type bestWriters struct {
	h *holdsPlane
	*batch.Group[*bestCall]
}

func newBestWriters(h *holdsPlane, slots int) *bestWriters {
	w := &bestWriters{h: h}
	w.Group = batch.New(slots, maxWriteBatch, w.run, errWriteAlone)
	return w
}

// hold runs c, alone or with the holds queued with it, and leaves its
// answer in c.
func (w *bestWriters) hold(ctx context.Context, c *bestCall) error {
	if c.in.PromoCode != "" {
		// The batch's write takes no promotion uses.
		return w.h.runBest(ctx, c)
	}
	err := w.Do(ctx, c)
	if errors.Is(err, batch.ErrLeftQueue) {
		return storeError("wait for a writer", err) // nothing was sent
	}
	if !errors.Is(err, errWriteAlone) {
		return err
	}
	return w.h.runBest(ctx, c)
}

// run runs a batch and tells each hold its outcome. Its context does not
// end with the request of the caller running it (the batch holds other
// callers' holds); the statement and lock timeouts bound it.
func (w *bestWriters) run(ctx context.Context, calls []*batch.Call[*bestCall]) {
	h := w.h
	h.m.writeBatch.Observe(float64(len(calls)))
	if len(calls) == 1 {
		calls[0].Answer(h.runBest(ctx, calls[0].Item))
		return
	}
	cs := make([]*bestCall, len(calls))
	for i, m := range calls {
		cs[i] = m.Item
	}
	alone, err := h.runBestMany(ctx, cs)
	if err != nil {
		h.m.writeBatchRefused.Inc()
	}
	for i, m := range calls {
		if err != nil || alone[i] {
			m.Answer(errWriteAlone)
		} else {
			m.Answer(nil)
		}
	}
}
