package presence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/streams"
	"github.com/presenced/presenced/store"
)

// consumer reads one kind of stream (one per shard) as a member of a
// consumer group (internal/streams): at-least-once, safe with any number
// of workers. Entries a consumer took and never acknowledged (it died) are
// claimed by another after claim_idle; entries that failed max_deliveries
// times go to the shard's dead-letter stream.
type consumer struct {
	mod   *Module
	label string // metrics label: pings, events, changes
	group *streams.Group
	count int64
	poll  time.Duration // wait when a read found nothing
	// block: after two empty reads in a row the next one blocks this long
	// on every shard at once (0: never, on a cluster, where the shards'
	// streams live in different slots), so an idle consumer costs Redis
	// one call per block instead of a read of every shard per poll.
	block time.Duration
	// gather waits poll after every read that filled no batch, so entries
	// accumulate into batches (webhooks) instead of trickling one by one.
	gather bool
	// pruneAfter: consumers of the group idle this long with nothing
	// pending are removed.
	pruneAfter time.Duration
	stream     func(shard int) string
	names      []string       // every shard's stream
	shardOf    map[string]int // stream → shard
}

// idleBlock is how long an idle consumer's read waits for an entry. It
// also bounds how long a stop waits for that read.
const idleBlock = 250 * time.Millisecond

func newConsumer(m *Module, label, group string, stream func(int) string) *consumer {
	c := &consumer{
		mod: m, label: label, count: 256, stream: stream, poll: m.cfg.StreamPoll,
		pruneAfter: consumerIdleLimit, block: idleBlock,
		group:   streams.NewGroup(m.rdb, group, streams.ConsumerName(store.NewToken()[:8])),
		shardOf: make(map[string]int, m.cfg.Shards),
	}
	for n := 0; n < m.cfg.Shards; n++ {
		c.names = append(c.names, stream(n))
		c.shardOf[stream(n)] = n
	}
	if store.IsCluster(m.rdb) {
		c.block = 0
	}
	return c
}

// ensureGroups creates the group on every shard's stream, waiting for
// Redis as long as ctx lasts: a process started before its Redis answers
// (a restart of both, compose bringing them up together) serves once it
// does, and reports not ready meanwhile, instead of exiting. It fails only
// when ctx ended first.
func (c *consumer) ensureGroups(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for {
		err := c.group.Create(ctx, c.names...)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("presence: %w", err)
		}
		c.mod.log.Warn("presence: create stream groups; retrying", "stream", c.label, "in", wait, "err", err)
		sleep(ctx, wait)
		wait = min(2*wait, 5*time.Second)
	}
}

// byShard files entries read by stream under their shard.
func (c *consumer) byShard(read map[string][]redis.XMessage) map[int][]redis.XMessage {
	out := make(map[int][]redis.XMessage, len(read))
	for name, msgs := range read {
		out[c.shardOf[name]] = msgs
	}
	return out
}

// read takes up to count new entries from every shard, without blocking;
// what some shards gave is returned even when others failed.
func (c *consumer) read(ctx context.Context) (map[int][]redis.XMessage, error) {
	read, err := c.group.ReadEach(ctx, c.count, c.names...)
	if err != nil {
		err = fmt.Errorf("presence: read %s: %w", c.label, err)
	}
	return c.byShard(read), err
}

// readBlocking waits up to c.block for new entries of any shard, in one
// XREADGROUP over every shard's stream (a single Redis only).
func (c *consumer) readBlocking(ctx context.Context) (map[int][]redis.XMessage, error) {
	read, err := c.group.Read(ctx, c.count, c.block, c.names...)
	if err != nil {
		err = fmt.Errorf("presence: read %s: %w", c.label, err)
	}
	return c.byShard(read), err
}

func (c *consumer) ack(ctx context.Context, shard int, ids []string) error {
	if err := c.group.Ack(ctx, c.stream(shard), ids...); err != nil {
		return fmt.Errorf("presence: %w", err)
	}
	return nil
}

