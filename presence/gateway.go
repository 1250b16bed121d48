package presence

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// gateway serves /v1/presence/ws.
type gateway struct {
	mod    *Module
	cfg    config.Presence
	f      *fanout
	m      *metrics
	idle   *idleWheel
	behind *behindSet
	// jobs feeds the request workers. Requests run there, not on the
	// connection's reader, whose stack an idle connection keeps; and a
	// burst (thousands of connections closing together) waits on the
	// readers' small stacks instead of piling up deep goroutines.
	jobs    chan job
	workers sync.WaitGroup
	// opening bounds the connections being opened at once; waiting counts
	// those queued for a slot. A burst waits its turn; a reconnect storm
	// beyond what the gateway drains gets 503 with a jittered Retry-After
	// instead of a Redis queue.
	opening chan struct{}
	waiting atomic.Int64
	// listening is closed once the control channels are subscribed: a
	// connection accepted before would miss what other gateways announce
	// about its user (a subscription made elsewhere, a notification).
	listening chan struct{}

	wg sync.WaitGroup // connection goroutines, waited for at shutdown

	// subsNews counts the subscription changes announced by other
	// gateways (and control resyncs, which may have lost some). A
	// connection whose open saw none follows the subscriptions its session
	// script read, without reading them again.
	subsNews atomic.Uint64
	pings    *pingBatch
}

// listenWait bounds how long a connection opened at start-up waits for the
// control channels before it is refused with 503.
const listenWait = 5 * time.Second

func newGateway(m *Module) *gateway {
	g := &gateway{
		mod: m, cfg: m.cfg, f: m.f, m: m.m, idle: newIdleWheel(), behind: newBehindSet(),
		jobs: make(chan job), opening: make(chan struct{}, openingSlots(m.cfg)), listening: make(chan struct{}),
		pings: newPingBatch(m.st, m.log),
	}
	for i := 0; i < maxInFlight; i++ {
		g.workers.Add(1)
		go g.work()
	}
	return g
}

// maxInFlight is the number of request workers of a gateway.
const maxInFlight = 256

// openingPerCPU sizes the opening slots to the machine: opening a
// connection is CPU work (TLS, upgrade, one script, the snapshot) and
// Redis round trips, so more slots than this only lengthen every open.
const openingPerCPU = 256

// openingSlots is how many connections open at once: max_opening, or
// openingPerCPU for each CPU the process may use.
func openingSlots(cfg config.Presence) int {
	if cfg.MaxOpening > 0 {
		return cfg.MaxOpening
	}
	return openingPerCPU * runtime.GOMAXPROCS(0)
}

// waitersPerSlot bounds the queue of connections waiting for a slot: past
// it the gateway sheds at once rather than hold sockets it cannot drain
// within opening_wait.
const waitersPerSlot = 8

