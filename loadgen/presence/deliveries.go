package presence

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/presenced/presenced/loadgen"
	"github.com/presenced/presenced/presence"
)

// The delivery check. Every change is sent by the changing user over its
// own socket with the request id "c<n>"; the reply names the version v the
// change got. Followers record every update they receive. After the load,
// each (change, follower) pair is matched: the follower got that v
// (arrived), or only a later v of the same user (superseded: the gateway
// coalesced it away, which is allowed), or neither (lost). Latency is from
// the send to the receipt, both on this machine's clock; for a user changed
// by another loadgen process it is from the change's own timestamp (since,
// the Redis clock).

// change is one status change sent by a user of this process.
type change struct {
	sent    int64 // Unix ns, just before the frame was written
	v       int64 // from the reply; 0 while unanswered
	replied int64 // Unix ns, when the reply was read
}

// drainQuiet: after the last change, receipts are awaited until none has
// come for this long.
const drainQuiet = 2 * time.Second

// observation is one status a follower received.
type observation struct {
	subj int   // population index of the user whose status it is
	v    int64 // its version
	at   int64 // Unix ns, when the frame was read
	// arrived is when the kernel queued the frame's last segment on this
	// process's socket (Unix ns; 0: unknown): on loopback, when the
	// server wrote it.
	arrived int64
	since   int64 // Unix ms, the change's own timestamp
}

// replied records the version the change seq got.
func (c *loadConn) replied(seq string, v int64) {
	n, err := strconv.Atoi(seq)
	if err != nil {
		return
	}
	now := time.Now().UnixNano()
	c.mu.Lock()
	if n >= 0 && n < len(c.changes) {
		c.changes[n].v = v
		c.changes[n].replied = now
	}
	c.mu.Unlock()
}

// reserveReceipts sizes each connection's receipt list for the window d,
// so recording does not regrow it (garbage the collector would have to
// take in the window).
func (run *loadRun) reserveReceipts(d time.Duration) {
	l := run.l
	if len(run.conns) == 0 {
		return
	}
	// Every process changes its users at the same rate, so a follower
	// receives about rate × window × follows / users of this process.
	per := l.changes * d.Seconds() * float64(l.follow) / float64(len(run.conns))
	n := min(int(per*1.25)+16, 1<<16)
	for _, c := range run.conns {
		c.mu.Lock()
		c.obs = slices.Grow(c.obs, n)
		c.mu.Unlock()
	}
}

// observe records an update received by c, and feeds the storm's
// time-to-offline.
func (run *loadRun) observe(c *loadConn, st presence.Status, now time.Time, arrived int64) {
	switch st.Status {
	case presence.StatusOffline:
		if v, ok := run.killed.Load(st.User); ok {
			run.offMu.Lock()
			if !run.offSeen[st.User] {
				run.offSeen[st.User] = true
				run.offHist.Record(now.Sub(v.(time.Time)))
			}
			run.offMu.Unlock()
		}
	case "busy", "away":
		if !run.recordOn.Load() {
			return
		}
		idx, ok := run.userIndex(st.User)
		if !ok {
			return
		}
		c.mu.Lock()
		c.obs = append(c.obs, observation{subj: idx, v: st.V, at: now.UnixNano(), arrived: arrived, since: st.Since})
		c.mu.Unlock()
		run.observed.Add(1)
	}
}

// steady changes statuses at the configured rate for --steady, then waits
// for the last deliveries and checks them.
func (run *loadRun) steady(ctx context.Context, meter *cpuMeter) {
	l := run.l
	d := l.steadyDuration(run.r)
	run.reserveReceipts(d)
	// From here on the load generator's own collections would count as
	// the server's latency.
	releaseGC := loadgen.HoldCollector(512 << 20)
	run.recordOn.Store(true)
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	lim := rate.NewLimiter(rate.Limit(l.changes), max(1, int(l.changes/100)))
	cpu0 := meter.sample(ctx)
	start := time.Now()
	sent := 0
	for sctx.Err() == nil {
		if lim.Wait(sctx) != nil {
			break
		}
		c := run.conns[rand.IntN(len(run.conns))]
		if c.dead.Load() {
			continue
		}
		c.manual = !c.manual
		st := "busy"
		if !c.manual {
			st = "away"
		}
		c.mu.Lock()
		seq := len(c.changes)
		c.changes = append(c.changes, change{sent: time.Now().UnixNano()})
		c.mu.Unlock()
		if err := c.send(presence.EventPresenceUpdate, map[string]any{"status": st}, "c"+strconv.Itoa(seq)); err != nil {
			run.r.Record(0, loadgen.Errorf("send", "%v", err))
			continue
		}
		sent++
	}
	el := time.Since(start)
	run.changesEnded = time.Now().UnixNano()
	cpu1 := meter.sample(ctx)
	// The last deliveries: until nothing arrives for drainQuiet. Shorter,
	// on a loaded machine whose tail ran past a second, the last changes'
	// receipts came after the check and counted as lost.
	for last, quiet := run.observed.Load(), 0; quiet < int(drainQuiet/(100*time.Millisecond)) && ctx.Err() == nil; {
		sleepCtx(ctx, 100*time.Millisecond)
		if n := run.observed.Load(); n != last {
			last, quiet = n, 0
		} else {
			quiet++
		}
	}
	run.recordOn.Store(false)
	collections := releaseGC()
	run.r.AddFigure("status changes", "%d in %s (%.0f/s) by %d users, %d followers each (%s)",
		sent, el.Round(time.Millisecond), float64(sent)/el.Seconds(), len(run.conns), l.follow, l.shape)
	run.r.AddFigure("CPU during the changes", "%s", cpu1.since(cpu0))
	run.r.AddFigure("Redis per change", "%s", redisWork(cpu0.commands, cpu1.commands, float64(sent), "change"))
	run.r.AddFigure("loadgen collections", "%d while receipts were recorded (its collector is held off then, up to a memory limit)", collections)
	run.checkDeliveries()
}

