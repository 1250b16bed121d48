package booking

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/batch"
)

// Group commit of best-available holds. Buyers of one hot section all
// want its best free seats, so their statements, run side by side, pick
// the same runs: each finds the runs before its own locked by the others
// (a few failed locks a hold), waits on the section's counters, and
// spends the core PostgreSQL shares with them on statements that queue.
// A process therefore runs few best-available statements at once (as many
// as booking.hold_writers), and the holds that arrive while they run wait
// for the next free slot, which sends all of them in one pipelined batch:
// their statements one after another in one transaction, one commit. Each
// statement sees what the earlier ones held (the same transaction), so
// the picks of a batch never meet each other's locks, and a refused hold
// writes nothing and leaves the others alone.
//
// A batch is all or nothing on errors: a statement that fails (a key a
// concurrent retry wrote, a lock wait past bestBatchLockTimeout, a
// timeout) ends the transaction, and each of its holds then runs alone,
// as it would without the batch. The statements of a batch share one
// shard of the section counters, so a batch locks one counter row per
// section, as a single hold does.

// bestBatchLockTimeout bounds a lock wait inside a batch: a batch keeps
// every lock its earlier statements took, so a statement that waits for
// another transaction's seat makes the whole batch wait. Past this, the
// batch fails and its holds run alone, each waiting up to
// booking.lock_timeout.
const bestBatchLockTimeout = 50 * time.Millisecond

// bestCall is one best-available hold's statement: what it asks and,
// once run, what the statement answered (the 201's body, or what it read
// when it wrote nothing).
type bestCall struct {
	in    holdInput
	best  bestInput
	fp    []byte
	resID string

	body []byte
	view *bestView
}

// bestWriters runs best-available statements, batched by a group.
type bestWriters struct {
	h *holdsPlane
	*batch.Group[*bestCall]
}

func newBestWriters(h *holdsPlane, slots int) *bestWriters {
	w := &bestWriters{h: h}
	w.Group = batch.New(slots, maxWriteBatch, w.run, errWriteAlone)
	return w
}

// hold runs c's statement, alone or with the statements queued with it,
// and leaves its answer in c.
func (w *bestWriters) hold(ctx context.Context, c *bestCall) error {
	err := w.Do(ctx, c)
	if errors.Is(err, batch.ErrLeftQueue) {
		return storeError("wait for a writer", err) // nothing was sent
	}
	if !errors.Is(err, errWriteAlone) {
		return err
	}
	return w.h.runBest(ctx, c)
}

// run sends a batch and tells each hold its outcome. Its context does not
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
	err := h.runBests(ctx, cs)
	if err != nil {
		h.m.writeBatchRefused.Inc()
		err = errWriteAlone
	}
	for _, m := range calls {
		m.Answer(err)
	}
}

// runBests sends the timeouts and one bestAloneSQL per hold in one
// pipelined batch, one transaction, and leaves each statement's answer in
// its call, only if all of them ran and the transaction committed.
func (h *holdsPlane) runBests(ctx context.Context, cs []*bestCall) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(len(cs)+1)*(h.cfg.StatementTimeout+h.cfg.LockTimeout))
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(setHoldTimeouts, itoa(min(h.cfg.LockTimeout, bestBatchLockTimeout).Milliseconds()), itoa(h.cfg.StatementTimeout.Milliseconds()))
	shard := int32(rand.IntN(occupancyShards))
	for _, c := range cs {
		b.Queue(bestAloneSQL, c.args(shard)...)
	}
	start := time.Now()
	res := h.db.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return writeError(err)
	}
	bodies, views := make([][]byte, len(cs)), make([]*bestView, len(cs))
	for i, c := range cs {
		var err error
		if bodies[i], views[i], err = scanBest(res.QueryRow(), c.best.Section); err != nil {
			return writeError(err)
		}
	}
	if err := res.Close(); err != nil {
		return writeError(err)
	}
	h.m.lockWait.Observe(time.Since(start).Seconds())
	for i, c := range cs {
		c.body, c.view = bodies[i], views[i]
	}
	return nil
}