// handler processes entries of one shard and returns the ids to
// acknowledge; the others stay pending and are retried after claim_idle.
type handler func(ctx context.Context, c *consumer, shard int, msgs []redis.XMessage) []string

// loop reads and handles entries until ctx ends. Busy, it reads every
// shard once per poll, so entries gather into batches; idle (two empty
// reads in a row), it blocks on every shard at once, so the first entry
// after a quiet spell is handled at once and quiet costs Redis almost
// nothing.
func (c *consumer) loop(ctx context.Context, h handler) error {
	if err := c.ensureGroups(ctx); err != nil {
		return err
	}
	go c.reclaimLoop(ctx, h)
	empty := 0
	for ctx.Err() == nil {
		var batch map[int][]redis.XMessage
		var err error
		if empty >= 2 && c.block > 0 {
			batch, err = c.readBlocking(ctx)
		} else {
			batch, err = c.read(ctx)
		}
		if err != nil && ctx.Err() == nil {
			c.mod.log.Warn("presence: stream read", "stream", c.label, "err", err)
		}
		full := false
		for shard, msgs := range batch {
			full = full || int64(len(msgs)) >= c.count
			if err := c.ack(ctx, shard, h(ctx, c, shard, msgs)); err != nil && ctx.Err() == nil {
				c.mod.log.Warn("presence: stream ack", "stream", c.label, "err", err)
			}
		}
		switch {
		case err != nil:
			empty = 0
			sleep(ctx, c.poll)
		case len(batch) == 0:
			empty++
			if empty < 2 || c.block == 0 {
				sleep(ctx, c.poll)
			}
		default:
			empty = 0
			if c.gather && !full {
				sleep(ctx, c.poll)
			}
		}
	}
	return nil
}

func (c *consumer) reclaimLoop(ctx context.Context, h handler) {
	every := c.mod.cfg.ClaimIdle / 2
	if every < time.Second {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for n := 0; n < c.mod.cfg.Shards && ctx.Err() == nil; n++ {
			if err := c.reclaim(ctx, n, h); err != nil && ctx.Err() == nil {
				c.mod.log.Warn("presence: reclaim", "stream", c.label, "err", err)
			}
			if err := c.group.Prune(ctx, c.stream(n), c.pruneAfter); err != nil && ctx.Err() == nil {
				c.mod.log.Warn("presence: prune consumers", "stream", c.label, "err", err)
			}
		}
	}
}

// reclaim claims and handles the entries of a shard idle past claim_idle
// (their consumer stalled); those that failed max_deliveries times are
// dead-lettered instead.
func (c *consumer) reclaim(ctx context.Context, shard int, h handler) error {
	stream := c.stream(shard)
	got, err := c.group.Reclaim(ctx, stream, streams.Reclaim{
		MinIdle: c.mod.cfg.ClaimIdle, Count: c.count, Pages: 10,
		MaxDeliveries: int64(c.mod.cfg.MaxDeliveries), DeadLetter: c.mod.keys.shard(shard).dead,
	})
	if got.Dead > 0 {
		c.mod.m.deadLetters.WithLabelValues(c.label).Add(float64(got.Dead))
		c.mod.log.Warn("presence: dead-lettered stream entries delivered max_deliveries times", "stream", c.label, "entries", got.Dead)
	}
	if len(got.Entries) > 0 {
		c.mod.m.reclaimed.WithLabelValues(c.label).Add(float64(len(got.Entries)))
		if err := c.ack(ctx, shard, h(ctx, c, shard, got.Entries)); err != nil {
			return err
		}
	}
	return err
}

// consumerIdleLimit is how long a consumer with nothing pending may stay
// silent before it is removed from its group (each process start adds one).
const consumerIdleLimit = time.Hour

