package booking

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// Group reads of holds. A hold's read is a few key lookups that lock
// nothing; what it costs is mostly the round trip (on a busy two-core
// machine, the system calls and wake-ups on both sides cost more than the
// lookups). Reads that arrive while every reader is busy therefore go
// together, in one pipelined batch (group.go): each hold's statements in
// order, each statement in its own snapshot as when read alone. With one
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
	*group[*pendingRead]
}

func newHoldReaders(h *holdsPlane, readers int) *holdReaders {
	r := &holdReaders{h: h}
	r.group = newGroup(readers, maxReadBatch, r.run, errReadAlone)
	return r
}

// read reads a hold, alone or with the reads queued with it.
func (r *holdReaders) read(ctx context.Context, in holdInput, seats []int64) (*holdView, error) {
	p := &pendingRead{in: in, seats: seats}
	err := r.do(ctx, p)
	if errors.Is(err, errReadAlone) {
		return r.h.read(ctx, in, seats)
	}
	return p.view, err
}

// run reads batch and answers each hold. The caller running it may read
// other callers' holds (even a batch of one), so the read does not end
// with that caller's context; the statement timeout bounds it.
func (r *holdReaders) run(ctx context.Context, batch []*member[*pendingRead]) {
	h := r.h
	ctx = context.WithoutCancel(ctx)
	h.m.readBatch.Observe(float64(len(batch)))
	if len(batch) == 1 {
		p := batch[0].item
		var err error
		p.view, err = h.read(ctx, p.in, p.seats)
		batch[0].answer(err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StatementTimeout)
	defer cancel()
	b := &pgx.Batch{}
	for _, m := range batch {
		queueRead(b, m.item.in, m.item.seats)
	}
	res := h.db.SendBatch(ctx, b)
	var err error
	for _, m := range batch {
		if m.item.view, err = scanRead(res, m.item.in); err != nil {
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
	for _, m := range batch {
		m.answer(err)
	}
}
