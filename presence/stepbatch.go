package presence

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// maxStepBatch caps the session steps sent in one pipeline.
const maxStepBatch = 128

// stepBatcher sends session steps to Redis one pipeline at a time: a step
// arriving while another is in flight waits for it and leaves with every
// step queued meanwhile, in one round trip. An idle process sends each step
// at once, as before; a busy one (a connect burst, a fan-out run sharing a
// core with Redis) pays one read, one write and one wake-up on each side
// per batch instead of per step.
type stepBatcher struct {
	rdb redis.UniversalClient

	mu    sync.Mutex
	busy  bool // a batch is in flight
	queue []*stepCall
}

// stepCall is one session script call waiting for its batch.
type stepCall struct {
	keys []string
	argv []any
	res  []any
	err  error
	// wake closes when res and err are set, or when this call is to send
	// the batch it heads (lead).
	wake  chan struct{}
	lead  bool
	batch []*stepCall
}

// run executes one session script call, batched with others in flight.
func (b *stepBatcher) run(ctx context.Context, keys []string, argv []any) ([]any, error) {
	c := &stepCall{keys: keys, argv: argv, wake: make(chan struct{})}
	b.mu.Lock()
	if b.busy {
		b.queue = append(b.queue, c)
		b.mu.Unlock()
		b.wait(ctx, c)
		if c.err != nil && c.batch == nil {
			return nil, c.err
		}
		if !c.lead {
			return c.res, c.err
		}
		// Handed the next batch: send it (this call first).
		b.send(ctx, c.batch)
		return c.res, c.err
	}
	b.busy = true
	b.mu.Unlock()
	b.send(ctx, []*stepCall{c})
	return c.res, c.err
}

// wait waits for c's turn. A caller that gives up while still queued
// leaves the queue; once taken into a batch it waits for the batch, as it
// may have to send it.
func (b *stepBatcher) wait(ctx context.Context, c *stepCall) {
	select {
	case <-c.wake:
		return
	case <-ctx.Done():
	}
	b.mu.Lock()
	if i := slices.Index(b.queue, c); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		b.mu.Unlock()
		c.err = fmt.Errorf("presence: session step: %w", ctx.Err())
		return
	}
	b.mu.Unlock()
	<-c.wake
}

// send runs batch, wakes its other calls and hands the calls queued
// meanwhile to the first of them, which sends them. The batch does not
// end with the sender's context: it carries other connections' steps.
func (b *stepBatcher) send(ctx context.Context, batch []*stepCall) {
	ctx = context.WithoutCancel(ctx)
	if len(batch) == 1 {
		c := batch[0]
		c.res, c.err = sessionScript.Run(ctx, b.rdb, c.keys, c.argv...).Slice()
	} else {
		b.pipeline(ctx, batch)
	}
	for _, c := range batch[1:] {
		close(c.wake)
	}
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.busy = false
		b.mu.Unlock()
		return
	}
	n := min(len(b.queue), maxStepBatch)
	next := make([]*stepCall, n)
	copy(next, b.queue)
	b.queue = append(b.queue[:0], b.queue[n:]...)
	b.mu.Unlock()
	next[0].lead, next[0].batch = true, next
	close(next[0].wake)
}

// pipeline sends several calls by the script's SHA in one round trip. A
// call Redis refused with NOSCRIPT did not run, so it alone runs again
// through Run, which loads the script.
func (b *stepBatcher) pipeline(ctx context.Context, batch []*stepCall) {
	cmds := make([]*redis.Cmd, len(batch))
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range batch {
			cmds[i] = sessionScript.Queue(ctx, p, c.keys, c.argv...)
		}
		return nil
	})
	for i, c := range batch {
		c.res, c.err = cmds[i].Slice()
		if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			c.res, c.err = sessionScript.Run(ctx, b.rdb, c.keys, c.argv...).Slice()
		}
	}
}
