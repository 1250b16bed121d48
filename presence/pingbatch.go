package presence

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pingBatch gathers the plain pings of a gateway's sessions and appends
// them to the pings streams once per period: one entry per shard naming
// every session that pinged, instead of an entry per ping. At 20,000 idle
// connections that is a few appends a second instead of hundreds, and the
// ping consumers, finding the streams mostly empty, wait in blocking reads
// instead of polling. A ping reaches the deadline index at most one period
// late, a small share of the session's TTL (pingFlushPeriod); closes are
// not batched, and ping_apply.lua keeps a close over any ping written
// after it.
//
// A ping that reported nothing new ran no session step, so nothing told
// it whether its session still exists (the lifecycle may have ended it,
// or Redis lost it): the flush checks those sessions in the same pipeline,
// and a connection whose session is gone is answered as a step would have
// answered it.
type pingBatch struct {
	st     *stateStore
	log    *slog.Logger
	period time.Duration

	mu      sync.Mutex
	pending map[int]map[*client]pendingPing // shard → connections that pinged
	// writing is held while a flush writes, and by a close: a close's
	// removal of the session from the gateway's record must not be
	// followed by a batched ping adding it back.
	writing sync.Mutex
}

// pendingPing is the last ping of a connection since the last flush.
type pendingPing struct {
	id    string // its correlation id, for an answer
	check bool   // no step ran for it: check the session exists
}

// maxPingsPerEntry bounds one stream entry; a busier shard gets several.
const maxPingsPerEntry = 256

func newPingBatch(st *stateStore, log *slog.Logger) *pingBatch {
	return &pingBatch{
		st: st, log: log, pending: map[int]map[*client]pendingPing{},
		period: pingFlushPeriod(st.cfg.PingInterval * time.Duration(st.cfg.MissBudget)),
	}
}

// pingFlushPeriod is a second, or an eighth of the session TTL when that
// is shorter (test settings), so a batched ping never risks its session.
func pingFlushPeriod(ttl time.Duration) time.Duration {
	return max(min(time.Second, ttl/8), time.Millisecond)
}

// add records that c pinged; check: no session step ran for the ping.
func (b *pingBatch) add(c *client, id string, check bool) {
	shard := b.st.keys.shardOf(c.user)
	b.mu.Lock()
	defer b.mu.Unlock()
	set := b.pending[shard]
	if set == nil {
		set = map[*client]pendingPing{}
		b.pending[shard] = set
	}
	set[c] = pendingPing{id: id, check: check}
}

// closed records a connection's close (its session's last sign of life,
// for the grace): the connection's gathered ping, if any, is dropped
// first.
func (b *pingBatch) closed(ctx context.Context, c *client) error {
	b.writing.Lock()
	defer b.writing.Unlock()
	b.mu.Lock()
	delete(b.pending[b.st.keys.shardOf(c.user)], c)
	b.mu.Unlock()
	return b.st.ping(ctx, c.sid, c.user, true)
}

// run flushes every period until ctx ends, then once more.
func (b *pingBatch) run(ctx context.Context) {
	t := time.NewTicker(b.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := b.flush(fctx); err != nil {
				b.log.Warn("presence: last pings", "err", err)
			}
			return
		case <-t.C:
			if err := b.flush(ctx); err != nil && ctx.Err() == nil {
				b.log.Warn("presence: pings", "err", err)
			}
		}
	}
}

// flush appends the pings gathered since the last flush, with this
// gateway's record of each session and the checks of the sessions no step
// saw, in one pipeline. Pings that fail to be written are dropped: the
// session's next ping renews it.
func (b *pingBatch) flush(ctx context.Context) error {
	b.writing.Lock()
	defer b.writing.Unlock()
	b.mu.Lock()
	pending := b.pending
	b.pending = make(map[int]map[*client]pendingPing, len(pending))
	b.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	var writes []memberWrite
	entries := make(map[string][]string) // stream → its entries' member lists
	var checked []*client
	for shard, set := range pending {
		sk := b.st.keys.shard(shard)
		mems := make([]string, 0, len(set))
		for c, p := range set {
			mem := member(c.sid, c.user)
			mems = append(mems, mem)
			if b.st.gateway != "" {
				writes = append(writes, memberWrite{key: sk.gateway(b.st.gateway), member: mem})
			}
			if p.check {
				checked = append(checked, c)
			}
		}
		for len(mems) > 0 {
			n := min(len(mems), maxPingsPerEntry)
			entries[sk.pings] = append(entries[sk.pings], strings.Join(mems[:n], " "))
			mems = mems[n:]
		}
	}
	var exists []*redis.BoolCmd
	err := b.st.batch.pipelineWith(ctx, func(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
		cmds := b.appendEntries(ctx, p, entries)
		exists = make([]*redis.BoolCmd, len(checked))
		for i, c := range checked {
			exists[i] = p.HExists(ctx, b.st.keys.user(c.user).sessions, c.sid)
			cmds = append(cmds, exists[i])
		}
		return cmds
	}, writes)
	if err != nil {
		return fmt.Errorf("presence: pings: %w", err)
	}
	for i, c := range checked {
		if live, err := exists[i].Result(); err == nil && !live {
			c.endSession(pending[b.st.keys.shardOf(c.user)][c].id)
		}
	}
	return nil
}

func (b *pingBatch) appendEntries(ctx context.Context, p redis.Pipeliner, entries map[string][]string) []redis.Cmder {
	ttl := (b.st.cfg.PingInterval * time.Duration(b.st.cfg.MissBudget)).Milliseconds()
	var cmds []redis.Cmder
	for stream, lists := range entries {
		for _, list := range lists {
			cmds = append(cmds, p.XAdd(ctx, &redis.XAddArgs{
				Stream: stream, MaxLen: b.st.cfg.PingsMaxLen, Approx: true,
				Values: []any{"m", list, "t", ttl, "k", "p"},
			}))
		}
	}
	return cmds
}