// deliveryCheck is the outcome of matching changes with receipts.
type deliveryCheck struct {
	expected, arrived, superseded, lost, duplicates int64
	unanswered                                      int64
	local, remote                                   loadgen.Histogram // send→receive; since→receive for other processes' users
	atSocket                                        loadgen.Histogram // send→arrival in the follower's socket
	published                                       loadgen.Histogram // since→receive, every receipt
	replied                                         loadgen.Histogram // send→reply of the changer's own request
	lostExample                                     string
}

func (run *loadRun) checkDeliveries() {
	var dc deliveryCheck
	// The send time of each (user, v) changed here.
	sentAt := map[int]map[int64]int64{}
	for _, c := range run.conns {
		c.mu.Lock()
		for _, ch := range c.changes {
			if ch.v == 0 {
				dc.unanswered++
				continue
			}
			dc.replied.Record(time.Duration(ch.replied - ch.sent))
			if sentAt[c.idx] == nil {
				sentAt[c.idx] = map[int64]int64{}
			}
			sentAt[c.idx][ch.v] = ch.sent
		}
		c.mu.Unlock()
	}
	for _, f := range run.conns {
		f.mu.Lock()
		obs := slices.Clone(f.obs)
		f.mu.Unlock()
		// Versions received per followed user, for the matching below.
		got := map[int]map[int64]bool{}
		maxV := map[int]int64{}
		for _, o := range obs {
			if got[o.subj] == nil {
				got[o.subj] = map[int64]bool{}
			}
			if got[o.subj][o.v] {
				dc.duplicates++
				continue
			}
			got[o.subj][o.v] = true
			maxV[o.subj] = max(maxV[o.subj], o.v)
			if o.since > 0 {
				dc.published.Record(time.Duration(o.at - o.since*int64(time.Millisecond)))
			}
			if sent, ok := sentAt[o.subj][o.v]; ok {
				d := time.Duration(o.at - sent)
				dc.local.Record(d)
				run.r.Record(d, nil)
				if o.arrived >= sent {
					dc.atSocket.Record(time.Duration(o.arrived - sent))
				}
			} else if run.byIdx[o.subj] == nil && o.since > 0 {
				d := time.Duration(o.at - o.since*int64(time.Millisecond))
				dc.remote.Record(d)
				run.r.Record(d, nil)
			}
		}
		for _, subj := range f.follows {
			for v := range sentAt[subj] {
				dc.expected++
				switch {
				case got[subj][v]:
					dc.arrived++
				case maxV[subj] > v:
					dc.superseded++
				default:
					dc.lost++
					if dc.lostExample == "" {
						dc.lostExample = fmt.Sprintf("; e.g. %s never saw %s at v%d (latest seen v%d), sent %s before the changes ended",
							f.user, run.userID(subj), v, maxV[subj], time.Duration(run.changesEnded-sentAt[subj][v]).Round(time.Millisecond))
					}
				}
			}
		}
	}
	r := run.r
	r.AddFigure("deliveries/expected", "%d / %d (%.3f %%): %d superseded by a newer state of the same user, %d lost%s",
		dc.arrived, dc.expected, 100*float64(dc.arrived)/float64(max(dc.expected, 1)), dc.superseded, dc.lost, dc.lostExample)
	if dc.duplicates > 0 || dc.unanswered > 0 {
		r.AddFigure("delivery oddities", "%d duplicate receipts, %d changes never answered", dc.duplicates, dc.unanswered)
	}
	if dc.local.Count() > 0 {
		r.AddFigure("send to receive", "%s over %d deliveries", quantiles(&dc.local), dc.local.Count())
	}
	if dc.atSocket.Count() > 0 {
		// The same receipts up to when the kernel queued them on the
		// follower's socket: the server's part, without this process's
		// own wake-up and reading (on one busy core, 20 sockets ready at
		// once are read one after the other).
		r.AddFigure("send to socket", "%s over %d deliveries (the kernel's receive time of each frame)", quantiles(&dc.atSocket), dc.atSocket.Count())
	}
	if dc.replied.Count() > 0 {
		// The changer's own round trip: reading the change, the status
		// step in Redis, the reply. Receipts take it plus the fan-out.
		r.AddFigure("send to reply", "%s over %d changes", quantiles(&dc.replied), dc.replied.Count())
	}
	if dc.remote.Count() > 0 {
		r.AddFigure("publish to receive, users of other processes", "%s over %d deliveries (from the change's since, ms clock)", quantiles(&dc.remote), dc.remote.Count())
	}
	if dc.published.Count() > 0 {
		r.AddFigure("publish to receive", "%s (from the change's since in Redis, ms resolution)", quantiles(&dc.published))
	}
}

func quantiles(h *loadgen.Histogram) string {
	q := func(x float64) time.Duration { return loadgen.RoundLatency(h.Quantile(x)) }
	return fmt.Sprintf("p50 %s p90 %s p99 %s p99.9 %s max %s", q(0.5), q(0.9), q(0.99), q(0.999), loadgen.RoundLatency(h.Max()))
}
