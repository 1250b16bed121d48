package presence

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/presenced/presenced/web/socket"
)

// client is one connection: one session of one device. Its reader
// goroutine handles requests in order; the hub reaches it only through
// mark, and its socket's writer through nextFrame.
type client struct {
	g     *gateway
	conn  *socket.Conn
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

	// Changes waiting for the socket, guarded by mu. armed: a pull is
	// requested and not served yet, so changes arriving now join the
	// frame it will build; waitFrom is when the oldest of them arrived.
	mu       sync.Mutex
	pending  subjectSet
	armed    bool
	waitFrom int64 // Unix ns; 0 if nothing waits
	watched  bool  // in the gateway's set of connections with changes waiting behind a write
	closed   bool

	// sendMu orders the frames built from subjects: a snapshot and a
	// coalesced update never interleave, so a client never sees a status
	// older than one it already got.
	sendMu sync.Mutex
	sent   sentMemo
}

// bucket is a connection's token bucket (golang.org/x/time/rate), used by
// its reader goroutine.
type bucket struct{ lim *rate.Limiter }

func newBucket(perSecond float64, burst int) bucket {
	return bucket{lim: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

// allow takes a token at now (Unix ns), or says there is none.
func (b bucket) allow(now int64) bool { return b.lim.AllowN(time.Unix(0, now), 1) }

// mark records that subject changed. An idle connection is asked for a
// frame at once; while a frame is being written (or replies are queued
// before it) the change waits and joins the next frame, which the socket
// pulls as soon as it is free: coalescing happens only under backpressure.
func (c *client) mark(s *subject) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.pending.add(s)
	if c.armed {
		// Behind a write in flight: the gateway watches for how long.
		watch := !c.watched
		c.watched = true
		c.mu.Unlock()
		if watch {
			c.g.watchBehind(c)
		}
		return
	}
	c.armed = true
	c.waitFrom = time.Now().UnixNano()
	c.mu.Unlock()
	c.conn.Pull()
}

// holdChanges keeps changes from being pulled until releaseChanges: as a
// session opens, what it follows can change before its snapshot is queued,
// and the snapshot must be the connection's first frame. Armed as if a
// write were in flight, the changes wait in pending.
func (c *client) holdChanges() {
	c.mu.Lock()
	c.armed = true
	c.waitFrom = time.Now().UnixNano()
	c.mu.Unlock()
}

// releaseChanges ends holdChanges once the snapshot is queued: changes that
// arrived meanwhile follow it in one frame (less what it already said).
func (c *client) releaseChanges() {
	c.mu.Lock()
	waiting := c.pending.len() > 0
	if !waiting {
		c.armed = false
		c.waitFrom = 0
	}
	c.mu.Unlock()
	if waiting {
		c.conn.Pull()
	}
}

// unmark forgets subjects no longer followed: their pending changes and
// what the client last got of them.
func (c *client) unmark(subs []*subject) {
	c.mu.Lock()
	for _, s := range subs {
		c.pending.remove(s)
	}
	c.mu.Unlock()
	c.forget(subs)
}

// nextFrame is the connection's frame source: one presence:updated with
// the latest status of every user that changed since the last frame,
// leaving out those equal to what the client last got; nil when nothing is
// left to send.
func (c *client) nextFrame() []byte {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	depth := c.conn.QueueLen()
	if depth > 0 {
		// A snapshot or reply queued before now goes first; this frame,
		// built after it, must not overtake it.
		c.conn.Pull()
		return nil
	}
	c.mu.Lock()
	pend := c.pending
	c.pending = subjectSet{}
	c.armed = false
	c.waitFrom = 0
	c.mu.Unlock()
	if pend.len() == 0 {
		return nil
	}
	b := getFrameBuf()
	b = append(b, updatedPrefix...)
	users := 0
	nowMs := time.Now().UnixMilli()
	pend.each(func(s *subject) {
		st := s.cur.Load()
		if st != nil && c.lu.hidesLastActive(s.id) {
			st = st.withoutLastActive()
		}
		if st == nil || st.st.sameAs(c.sent.get(s)) {
			return
		}
		c.sent.put(s, &st.st)
		if users > 0 {
			b = append(b, ',')
		}
		b = append(b, st.wire...)
		users++
		if st.st.TS > 0 && nowMs >= st.st.TS {
			c.g.m.pushLatency.Observe(float64(nowMs-st.st.TS) / 1000)
		}
	})
	if users == 0 {
		putFrameBuf(b)
		return nil
	}
	c.g.m.queueDepth.Observe(float64(depth))
	return closeUpdated(b, false, "")
}

// behindFor reports how long the oldest waiting change has waited for the
// socket at now (0: none waits), and clears the watch when none does.
func (c *client) behindFor(now int64) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed || c.closed {
		c.watched = false
		return 0
	}
	return time.Duration(now - c.waitFrom)
}

// sendSubjects sends the current status of subjects in one
// presence:updated: a snapshot (resync) or the reply to a request.
func (c *client) sendSubjects(subs []*subject, correlationID string, resync bool) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.sendSubjectsLocked(subs, correlationID, resync)
}

func (c *client) sendSubjectsLocked(subs []*subject, correlationID string, resync bool) {
	states := make([]*state, len(subs))
	for i, s := range subs {
		states[i] = s.state()
		if c.lu.hidesLastActive(s.id) {
			states[i] = states[i].withoutLastActive()
		}
		c.sent.put(s, &states[i].st)
	}
	if resync {
		// Whatever the client had of subjects it no longer follows is stale.
		c.sent.keep(c.lu.follows)
	}
	c.conn.Send(updatedFrame(states, resync, correlationID))
}

// forget drops the memory of subjects no longer followed.
func (c *client) forget(subs []*subject) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	for _, s := range subs {
		c.sent.forget(s)
	}
}

func (c *client) markClosed() {
	c.mu.Lock()
	c.closed = true
	c.pending = subjectSet{}
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