// deadLetter moves one entry to the shard's dead-letter stream and
// acknowledges it in one transaction (both keys share the shard's hash
// tag), so the entry is never both pending and dead-lettered.
func (c *consumer) deadLetter(ctx context.Context, shard int, msg redis.XMessage, why string) error {
	if err := c.group.DeadLetter(ctx, c.stream(shard), c.mod.keys.shard(shard).dead, msg, why); err != nil {
		return fmt.Errorf("presence: %w", err)
	}
	c.mod.m.deadLetters.WithLabelValues(c.label).Inc()
	c.mod.log.Warn("presence: dead-lettered a stream entry", "stream", c.label, "id", msg.ID, "why", why)
	return nil
}

// groupState is what the consumer group of one shard reports.
type groupState struct {
	pending       int64
	lag           int64  // -1: Redis cannot tell
	oldestPending string // entry id, "" when none
	lastDelivered string
	lastEntry     string // newest entry of the stream, "" when empty
}

// undelivered tells whether entries wait that no consumer has read yet.
func (s groupState) undelivered() bool {
	if s.lastEntry == "" {
		return false
	}
	a, ok1 := idPosition(s.lastEntry)
	b, ok2 := idPosition(s.lastDelivered)
	return !ok1 || !ok2 || a > b
}

// state reads the group of every shard (XINFO GROUPS and XPENDING).
func (c *consumer) state(ctx context.Context) ([]groupState, error) {
	shards := c.mod.cfg.Shards
	infos := make([]*redis.XInfoGroupsCmd, shards)
	pends := make([]*redis.XPendingCmd, shards)
	lasts := make([]*redis.XMessageSliceCmd, shards)
	_, err := c.mod.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n := 0; n < shards; n++ {
			infos[n] = p.XInfoGroups(ctx, c.stream(n))
			pends[n] = p.XPending(ctx, c.stream(n), c.group.Name())
			lasts[n] = p.XRevRangeN(ctx, c.stream(n), "+", "-", 1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("presence: group state %s: %w", c.label, err)
	}
	for n := 0; n < shards; n++ {
		for _, cmd := range []redis.Cmder{infos[n], pends[n], lasts[n]} {
			if e := cmd.Err(); e != nil && !errors.Is(e, redis.Nil) {
				return nil, fmt.Errorf("presence: group state %s: %w", c.label, e)
			}
		}
	}
	out := make([]groupState, shards)
	for n := 0; n < shards; n++ {
		for _, g := range infos[n].Val() {
			if g.Name == c.group.Name() {
				out[n].lag = g.Lag
				out[n].lastDelivered = g.LastDeliveredID
			}
		}
		if last := lasts[n].Val(); len(last) == 1 {
			out[n].lastEntry = last[0].ID
		}
		if p := pends[n].Val(); p != nil {
			out[n].pending = p.Count
			if p.Count > 0 {
				out[n].oldestPending = p.Lower
			}
		}
	}
	return out, nil
}

// report exports pending, lag and the oldest pending age of the group.
func (c *consumer) report(states []groupState, nowMs int64) {
	var pending, lag, oldest int64
	for _, s := range states {
		pending += s.pending
		lag += max(s.lag, 0)
		if ms := idMillis(s.oldestPending); ms > 0 && nowMs-ms > oldest {
			oldest = nowMs - ms
		}
	}
	c.mod.m.streamPending.WithLabelValues(c.label).Set(float64(pending))
	c.mod.m.streamLag.WithLabelValues(c.label).Set(float64(lag))
	c.mod.m.streamOldest.WithLabelValues(c.label).Set(float64(oldest) / 1000)
}

// idMillis is the time part of a stream entry id; 0 if it has none.
func idMillis(id string) int64 {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return n
}

// idPosition orders entries: ms*1000 plus the sequence within the ms.
func idPosition(id string) (int64, bool) {
	ms, seq, ok := strings.Cut(id, "-")
	a, err1 := strconv.ParseInt(ms, 10, 64)
	b, err2 := strconv.ParseInt(seq, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, false
	}
	return a*1000 + min(b, 999), true
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
