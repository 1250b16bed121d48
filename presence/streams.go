package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
)

// consumer reads one kind of stream (one per shard) as a member of a
// consumer group: at-least-once, safe with any number of workers. Entries a
// consumer took and never acknowledged (it died) are claimed by another
// after claim_idle; entries that failed max_deliveries times go to the
// shard's dead-letter stream.
type consumer struct {
	mod   *Module
	label string // metrics label and dead-letter tag: pings, events, changes
	group string
	name  string
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
}

// idleBlock is how long an idle consumer's read waits for an entry. It
// also bounds how long a stop waits for that read.
const idleBlock = 250 * time.Millisecond

func newConsumer(m *Module, label, group string, stream func(int) string) *consumer {
	host, _ := os.Hostname()
	c := &consumer{
		mod: m, label: label, group: group, count: 256, stream: stream, poll: m.cfg.StreamPoll,
		pruneAfter: consumerIdleLimit, block: idleBlock,
		name: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), store.NewToken()[:8]),
	}
	if store.IsCluster(m.rdb) {
		c.block = 0
	}
	return c
}

// ensureGroups creates the group on every shard's stream, reading from the
// start so entries written before the first worker came up count.
func (c *consumer) ensureGroups(ctx context.Context) error {
	for n := 0; n < c.mod.cfg.Shards; n++ {
		err := c.mod.rdb.XGroupCreateMkStream(ctx, c.stream(n), c.group, "0").Err()
		if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("presence: create group %s: %w", c.group, err)
		}
	}
	return nil
}

// read takes up to count new entries from every shard, without blocking.
func (c *consumer) read(ctx context.Context) (map[int][]redis.XMessage, error) {
	shards := c.mod.cfg.Shards
	cmds := make([]*redis.XStreamSliceCmd, shards)
	_, err := c.mod.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n := 0; n < shards; n++ {
			cmds[n] = p.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: c.group, Consumer: c.name, Streams: []string{c.stream(n), ">"},
				Count: c.count, Block: -1,
			})
		}
		return nil
	})
	out := map[int][]redis.XMessage{}
	for n, cmd := range cmds {
		if cmd.Err() != nil {
			if errors.Is(cmd.Err(), redis.Nil) {
				continue
			}
			if strings.Contains(cmd.Err().Error(), "NOGROUP") {
				// The stream was deleted (e.g. a flush): recreate and move on.
				_ = c.mod.rdb.XGroupCreateMkStream(ctx, c.stream(n), c.group, "0").Err()
				continue
			}
			return out, fmt.Errorf("presence: read %s: %w", c.label, cmd.Err())
		}
		for _, s := range cmd.Val() {
			if len(s.Messages) > 0 {
				out[n] = append(out[n], s.Messages...)
			}
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) && len(out) == 0 {
		return out, fmt.Errorf("presence: read %s: %w", c.label, err)
	}
	return out, nil
}

func (c *consumer) ack(ctx context.Context, shard int, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := c.mod.rdb.XAck(ctx, c.stream(shard), c.group, ids...).Err(); err != nil {
		return fmt.Errorf("presence: ack %s: %w", c.label, err)
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

// readBlocking waits up to c.block for new entries of any shard, in one
// XREADGROUP over every shard's stream (a single Redis only).
func (c *consumer) readBlocking(ctx context.Context) (map[int][]redis.XMessage, error) {
	shards := c.mod.cfg.Shards
	streams := make([]string, 0, 2*shards)
	shardOf := make(map[string]int, shards)
	for n := 0; n < shards; n++ {
		name := c.stream(n)
		shardOf[name] = n
		streams = append(streams, name)
	}
	for n := 0; n < shards; n++ {
		streams = append(streams, ">")
	}
	res, err := c.mod.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: c.group, Consumer: c.name, Streams: streams, Count: c.count, Block: c.block,
	}).Result()
	out := map[int][]redis.XMessage{}
	if errors.Is(err, redis.Nil) {
		return out, nil
	}
	if err != nil {
		if strings.Contains(err.Error(), "NOGROUP") {
			// A stream was deleted (e.g. a flush): recreate and move on.
			return out, c.ensureGroups(ctx)
		}
		return out, fmt.Errorf("presence: read %s: %w", c.label, err)
	}
	for _, st := range res {
		if n, ok := shardOf[st.Stream]; ok && len(st.Messages) > 0 {
			out[n] = append(out[n], st.Messages...)
		}
	}
	return out, nil
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
			if err := c.pruneConsumers(ctx, n); err != nil && ctx.Err() == nil {
				c.mod.log.Warn("presence: prune consumers", "stream", c.label, "err", err)
			}
		}
	}
}

