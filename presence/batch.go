package presence

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/batch"
)

// maxBatch caps the calls sent in one pipeline.
const maxBatch = 128

// batcher sends presence's Redis calls one pipeline at a time
// (internal/batch): a call arriving while another is in flight waits for it
// and leaves with every call queued meanwhile, in one round trip, and the
// caller starting a batch first lets the goroutines that are runnable reach
// the queue (batch.GatherRunnable). An idle process sends each call at
// once; a busy one (a connect burst: session open, first ping, follower
// counts, the subscription script and the follower writes of hundreds of
// connections; a fan-out run sharing a core with Redis) pays one read, one
// write and one wake-up on each side per batch instead of per call. The
// calls of one batch are independent: each keeps its own hash tag, and a
// pipeline runs per node in a Cluster.
type batcher struct {
	rdb redis.UniversalClient
	*batch.Group[*batchCall]
}

// errUnsent answers the calls of a batch whose sending panicked.
var errUnsent = errors.New("presence: redis batch not sent")

func newBatcher(rdb redis.UniversalClient) *batcher {
	b := &batcher{rdb: rdb}
	b.Group = batch.New(1, maxBatch, b.send, errUnsent, batch.GatherRunnable())
	return b
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
	// writes are set-member writes, coalesced across the batch
	// (setWrites); writesErr is the first error of the commands that
	// carried them.
	writes    []memberWrite
	writesErr error
}

// do runs c, batched with the calls in flight; an error means c was not
// sent (its context ended while it was queued, or its batch panicked).
func (b *batcher) do(ctx context.Context, c *batchCall) error {
	if err := b.Do(ctx, c); err != nil {
		return fmt.Errorf("presence: redis: %w", err)
	}
	return nil
}

// send sends one batch: a lone call by itself, several in one pipeline.
func (b *batcher) send(ctx context.Context, calls []*batch.Call[*batchCall]) {
	if len(calls) == 1 && calls[0].Item.alone != nil {
		calls[0].Item.alone(ctx, b.rdb)
	} else {
		b.run(ctx, calls)
	}
	for _, c := range calls {
		c.Answer(nil)
	}
}

// run sends calls in one pipeline, and what Redis refused with NOSCRIPT
// in a second: after a restart, a burst of reconnecting sessions costs one
// more round trip, not one more per call.
func (b *batcher) run(ctx context.Context, calls []*batch.Call[*batchCall]) {
	writes := setWritesPool.Get().(*setWrites)
	defer writes.release()
	failUnanswered(b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			if c.Item.queue != nil {
				c.Item.queue(ctx, p)
			}
			writes.add(c.Item)
		}
		writes.queue(ctx, p)
		return nil
	}))
	writes.answer()
	var refused []*batchCall
	for _, c := range calls {
		if c.Item.read != nil && !c.Item.read() {
			refused = append(refused, c.Item)
		}
	}
	if len(refused) == 0 {
		return
	}
	failUnanswered(b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range refused {
			c.requeue(ctx, p)
		}
		return nil
	}))
	for _, c := range refused {
		c.read()
	}
}

// failUnanswered gives every command of a pipeline the pipeline's error
// when none has an answer of its own: the pipeline failed as a whole
// before Redis answered (a hook refused it), and a command left without an
// error would read as an empty success. A failure on the wire already
// sets every command's error, and an error reply is one command's.
func failUnanswered(cmds []redis.Cmder, err error) {
	if err == nil {
		return
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return
		}
	}
	for _, c := range cmds {
		c.SetErr(err)
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
	return b.runScriptWith(ctx, s, keys, argv, nil)
}

// runScriptWith is runScript with set-member writes in the same call,
// coalesced with the batch's others (setWrites); the error is the
// script's, or else the first of the commands holding the writes.
func (b *batcher) runScriptWith(ctx context.Context, s scriptRunner, keys []string, argv []any, writes []memberWrite) ([]any, error) {
	var res []any
	var err error
	var cmd *redis.Cmd
	c := &batchCall{
		writes: writes,
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
	if len(writes) > 0 {
		// Alone, the call would skip the member writes.
		c.alone = nil
	}
	if qerr := b.do(ctx, c); qerr != nil {
		return nil, qerr
	}
	if err == nil {
		err = c.writesErr
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
	return b.pipelineWith(ctx, fill, nil)
}

// pipelineWith is pipeline with set-member writes in the same call,
// coalesced with the batch's others (setWrites).
func (b *batcher) pipelineWith(ctx context.Context, fill func(ctx context.Context, p redis.Pipeliner) []redis.Cmder, writes []memberWrite) error {
	var cmds []redis.Cmder
	c := &batchCall{
		queue:  func(ctx context.Context, p redis.Pipeliner) { cmds = fill(ctx, p) },
		read:   func() bool { return true },
		writes: writes,
	}
	if err := b.do(ctx, c); err != nil {
		return err
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && err != redis.Nil {
			return err
		}
	}
	return c.writesErr
}
