package presence

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// maxBatch caps the calls sent in one pipeline.
const maxBatch = 128

// batcher sends presence's Redis calls one pipeline at a time: a call
// arriving while another is in flight waits for it and leaves with every
// call queued meanwhile, in one round trip. An idle process sends each call
// at once, as before; a busy one (a connect burst: session open, ping,
// follower counts, the subscription script and the follower writes of
// hundreds of connections; a fan-out run sharing a core with Redis) pays
// one read, one write and one wake-up on each side per batch instead of
// per call. The calls of one batch are independent: each keeps its own
// hash tag, and a pipeline runs per node in a Cluster.
type batcher struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	sending int // the calls of the batch in flight; 0: none is
	queue   []*batchCall
}

// batchCall is one call waiting for its batch.
type batchCall struct {
	// alone sends the call by itself (nil: a pipeline of one); queue adds
	// its commands to a batch's pipeline and read takes their results once
	// it ran. read reports false when Redis refused a script call with
	// NOSCRIPT (it did not run; a restart or SCRIPT FLUSH): requeue then
	// queues it again with the script's source, and read runs once more.
	alone   func(ctx context.Context, rdb redis.UniversalClient)
	queue   func(ctx context.Context, p redis.Pipeliner)
	read    func() bool
	requeue func(ctx context.Context, p redis.Pipeliner)
	// err is set when the call gave up before it was sent.
	err error
	// wake closes when the call ran, or when it is to send the batch it
	// heads (lead).
	wake  chan struct{}
	lead  bool
	batch []*batchCall
}

// do runs c, batched with the calls in flight; an error means c was not
// sent (its context ended while it was queued).
func (b *batcher) do(ctx context.Context, c *batchCall) error {
	c.wake = make(chan struct{})
	b.mu.Lock()
	if b.sending > 0 {
		b.queue = append(b.queue, c)
		b.mu.Unlock()
		b.wait(ctx, c)
		if c.err != nil {
			return c.err
		}
		if c.lead {
			// Handed the next batch: send it (this call first).
			b.send(ctx, c.batch)
		}
		return nil
	}
	b.sending = 1
	b.mu.Unlock()
	b.send(ctx, []*batchCall{c})
	return nil
}

// wait waits for c's turn. A caller that gives up while still queued
// leaves the queue; once taken into a batch it waits for the batch, as it
// may have to send it.
func (b *batcher) wait(ctx context.Context, c *batchCall) {
	select {
	case <-c.wake:
		return
	case <-ctx.Done():
	}
	b.mu.Lock()
	if i := slices.Index(b.queue, c); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		b.mu.Unlock()
		c.err = fmt.Errorf("presence: queued for redis: %w", ctx.Err())
		return
	}
	b.mu.Unlock()
	<-c.wake
}

// send runs batch, wakes its other calls and hands the calls queued
// meanwhile to the first of them, which sends them. The batch does not
// end with the sender's context: it carries other connections' calls.
func (b *batcher) send(ctx context.Context, batch []*batchCall) {
	ctx = context.WithoutCancel(ctx)
	if len(batch) == 1 && batch[0].alone != nil {
		batch[0].alone(ctx, b.rdb)
	} else {
		b.run(ctx, batch)
	}
	for _, c := range batch[1:] {
		close(c.wake)
	}
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.sending = 0
		b.mu.Unlock()
		return
	}
	n := min(len(b.queue), maxBatch)
	b.sending = n
	next := make([]*batchCall, n)
	copy(next, b.queue)
	b.queue = append(b.queue[:0], b.queue[n:]...)
	b.mu.Unlock()
	next[0].lead, next[0].batch = true, next
	close(next[0].wake)
}

// run sends batch in one pipeline, and what Redis refused with NOSCRIPT
// in a second: after a restart, a burst of reconnecting sessions costs one
// more round trip, not one more per call.
func (b *batcher) run(ctx context.Context, batch []*batchCall) {
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range batch {
			c.queue(ctx, p)
		}
		return nil
	})
	var refused []*batchCall
	for _, c := range batch {
		if !c.read() {
			refused = append(refused, c)
		}
	}
	if len(refused) == 0 {
		return
	}
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range refused {
			c.requeue(ctx, p)
		}
		return nil
	})
	for _, c := range refused {
		c.read()
	}
}

// noScript reports an error of a script call Redis did not run because it
// did not know the script (a restart or SCRIPT FLUSH): the call may be sent
// again, with the script's source.
func noScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// runScript runs one script call through the batcher and returns its reply.
func (b *batcher) runScript(ctx context.Context, s scriptRunner, keys []string, argv []any) ([]any, error) {
	var res []any
	var err error
	var cmd *redis.Cmd
	c := &batchCall{
		alone: func(ctx context.Context, rdb redis.UniversalClient) {
			res, err = s.Run(ctx, rdb, keys, argv...).Slice()
		},
		queue: func(ctx context.Context, p redis.Pipeliner) { cmd = s.Queue(ctx, p, keys, argv...) },
		read: func() bool {
			res, err = cmd.Slice()
			return !noScript(err)
		},
		requeue: func(ctx context.Context, p redis.Pipeliner) { cmd = s.QueueSource(ctx, p, keys, argv...) },
	}
	if qerr := b.do(ctx, c); qerr != nil {
		return nil, qerr
	}
	return res, err
}

// scriptRunner is a store.Script.
type scriptRunner interface {
	Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd
	Queue(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd
	QueueSource(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd
}

// pipeline runs the commands fill queues as one call of the batcher (a
// plain pipeline's commands, each atomic on its own key) and returns the
// first command error.
func (b *batcher) pipeline(ctx context.Context, fill func(ctx context.Context, p redis.Pipeliner) []redis.Cmder) error {
	var cmds []redis.Cmder
	c := &batchCall{
		queue: func(ctx context.Context, p redis.Pipeliner) { cmds = fill(ctx, p) },
		read:  func() bool { return true },
	}
	if err := b.do(ctx, c); err != nil {
		return err
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && err != redis.Nil {
			return err
		}
	}
	return nil
}
