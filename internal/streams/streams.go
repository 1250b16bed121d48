// Package streams is the one Redis Streams consumer-group client of
// presenced. Every stream consumer (presence's session streams, payments'
// fulfillment, the viewers abuse scanner) reads at least once through a
// consumer group, so any number of processes may run it: it creates its
// group, reads new entries, acknowledges what it handled, takes over
// entries a stalled or dead consumer left pending, moves entries that keep
// failing to a dead-letter stream, and removes the consumers of processes
// long gone. What to do with an entry, and when to read, is the caller's.
package streams

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
)

// IsBusyGroup tells a group that exists already (XGROUP CREATE).
func IsBusyGroup(err error) bool { return redis.HasErrorPrefix(err, "BUSYGROUP") }

// IsNoGroup tells a stream or group that is gone (deleted, flushed).
func IsNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// Group is a consumer group as one consumer of it sees it.
type Group struct {
	rdb      redis.UniversalClient
	name     string
	consumer string
}

// NewGroup is the consumer group name on rdb, read as consumer (see
// ConsumerName).
func NewGroup(rdb redis.UniversalClient, name, consumer string) *Group {
	return &Group{rdb: rdb, name: name, consumer: consumer}
}

// ConsumerName names a consumer of this process: host, pid and a random
// tag, so a restarted process is a new consumer and what the old one left
// pending is claimed like any stalled consumer's.
func ConsumerName(tag string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), tag)
}

// Name is the group's name; Consumer this consumer's.
func (g *Group) Name() string     { return g.name }
func (g *Group) Consumer() string { return g.consumer }

// Create makes the group on each stream (and the stream when missing),
// reading from the start, so entries written before the first consumer
// came up count. A group that exists is left as it is.
func (g *Group) Create(ctx context.Context, streams ...string) error {
	for _, s := range streams {
		if err := g.rdb.XGroupCreateMkStream(ctx, s, g.name, "0").Err(); err != nil && !IsBusyGroup(err) {
			return fmt.Errorf("create group %s on %s: %w", g.name, s, err)
		}
	}
	return nil
}

// Read takes up to count new entries of streams in one command, waiting up
// to block for the first (block < 0: not at all). Every stream must then
// be in one hash slot (on Redis Cluster: one stream, or ReadEach). A stream
// whose group is gone gets it again and reads as empty.
func (g *Group) Read(ctx context.Context, count int64, block time.Duration, streams ...string) (map[string][]redis.XMessage, error) {
	args := make([]string, 0, 2*len(streams))
	args = append(args, streams...)
	for range streams {
		args = append(args, ">")
	}
	res, err := g.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: g.name, Consumer: g.consumer, Streams: args, Count: count, Block: block,
	}).Result()
	out := map[string][]redis.XMessage{}
	switch {
	case errors.Is(err, redis.Nil):
		return out, nil
	case IsNoGroup(err):
		return out, g.Create(ctx, streams...)
	case err != nil:
		return out, fmt.Errorf("read group %s: %w", g.name, err)
	}
	for _, st := range res {
		if len(st.Messages) > 0 {
			out[st.Stream] = append(out[st.Stream], st.Messages...)
		}
	}
	return out, nil
}

// ReadEach takes up to count new entries of each stream without waiting,
// one command a stream in one pipeline: for streams in several hash slots.
// What was read is returned even when some stream failed.
func (g *Group) ReadEach(ctx context.Context, count int64, streams ...string) (map[string][]redis.XMessage, error) {
	cmds := make([]*redis.XStreamSliceCmd, len(streams))
	_, _ = g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range streams {
			cmds[i] = p.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: g.name, Consumer: g.consumer, Streams: []string{s, ">"}, Count: count, Block: -1,
			})
		}
		return nil
	})
	out := map[string][]redis.XMessage{}
	var errs []error
	for i, cmd := range cmds {
		err := cmd.Err()
		switch {
		case errors.Is(err, redis.Nil):
		case IsNoGroup(err):
			errs = append(errs, g.Create(ctx, streams[i]))
		case err != nil:
			errs = append(errs, fmt.Errorf("read group %s on %s: %w", g.name, streams[i], err))
		default:
			for _, st := range cmd.Val() {
				if len(st.Messages) > 0 {
					out[st.Stream] = append(out[st.Stream], st.Messages...)
				}
			}
		}
	}
	return out, errors.Join(errs...)
}

// Ack acknowledges handled entries of stream.
func (g *Group) Ack(ctx context.Context, stream string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := g.rdb.XAck(ctx, stream, g.name, ids...).Err(); err != nil {
		return fmt.Errorf("ack group %s on %s: %w", g.name, stream, err)
	}
	return nil
}

// Reclaim says which pending entries to take over and what to do with
// those that keep failing.
type Reclaim struct {
	// MinIdle: entries pending this long belong to a stalled consumer.
	MinIdle time.Duration
	// Count entries a page, at most Pages pages (1 when 0).
	Count int64
	Pages int
	// MaxDeliveries: an entry delivered this many times already is moved
	// to DeadLetter instead of being handed out again (0: never).
	MaxDeliveries int64
	DeadLetter    string
}

