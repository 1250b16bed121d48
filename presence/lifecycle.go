package presence

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// expireBatch bounds the sessions one scheduler call ends per shard.
const expireBatch = 500

// Consumer groups of the session lifecycle.
const (
	groupPings    = "presence-pings"
	groupCleanup  = "presence-cleanup"
	groupWebhooks = "presence-webhooks"
)

// lifecycle is the loop of the session lifecycle: the ping consumers, the
// deadline scheduler and the cleanup consumer.
func (m *Module) lifecycle(ctx context.Context) error {
	pings := newConsumer(m, "pings", groupPings, func(n int) string { return m.keys.shard(n).pings })
	events := newConsumer(m, "events", groupCleanup, func(n int) string { return m.keys.shard(n).events })
	if err := pings.ensureGroups(ctx); err != nil {
		return err
	}
	loops := []func(context.Context) error{
		func(ctx context.Context) error { return pings.loop(ctx, m.applyPings) },
		func(ctx context.Context) error { return events.loop(ctx, m.cleanup) },
		func(ctx context.Context) error { return m.schedule(ctx, pings, events) },
	}
	if m.cfg.Webhook.URL != "" {
		hooks, err := newWebhookSender(m)
		if err != nil {
			return err
		}
		loops = append(loops, hooks.run)
	}
	return runAll(ctx, loops)
}

// runAll runs loops until ctx ends or one fails.
func runAll(ctx context.Context, loops []func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(loops))
	for _, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l(ctx); err != nil && ctx.Err() == nil {
				errs <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// applyPings moves a batch of pings of one shard into its deadline index.
func (m *Module) applyPings(ctx context.Context, c *consumer, shard int, msgs []redis.XMessage) []string {
	sk := m.keys.shard(shard)
	args := make([]any, 0, len(msgs)*4) // an entry is 3 arguments and its members
	ids := make([]string, 0, len(msgs))
	for _, msg := range msgs {
		// "m" names one session, or (a gateway's batch of plain pings)
		// several separated by spaces: member ids hold none.
		mems := strings.Fields(str(msg.Values["m"]))
		ttl, err := strconv.ParseInt(str(msg.Values["t"]), 10, 64)
		kind := str(msg.Values["k"])
		pos, ok := idPosition(msg.ID)
		if !validMembers(mems) || err != nil || ttl < 0 || !ok || (kind != "p" && kind != "c") {
			if err := c.deadLetter(ctx, shard, msg, "malformed ping"); err != nil {
				m.log.Warn("presence: dead-letter ping", "err", err)
			}
			continue
		}
		args = append(args, kind, pos/1000+ttl, len(mems))
		for _, mem := range mems {
			args = append(args, mem)
		}
		ids = append(ids, msg.ID)
	}
	if len(ids) == 0 {
		return nil
	}
	if err := pingApplyScript.Run(ctx, m.rdb, []string{sk.deadlines, sk.closing}, args...).Err(); err != nil {
		if ctx.Err() == nil {
			m.log.Warn("presence: apply pings", "err", err)
		}
		return nil
	}
	return ids
}

func validMembers(mems []string) bool {
	for _, mem := range mems {
		if _, _, ok := splitMember(mem); !ok {
			return false
		}
	}
	return len(mems) > 0
}

// cleanup ends the sessions of inactive events. It is idempotent: an event
// handled twice finds the session gone and changes nothing.
func (m *Module) cleanup(ctx context.Context, c *consumer, shard int, msgs []redis.XMessage) []string {
	sk := m.keys.shard(shard)
	var done []string
	for _, msg := range msgs {
		mem := str(msg.Values["m"])
		reason := str(msg.Values["r"])
		sid, user, ok := splitMember(mem)
		if !ok || (reason != "timeout" && reason != "closed" && reason != "disconnect" && reason != "gateway") {
			if err := c.deadLetter(ctx, shard, msg, "malformed inactive event"); err != nil {
				m.log.Warn("presence: dead-letter event", "err", err)
			}
			continue
		}
		if reason == "disconnect" {
			// The gateway ended the session itself; clear its lifecycle
			// entries (a ping read after this re-adds them, and the
			// scheduler then finds nothing left to end).
			_, err := m.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.ZRem(ctx, sk.deadlines, mem)
				p.ZRem(ctx, sk.closing, mem)
				return nil
			})
			if err != nil {
				if ctx.Err() == nil {
					m.log.Warn("presence: cleanup", "err", err)
				}
				continue
			}
		}
		res, err := m.st.step(ctx, user, "close", sid)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("presence: cleanup", "err", err)
			}
			continue
		}
		outcome := "ended"
		if res.Result == "absent" {
			outcome = "absent"
		}
		m.m.cleanups.WithLabelValues(reason, outcome).Inc()
		m.changed(ctx, res)

		done = append(done, msg.ID)
	}
	return done
}

// schedule runs the scheduler: every period, each shard's passed deadlines
// become inactive events, and the groups' backlog is exported.
func (m *Module) schedule(ctx context.Context, pings, events *consumer) error {
	t := time.NewTicker(m.cfg.SchedulerInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := m.reapGateways(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("presence: gateway reaper", "err", err)
		}
		if err := m.scheduleOnce(ctx, pings, events); err != nil && ctx.Err() == nil {
			m.log.Warn("presence: scheduler", "err", err)
		}
	}
}

func (m *Module) scheduleOnce(ctx context.Context, pings, events *consumer) error {
	states, err := pings.state(ctx)
	if err != nil {
		return err
	}
	nowMs := time.Now().UnixMilli()
	pings.report(states, nowMs)
	if es, err := events.state(ctx); err == nil {
		events.report(es, nowMs)
	}
	var tracked int64
	for n := 0; n < m.cfg.Shards; n++ {
		sk := m.keys.shard(n)
		wm := watermark(states[n])
		for {
			counts, err := expireScript.Run(ctx, m.rdb, []string{sk.deadlines, sk.closing, sk.events}, wm, expireBatch, m.cfg.EventsMaxLen).Int64Slice()
			if err != nil {
				return err
			}
			if len(counts) != 3 {
				return errors.New("presence: expire: unexpected reply")
			}
			m.m.expired.WithLabelValues("timeout").Add(float64(counts[0]))
			m.m.expired.WithLabelValues("closed").Add(float64(counts[1]))
			if counts[0]+counts[1] < expireBatch {
				tracked += counts[2]
				break
			}
		}
	}
	m.m.tracked.Set(float64(tracked))
	return nil
}

// watermark is the time before which every ping of the shard has been
// applied: the oldest unacknowledged entry, or the last delivered one when
// entries wait undelivered. A deadline before it is final.
func watermark(s groupState) int64 {
	wm := int64(math.MaxInt64)
	if s.pending > 0 {
		if ms := idMillis(s.oldestPending); ms > 0 {
			wm = ms
		}
	}
	if s.undelivered() {
		if ms := idMillis(s.lastDelivered); ms < wm {
			wm = ms
		}
	}
	if wm == math.MaxInt64 {
		// Nothing in flight: the script caps it at the current time.
		return math.MaxInt64 / 2
	}
	return wm
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
