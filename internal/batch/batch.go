// Package batch runs many callers' work in shared round trips to a store.
//
// Most of what a round trip costs the store and this process (the system
// calls on both sides, the wake-ups, a commit's WAL flush) is per round
// trip, not per item. A Group runs at most a fixed number of batches at
// once: a caller that finds a slot free runs its own item at once, alone,
// so an idle server waits for nothing; callers arriving while every slot is
// busy queue, and the next free slot takes up to a batch of them into one
// round trip, so batches grow with the load.
package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
)

// ErrLeftQueue is what Do returns, wrapping the context's error, when the
// caller's context ended while its item was still queued: the item never
// ran.
var ErrLeftQueue = errors.New("left the queue for a batch")

// Group runs items of one kind of work in batches.
type Group[T any] struct {
	slots chan struct{}
	max   int
	// run does the work of a batch and answers each call; calls it leaves
	// unanswered (it panicked) get unanswered.
	run        func(ctx context.Context, batch []*Call[T])
	unanswered error

	// gather: see GatherRunnable.
	gather bool

	mu      sync.Mutex
	queue   []*Call[T]
	running int // calls in the batches under way
}

// Option changes how a Group forms its batches.
type Option func(*options)

type options struct{ gather bool }

// GatherRunnable has the caller that takes a free slot yield the processor
// once before it takes the queue, unless a whole batch is waiting already:
// goroutines that are runnable at that moment, a step away from their own
// call, run up to it and queue, and go in the same round trip. An idle
// process has nobody to yield to and sends at once; a busy one, whose
// callers mostly find a slot free just after the previous batch, sends
// fewer and larger batches instead of a round trip for every few calls.
// (A connect burst on one core: 5.6 calls per Redis round trip without,
// 36 with, and a sixth of the round trips' system calls on both sides.)
func GatherRunnable() Option { return func(o *options) { o.gather = true } }

// New makes a group running at most slots batches at once (at least one),
// each of at most size calls. run must answer every call of its batch;
// a call it leaves unanswered (run panicked) is answered unanswered.
func New[T any](slots, size int, run func(ctx context.Context, batch []*Call[T]), unanswered error, opts ...Option) *Group[T] {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return &Group[T]{slots: make(chan struct{}, max(slots, 1)), max: max(size, 1), run: run, unanswered: unanswered, gather: o.gather}
}

// Call is one caller's item in a group.
type Call[T any] struct {
	Item     T
	done     chan error
	taken    bool // by a batch; guarded by Group.mu
	answered bool // by the run holding it
}

// Answer ends the call with err, which its caller's Do returns.
func (c *Call[T]) Answer(err error) {
	c.answered = true
	c.done <- err
}

// Do runs item, alone or with the items queued with it, and returns its
// answer. A caller whose ctx ends while its item is still queued leaves
// the queue (the item never runs) with ErrLeftQueue and ctx.Err(); once a
// batch has taken the item it may be under way, so Do waits for its answer.
// A batch carries other callers' items, so it does not end with ctx.
func (g *Group[T]) Do(ctx context.Context, item T) error {
	c := &Call[T]{Item: item, done: make(chan error, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	g.mu.Unlock()
	for {
		select {
		case err := <-c.done:
			return err
		case g.slots <- struct{}{}:
			g.work(context.WithoutCancel(ctx))
			if g.isTaken(c) {
				// Run by this caller or by another one still running:
				// either way the answer comes on done.
				return <-c.done
			}
		case <-ctx.Done():
			if g.leave(c) {
				return fmt.Errorf("%w: %w", ErrLeftQueue, ctx.Err())
			}
			return <-c.done
		}
	}
}

// work runs one batch of what is queued, in a slot the caller took.
func (g *Group[T]) work(ctx context.Context) {
	defer func() { <-g.slots }()
	if g.gather && g.Queued() < g.max {
		runtime.Gosched()
	}
	batch := g.take()
	if len(batch) == 0 {
		return
	}
	defer func() {
		// A panic must not leave the rest of the batch waiting for ever.
		for _, c := range batch {
			if !c.answered {
				c.Answer(g.unanswered)
			}
		}
		g.mu.Lock()
		g.running -= len(batch)
		g.mu.Unlock()
	}()
	g.run(ctx, batch)
}

// take removes the oldest queued calls, at most a batch.
func (g *Group[T]) take() []*Call[T] {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := min(len(g.queue), g.max)
	batch := slices.Clone(g.queue[:n])
	g.queue = slices.Delete(g.queue, 0, n)
	for _, c := range batch {
		c.taken = true
	}
	g.running += n
	return batch
}

func (g *Group[T]) isTaken(c *Call[T]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return c.taken
}

// leave takes c out of the queue unless a batch has taken it.
func (g *Group[T]) leave(c *Call[T]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.taken {
		return false
	}
	if i := slices.Index(g.queue, c); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
	}
	return true
}

// TryAlone runs f holding a slot when one is free and no call is queued,
// and tells whether it ran; it never waits. It is for work that has a
// cheaper form alone than in a batch (one round trip where a batch of the
// same item takes two): taken only when the item would not have waited,
// so it never passes a queued call.
func (g *Group[T]) TryAlone(f func()) bool {
	if g.Queued() > 0 {
		return false
	}
	select {
	case g.slots <- struct{}{}:
	default:
		return false
	}
	defer func() { <-g.slots }()
	f()
	return true
}

// Queued is how many calls wait for a batch.
func (g *Group[T]) Queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// Waiting is how many calls are queued or in a batch under way.
func (g *Group[T]) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue) + g.running
}

// Slots is how many batches run at once.
func (g *Group[T]) Slots() int { return cap(g.slots) }

// Pause takes every slot, so no batch starts and callers queue, until the
// returned function is called. Batches under way finish first: Pause
// waits for them.
func (g *Group[T]) Pause() (resume func()) {
	for range cap(g.slots) {
		g.slots <- struct{}{}
	}
	return func() {
		for range cap(g.slots) {
			<-g.slots
		}
	}
}