// Reclaimed is what Reclaim did.
type Reclaimed struct {
	// Entries now this consumer's, to handle and acknowledge.
	Entries []redis.XMessage
	// Dead were moved to the dead-letter stream.
	Dead int
}

// Reclaim takes over the entries of stream left pending by a consumer that
// stalled or died. Those delivered r.MaxDeliveries times already go to the
// dead-letter stream (see DeadLetter) instead.
func (g *Group) Reclaim(ctx context.Context, stream string, r Reclaim) (Reclaimed, error) {
	var out Reclaimed
	start := "0-0"
	for page := 0; page < max(r.Pages, 1) && ctx.Err() == nil; page++ {
		msgs, next, err := g.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: stream, Group: g.name, Consumer: g.consumer, MinIdle: r.MinIdle, Start: start, Count: r.Count,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return out, fmt.Errorf("claim group %s on %s: %w", g.name, stream, err)
		}
		if err := g.sort(ctx, stream, msgs, r, &out); err != nil {
			return out, err
		}
		if next == "0-0" || next == "" {
			break
		}
		start = next
	}
	return out, nil
}

// sort files claimed entries into live and dead, and acknowledges those
// gone from the stream.
func (g *Group) sort(ctx context.Context, stream string, msgs []redis.XMessage, r Reclaim, out *Reclaimed) error {
	var live []redis.XMessage
	var trimmed []string
	for _, m := range msgs {
		if m.Values == nil {
			// Trimmed away while pending: Redis 6.2 hands it out empty (7
			// drops it from the pending list itself).
			trimmed = append(trimmed, m.ID)
		} else {
			live = append(live, m)
		}
	}
	if err := g.Ack(ctx, stream, trimmed...); err != nil {
		return err
	}
	if r.MaxDeliveries <= 0 || len(live) == 0 {
		out.Entries = append(out.Entries, live...)
		return nil
	}
	tries, err := g.deliveries(ctx, stream, live)
	if err != nil {
		return err
	}
	for _, m := range live {
		// The claim itself counted as one delivery.
		if n := tries[m.ID] - 1; n >= r.MaxDeliveries {
			if err := g.DeadLetter(ctx, stream, r.DeadLetter, m, "delivered "+strconv.FormatInt(n, 10)+" times"); err != nil {
				return err
			}
			out.Dead++
			continue
		}
		out.Entries = append(out.Entries, m)
	}
	return nil
}

// deliveries returns how often each of msgs (pending with this consumer)
// was delivered.
func (g *Group) deliveries(ctx context.Context, stream string, msgs []redis.XMessage) (map[string]int64, error) {
	pend, err := g.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: g.name, Consumer: g.consumer,
		Start: msgs[0].ID, End: msgs[len(msgs)-1].ID, Count: int64(len(msgs)) + 100,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("pending group %s on %s: %w", g.name, stream, err)
	}
	out := make(map[string]int64, len(pend))
	for _, p := range pend {
		out[p.ID] = p.RetryCount
	}
	return out, nil
}

// DeadLetter moves entry msg of stream to the stream dead, kept for
// humans with why, and acknowledges it. When both streams share a hash tag
// the two are one transaction, so the entry is never both pending and
// dead; otherwise the copy is written first, so it is never lost (a crash
// between the two leaves it in both, and the next reclaim copies it again).
func (g *Group) DeadLetter(ctx context.Context, stream, dead string, msg redis.XMessage, why string) error {
	fields, _ := json.Marshal(msg.Values)
	add := &redis.XAddArgs{
		Stream: dead, MaxLen: 10000, Approx: true,
		Values: []any{"stream", stream, "id", msg.ID, "group", g.name, "why", why, "fields", string(fields)},
	}
	if tag := hashTag(stream); tag != "" && tag == hashTag(dead) {
		_, err := g.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.XAdd(ctx, add)
			p.XAck(ctx, stream, g.name, msg.ID)
			return nil
		})
		if err != nil {
			return fmt.Errorf("dead-letter %s of %s: %w", msg.ID, stream, err)
		}
		return nil
	}
	if err := g.rdb.XAdd(ctx, add).Err(); err != nil {
		return fmt.Errorf("dead-letter %s of %s: %w", msg.ID, stream, err)
	}
	return g.Ack(ctx, stream, msg.ID)
}

// hashTag is the part of key Redis Cluster hashes: what the first {…}
// holds when not empty, else the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// Prune removes from stream's group the consumers idle longer than idle
// with nothing pending (processes long gone: each start adds one), this
// consumer excepted.
func (g *Group) Prune(ctx context.Context, stream string, idle time.Duration) error {
	list, err := g.rdb.XInfoConsumers(ctx, stream, g.name).Result()
	if err != nil {
		return fmt.Errorf("list consumers of %s on %s: %w", g.name, stream, err)
	}
	for _, c := range list {
		if c.Name != g.consumer && c.Pending == 0 && c.Idle > idle {
			if err := g.rdb.XGroupDelConsumer(ctx, stream, g.name, c.Name).Err(); err != nil {
				return fmt.Errorf("remove consumer %s of %s: %w", c.Name, g.name, err)
			}
		}
	}
	return nil
}