// admit takes an opening slot, waiting up to opening_wait for one; false:
// the gateway is saturated and the connection is to be refused.
func (g *gateway) admit(ctx context.Context) bool {
	select {
	case g.opening <- struct{}{}:
		return true
	default:
	}
	if g.cfg.OpeningWait <= 0 {
		return false
	}
	if g.waiting.Add(1) > int64(waitersPerSlot*cap(g.opening)) {
		g.waiting.Add(-1)
		return false
	}
	defer g.waiting.Add(-1)
	t := time.NewTimer(g.cfg.OpeningWait)
	defer t.Stop()
	select {
	case g.opening <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// job is one frame of a connection to handle; msg nil is its end.
type job struct {
	c   *client
	msg []byte
}

func (g *gateway) work() {
	defer g.workers.Done()
	for j := range g.jobs {
		if j.msg == nil {
			j.c.finish()
		} else {
			j.c.handle(j.msg)
		}
		j.c.busy.Done()
	}
}

// opTimeout bounds one request's work against the stores.
const opTimeout = 5 * time.Second

// awaitListening reports whether the control channels are subscribed,
// waiting up to listenWait at start-up; once they are, it costs no timer.
func (g *gateway) awaitListening() bool {
	select {
	case <-g.listening:
		return true
	default:
	}
	t := time.NewTimer(listenWait)
	defer t.Stop()
	select {
	case <-g.listening:
		return true
	case <-t.C:
		return false
	}
}

// run serves the gateway's background work until ctx ends, then waits for
// the connections (closed by the server's drain) to record their closes.
func (g *gateway) run(ctx context.Context) error {
	sub := controlSub{g: g}
	for n := 0; n < g.cfg.Shards; n++ {
		topic := g.mod.keys.shard(n).control
		if err := g.mod.hub.Subscribe(ctx, topic, sub); err != nil {
			return err
		}
		defer g.mod.hub.Unsubscribe(topic, sub)
	}
	// The lease before the first connection: a session recorded under a
	// gateway without a lease would never be reaped.
	l := &lease{g: g, ttl: g.cfg.GatewayLease}
	if err := l.register(ctx); err != nil {
		return err
	}
	g.mod.st.gateway = g.mod.id
	leaseDone := make(chan struct{})
	go func() { defer close(leaseDone); l.run(ctx) }()
	defer func() { <-leaseDone }()
	close(g.listening)
	count := g.countSessions
	g.m.sessions.count.Store(&count)
	go g.idle.run(ctx)
	go g.f.runRefresher(ctx)
	pingsDone := make(chan struct{})
	go func() { defer close(pingsDone); g.pings.run(ctx) }()
	defer func() { <-pingsDone }()
	g.runBehind(ctx)
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		close(g.jobs)
		g.workers.Wait()
	case <-time.After(5 * time.Second):
		g.mod.log.Warn("presence: connections still closing at shutdown")
	}
	return nil
}

// countSessions counts the sessions of this process by device state.
func (g *gateway) countSessions() (active, inactive int) {
	now := time.Now().UnixNano()
	g.f.mu.Lock()
	users := make([]*localUser, 0, len(g.f.users))
	for _, lu := range g.f.users {
		users = append(users, lu)
	}
	g.f.mu.Unlock()
	for _, lu := range users {
		for _, c := range lu.clientList() {
			switch {
			case c.ended.Load():
			case c.deviceActive(now):
				active++
			default:
				inactive++
			}
		}
	}
	return active, inactive
}

// serve reads one connection's requests in order and, on a close without
// session:disconnect, starts the grace period. The socket calls back as
// frames arrive (no goroutine waits on an idle connection); a worker
// handles each request while the callback waits, so requests keep their
// order and a burst runs on the bounded pool of workers.
func (c *client) serve() {
	g := c.g
	g.m.connections.Inc()
	c.conn.Serve(c.dispatch, func() {
		c.dispatch(nil)
		g.m.connections.Dec()
		g.wg.Done()
	})
}

// dispatch has a worker handle msg (nil: the end of the connection) and
// waits for it, so a connection's requests keep their order.
func (c *client) dispatch(msg []byte) {
	c.busy.Add(1)
	c.g.jobs <- job{c: c, msg: msg}
	c.busy.Wait()
}

// open registers the session, its deadline and rooms, attaches the
// connection to its user here and sends the initial snapshot. pre is what
// the upgrade's check read of subscribe (nil: nothing kept).
func (c *client) open(subscribe []string, pre *visibilityRead) bool {
	g := c.g
	// Not derived from the connection's context: a child would leave a
	// children map behind in every connection's context.
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	now := time.Now().UnixNano()
	c.lastAct.Store(now)
	var leftRooms []string
	news := g.subsNews.Load()
	res, change, refused, err := c.openStep(ctx, subscribe)
	if errors.Is(err, errTooManySessions) {
		c.closeWithError(wire.CodeLimitExceeded, "too many sessions for this user; close another device or tab", "", socket.ClosePolicy, "too many sessions")
		return false
	}
	if err == nil {
		g.mod.changed(ctx, res)
		// Without a deadline, a crash of this gateway would leave the
		// session online forever: no deadline, no session.
		err = g.mod.st.pingOpened(ctx, c.sid, c.user, change)
		if err == nil && g.cfg.Policy == config.PresencePolicyContacts {
			leftRooms, err = g.mod.st.setRooms(ctx, c.user, c.rooms)
		}
		if err != nil {
			if closed, cerr := g.mod.st.step(ctx, c.user, "close", c.sid); cerr == nil {
				g.mod.changed(ctx, closed)
			}
		}
	}
	if err != nil {
		g.mod.log.Warn("presence: open session", "err", err)
		c.closeWithError(wire.CodeUnavailable, "presence is unavailable; reconnect later", "", 1013, "try again later")
		return false
	}
	c.armIdle(res.IdleIn)

	c.holdChanges()
	c.lu = g.f.attach(c)
	c.lu.changeMu.Lock()
	defer c.lu.changeMu.Unlock()
	if !c.lu.hydrated {
		// Subscriptions outlive a connection while the user stays online
		// (a reload within the grace period): follow them again here. The
		// open read them; a change made elsewhere since was announced,
		// and one announced before the attach above found no one here to
		// tell, so then they are read again.
		ids := res.Following
		var err error
		if g.subsNews.Load() != news {
			ids, err = g.mod.st.subscriptions(ctx, c.user)
		}
		if err == nil {
			var hidden []string
			_, hidden, err = g.f.setFollowing(ctx, c.lu, ids, pre)
			g.withdraw(ctx, c.lu, hidden)
		}
		if err != nil {
			g.mod.log.Warn("presence: restore subscriptions", "err", err)
		} else {
			c.lu.hydrated = true
		}
		c.announce(ctx, change)
	} else if err := c.applyChange(ctx, change, pre); err != nil {
		g.mod.log.Warn("presence: follow the subscriptions named at connect", "err", err)
	}
	if len(leftRooms) > 0 {
		// This token dropped rooms: what they made visible is withdrawn,
		// from this user (before the snapshot) and from their followers.
		g.revalidateLocked(ctx, c.lu, c.rooms)
		go g.mod.recheckFollowers(c.user)
	}
	c.sendSubjects(c.lu.followed(), "", true)
	c.releaseChanges()
	if refused != nil {
		// The session is open with the subscriptions it had.
		c.sendError(wire.CodeLimitExceeded, refused.msg, "", refused.users)
	}
	return true
}

// openStep runs the open's script, setting the subscriptions the
// connection named when there are any. refused is a set the script
// refused: the session opened regardless, with the subscriptions it had.
func (c *client) openStep(ctx context.Context, subscribe []string) (res stepResult, change subChange, refused *limitError, err error) {
	if subscribe == nil {
		res, err = c.g.mod.st.step(ctx, c.user, "open", c.sid)
		return res, subChange{}, nil, err
	}
	res, change, err = c.g.mod.st.openSubscribing(ctx, c.user, c.sid, subscribe)
	if errors.As(err, &refused) {
		err = nil
	}
	return res, change, refused, err
}

// finish runs when the socket is gone. Unless the session was ended, it
// lingers for the grace period: its last sign of life is a "closed" ping
// whose deadline is the grace, so a reconnect within it never shows offline.
func (c *client) finish() {
	g := c.g
	c.markClosed()
	c.stopIdle()
	g.f.detach(c)
	if c.ended.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := g.pings.closed(ctx, c); err != nil {
		// The session still expires at its TTL.
		g.mod.log.Warn("presence: record close", "err", err)
	}
}

// onIdle recomputes the user's status when they may have turned idle.
func (c *client) onIdle() {
	if c.ended.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := c.g.mod.st.step(ctx, c.user, "recompute", c.sid)
	if err != nil {
		c.g.mod.log.Warn("presence: idle check", "err", err)
		c.armIdle(time.Minute)
		return
	}
	c.g.mod.changed(ctx, res)
	c.armIdle(res.IdleIn)
}

func (c *client) sendError(code, msg, correlationID string, users []string) {
	c.g.m.protocolErrs.WithLabelValues(code).Inc()
	c.conn.Send(wire.EventFrame(EventError, ErrorPayload{Code: code, Message: msg, Users: users}, correlationID))
}

// closeWithError sends an error event, then closes once it is written.
func (c *client) closeWithError(code, msg, correlationID string, closeCode int, reason string) {
	c.g.m.protocolErrs.WithLabelValues(code).Inc()
	c.conn.SendAndClose(wire.EventFrame(EventError, ErrorPayload{Code: code, Message: msg}, correlationID), closeCode, reason)
}

// endSession answers a request on a session that is over and closes: the
// user is offline, and only a new connection brings them back.
func (c *client) endSession(correlationID string) {
	c.ended.Store(true)
	c.stopIdle()
	c.closeWithError(CodeInvalidTransition, "this session has ended (the user is offline); only a new connection comes back online",
		correlationID, CloseSessionEnded, "session ended")
}
