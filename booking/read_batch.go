package booking

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/batch"
)

// Group reads of holds. A hold's read is a few key lookups that lock
// nothing; what it costs is mostly the round trip (on a busy two-core
// machine, the system calls and wake-ups on both sides cost more than the
// lookups). Reads that arrive while every reader is busy therefore go
// together, in one pipelined batch (internal/batch): each hold's statements
// in order, each statement in its own snapshot as when read alone. With one
// reader (booking.hold_readers) a read waits for at most the one round
// trip ahead of it, and on two cores the fewer round trips more than pay
// for that wait.

// maxReadBatch bounds a batch of reads.
const maxReadBatch = 16

// errReadAlone tells a hold whose batch failed to read itself alone: one
// failed statement aborts the rest of a pipelined batch.
var errReadAlone = errors.New("batch failed: read alone")

// pendingRead is a hold waiting for its read, and then its view.
type pendingRead struct {
	in    holdInput
	seats []int64
	view  *holdView
}

// holdReaders reads holds, batched by a group.
type holdReaders struct {
	h *holdsPlane
	*batch.Group[*pendingRead]
}

func newHoldReaders(h *holdsPlane, readers int) *holdReaders {
	r := &holdReaders{h: h}
	r.Group = batch.New(readers, maxReadBatch, r.run, errReadAlone)
	return r
}

// read reads a hold, alone or with the reads queued with it.
func (r *holdReaders) read(ctx context.Context, in holdInput, seats []int64) (*holdView, error) {
	p := &pendingRead{in: in, seats: seats}
	err := r.Do(ctx, p)
	if errors.Is(err, errReadAlone) {
		return r.h.read(ctx, in, seats)
	}
	if errors.Is(err, batch.ErrLeftQueue) {
		// The request ended while waiting for a reader: nothing ran.
		return nil, storeError("wait for a reader", err)
	}
	return p.view, err
}

// run reads a batch and answers each hold. Its context does not end with
// the request of the caller running it (the batch holds other callers'
// reads); the statement timeout bounds it.
func (r *holdReaders) run(ctx context.Context, calls []*batch.Call[*pendingRead]) {
	h := r.h
	h.m.readBatch.Observe(float64(len(calls)))
	if len(calls) == 1 {
		p := calls[0].Item
		var err error
		p.view, err = h.read(ctx, p.in, p.seats)
		calls[0].Answer(err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StatementTimeout)
	defer cancel()
	b := &pgx.Batch{}
	for _, m := range calls {
		queueRead(b, m.Item.in, m.Item.seats)
	}
	res := h.db.SendBatch(ctx, b)
	var err error
	for _, m := range calls {
		if m.Item.view, err = scanRead(res, m.Item.in); err != nil {
			break
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		h.m.readBatchFailed.Inc()
		err = errReadAlone
	}
	for _, m := range calls {
		m.Answer(err)
	}
}