// reclaim dead-letters the entries of a shard that failed too often, then
// claims and handles those idle past claim_idle (their consumer stalled).
func (c *consumer) reclaim(ctx context.Context, shard int, h handler) error {
	stream := c.stream(shard)
	idle := c.mod.cfg.ClaimIdle
	pend, err := c.mod.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: c.group, Idle: idle, Start: "-", End: "+", Count: 100,
	}).Result()
	if err != nil {
		return err
	}
	for _, p := range pend {
		if p.RetryCount >= int64(c.mod.cfg.MaxDeliveries) {
			if err := c.deadLetter(ctx, shard, p.ID, "delivered "+strconv.FormatInt(p.RetryCount, 10)+" times"); err != nil {
				return err
			}
		}
	}
	start := "0-0"
	for i := 0; i < 10 && ctx.Err() == nil; i++ {
		msgs, next, err := c.mod.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: stream, Group: c.group, Consumer: c.name, MinIdle: idle, Start: start, Count: c.count,
		}).Result()
		if err != nil {
			return err
		}
		var live []redis.XMessage
		var gone []string
		for _, m := range msgs {
			if m.Values == nil {
				gone = append(gone, m.ID) // trimmed away meanwhile
			} else {
				live = append(live, m)
			}
		}
		if len(msgs) > 0 {
			c.mod.m.reclaimed.WithLabelValues(c.label).Add(float64(len(msgs)))
		}
		if err := c.ack(ctx, shard, gone); err != nil {
			return err
		}
		if len(live) > 0 {
			if err := c.ack(ctx, shard, h(ctx, c, shard, live)); err != nil {
				return err
			}
		}
		if next == "0-0" || next == "" {
			break
		}
		start = next
	}
	return nil
}

// consumerIdleLimit is how long a consumer with nothing pending may stay
// silent before it is removed from its group (each process start adds one).
const consumerIdleLimit = time.Hour

// pruneConsumers removes consumers of processes long gone from a shard's
// group; their pending entries were claimed by others already.
func (c *consumer) pruneConsumers(ctx context.Context, shard int) error {
	list, err := c.mod.rdb.XInfoConsumers(ctx, c.stream(shard), c.group).Result()
	if err != nil {
		return err
	}
	for _, x := range list {
		if x.Name != c.name && x.Pending == 0 && x.Idle > c.pruneAfter {
			if err := c.mod.rdb.XGroupDelConsumer(ctx, c.stream(shard), c.group, x.Name).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// deadLetter moves one entry to the shard's dead-letter stream and
// acknowledges it in one transaction (both keys share the shard's hash tag),
// so the entry is never both pending and dead-lettered.
func (c *consumer) deadLetter(ctx context.Context, shard int, id, why string) error {
	stream := c.stream(shard)
	msgs, err := c.mod.rdb.XRangeN(ctx, stream, id, id, 1).Result()
	if err != nil {
		return err
	}
	fields := "{}"
	if len(msgs) == 1 {
		b, _ := json.Marshal(msgs[0].Values)
		fields = string(b)
	}
	_, err = c.mod.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{
			Stream: c.mod.keys.shard(shard).dead, MaxLen: 10000, Approx: true,
			Values: []any{"stream", c.label, "id", id, "group", c.group, "why", why, "fields", fields},
		})
		p.XAck(ctx, stream, c.group, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("presence: dead-letter %s: %w", c.label, err)
	}
	c.mod.m.deadLetters.WithLabelValues(c.label).Inc()
	c.mod.log.Warn("presence: dead-lettered a stream entry", "stream", c.label, "id", id, "why", why)
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
			pends[n] = p.XPending(ctx, c.stream(n), c.group)
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
			if g.Name == c.group {
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
