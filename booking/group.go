package booking

import (
	"context"
	"slices"
	"sync"
)

// group runs one kind of PostgreSQL work (hold reads, hold writes) in
// batches: at most cap(slots) batches at once. A caller that finds a slot
// free runs its own work at once, alone; callers arriving while every slot
// is busy queue, and the next free slot takes up to max of them into one
// round trip. An idle server waits for nothing, and batches grow with the
// load: most of what a round trip costs PostgreSQL and this process (the
// system calls on both sides, the wake-ups, and for writes the commit's
// WAL flush) is per round trip, not per hold.
type group[T any] struct {
	slots chan struct{}
	max   int
	// run does the work of a batch and answers each member; members it
	// leaves unanswered (it panicked) get unanswered, which tells their
	// callers to do their work alone.
	run        func(ctx context.Context, batch []*member[T])
	unanswered error

	mu    sync.Mutex
	queue []*member[T]
}

// newGroup makes a group running at most slots batches at once (at least
// one), each of at most batch members.
func newGroup[T any](slots, batch int, run func(context.Context, []*member[T]), unanswered error) *group[T] {
	return &group[T]{slots: make(chan struct{}, max(slots, 1)), max: batch, run: run, unanswered: unanswered}
}

// member is one caller's work in a group.
type member[T any] struct {
	item     T
	done     chan error
	taken    bool // by a slot; guarded by group.mu
	answered bool // by the run holding it
}

func (m *member[T]) answer(err error) {
	m.answered = true
	m.done <- err
}

// do runs item, alone or with the items queued with it, and returns its
// answer. It waits for the answer even if ctx ends: once queued, an item
// may be under way in another caller's batch, and its caller must know
// how it ended.
func (g *group[T]) do(ctx context.Context, item T) error {
	m := &member[T]{item: item, done: make(chan error, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, m)
	g.mu.Unlock()
	for {
		select {
		case err := <-m.done:
			return err
		case g.slots <- struct{}{}:
			g.work(ctx)
			if g.taken(m) {
				// Run by this caller or by another one still running:
				// either way the answer comes on done.
				return <-m.done
			}
		}
	}
}

// work runs one batch of what is queued, in a slot the caller took.
func (g *group[T]) work(ctx context.Context) {
	defer func() { <-g.slots }()
	batch := g.take()
	if len(batch) == 0 {
		return
	}
	defer func() {
		// A panic must not leave the rest of the batch waiting for ever.
		for _, m := range batch {
			if !m.answered {
				m.answer(g.unanswered)
			}
		}
	}()
	g.run(ctx, batch)
}

// take removes the oldest queued members, at most g.max.
func (g *group[T]) take() []*member[T] {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := min(len(g.queue), g.max)
	batch := slices.Clone(g.queue[:n])
	g.queue = slices.Delete(g.queue, 0, n)
	for _, m := range batch {
		m.taken = true
	}
	return batch
}

// taken says whether a slot has taken m.
func (g *group[T]) taken(m *member[T]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return m.taken
}

// queued is how many callers wait for a slot.
func (g *group[T]) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}
