package presence

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/presenced/presenced/web"
)

// client is one connection: one session of one device. Its reader
// goroutine handles requests in order; the flusher and the hub reach it
// only through mark and flush.
type client struct {
	g     *gateway
	conn  *web.Conn
	lu    *localUser
	user  string
	sid   string
	rooms []string
	exp   int64 // token expiry, Unix seconds; 0 = none

	// busy is held while a worker handles this connection's request.
	busy sync.WaitGroup

	// Reader goroutine only (and the request it waits for).
	msgs        bucket
	subChanges  bucket
	lastLimited int64

	ended atomic.Bool
	// Device activity as last reported, for the sessions gauge.
	lastAct  atomic.Int64 // Unix ns
	inactive atomic.Bool

	// idleSlot is the idle wheel slot this connection waits in; 0: none.
	// Guarded by the wheel's lock.
	idleSlot int64

	mu        sync.Mutex
	pending   map[*subject]struct{}
	scheduled bool
	closed    bool
	lastFlush int64 // Unix ns
	behind    int64 // Unix ns since the send queue is too full; 0 if not
	resync    bool

	// sendMu orders the frames built from subjects: a snapshot and a
	// coalesced update never interleave, so a client never sees a status
	// older than one it already got.
	sendMu sync.Mutex
	sent   map[*subject]*Status
}

// bucket is a connection's token bucket (golang.org/x/time/rate), used by
// its reader goroutine.
type bucket struct{ lim *rate.Limiter }

func newBucket(perSecond float64, burst int) bucket {
	return bucket{lim: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

// allow takes a token at now (Unix ns), or says there is none.
func (b bucket) allow(now int64) bool { return b.lim.AllowN(time.Unix(0, now), 1) }

// mark records that subject changed; the connection is flushed now if it
// has been quiet for a tick, else at the next tick.
func (c *client) mark(s *subject) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.pending == nil {
		c.pending = make(map[*subject]struct{}, 2)
	}
	c.pending[s] = struct{}{}
	if c.scheduled {
		c.mu.Unlock()
		return
	}
	c.scheduled = true
	due := c.lastFlush + int64(c.g.f.tick)
	c.mu.Unlock()
	c.g.f.schedule(c, due)
}

// flush sends the pending changes as one presence:updated, skipping those
// equal to what the client last got. A client whose send queue is half full
// gets nothing until it drains, then one full resync; one that stays behind
// for slow_client_timeout is dropped.
func (c *client) flush() {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	now := time.Now().UnixNano()
	c.mu.Lock()
	if c.closed {
		c.pending = nil
		c.mu.Unlock()
		return
	}
	c.scheduled = false
	c.lastFlush = now
	depth := c.conn.QueueLen()
	if depth >= c.g.highWater {
		if c.behind == 0 {
			c.behind = now
		}
		stuck := now-c.behind > int64(c.g.cfg.SlowClientTimeout)
		c.resync = true
		c.pending = nil
		c.scheduled = !stuck
		c.mu.Unlock()
		if stuck {
			c.g.m.slowDrops.Inc()
			c.conn.Close(web.CloseSlowConsumer, "slow consumer")
			return
		}
		c.g.f.schedule(c, now+int64(c.g.f.tick))
		return
	}
	c.behind = 0
	resync := c.resync
	c.resync = false
	pend := c.pending
	c.pending = nil
	c.mu.Unlock()

	if resync {
		c.g.m.resyncs.Inc()
		c.sendSubjectsLocked(c.lu.followed(), "", true)
		return
	}
	users := make([]Status, 0, len(pend))
	nowMs := now / int64(time.Millisecond)
	for s := range pend {
		if !c.lu.follows(s) {
			delete(c.sent, s)
			continue
		}
		st := s.cur.Load()
		if st == nil || st.sameAs(c.sent[s]) {
			continue
		}
		c.rememberLocked(s, st)
		users = append(users, st.public())
		if st.TS > 0 && nowMs >= st.TS {
			c.g.m.pushLatency.Observe(float64(nowMs-st.TS) / 1000)
		}
	}
	if len(users) == 0 {
		return
	}
	c.g.m.queueDepth.Observe(float64(depth))
	c.conn.Send(web.EventFrame(EventPresenceUpdated, UpdatedPayload{Users: users}, ""))
}

func (c *client) rememberLocked(s *subject, st *Status) {
	if c.sent == nil {
		c.sent = make(map[*subject]*Status, 4)
	}
	c.sent[s] = st
}

// sendSubjects sends the current status of subjects in one
// presence:updated: a snapshot (resync) or the reply to a request.
func (c *client) sendSubjects(subs []*subject, correlationID string, resync bool) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.sendSubjectsLocked(subs, correlationID, resync)
}

func (c *client) sendSubjectsLocked(subs []*subject, correlationID string, resync bool) {
	users := make([]Status, 0, len(subs))
	for _, s := range subs {
		st := s.status()
		c.rememberLocked(s, st)
		users = append(users, st.public())
	}
	if resync {
		// Whatever the client had of subjects it no longer follows is stale.
		for s := range c.sent {
			if !c.lu.follows(s) {
				delete(c.sent, s)
			}
		}
	}
	c.conn.Send(web.EventFrame(EventPresenceUpdated, UpdatedPayload{Users: users, Resync: resync}, correlationID))
}

// forget drops the memory of subjects no longer followed.
func (c *client) forget(subs []*subject) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	for _, s := range subs {
		delete(c.sent, s)
	}
}

func (c *client) markClosed() {
	c.mu.Lock()
	c.closed = true
	c.pending = nil
	c.mu.Unlock()
}

// armIdle schedules a recompute for when the user may turn idle.
func (c *client) armIdle(in time.Duration) {
	if in < 0 || c.ended.Load() || c.isClosed() {
		c.g.idle.stop(c)
		return
	}
	// A little late rather than early: the store decides by its own clock.
	c.g.idle.arm(c, time.Now().Add(in+250*time.Millisecond))
}

func (c *client) stopIdle() { c.g.idle.stop(c) }

func (c *client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// deviceActive tells whether this device reported interaction recently.
func (c *client) deviceActive(now int64) bool {
	return !c.inactive.Load() && now-c.lastAct.Load() < int64(c.g.cfg.IdleThreshold)
}
