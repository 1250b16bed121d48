package waitingroom

import (
	"context"
	"encoding/json"
	"errors"
	"hash/maphash"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// pubsub is the pub/sub the admit plane hears admissions on and the workers
// announce them with; *hub.pubsub satisfies it.
type pubsub interface {
	publisher
	Subscribe(ctx context.Context, topic string, sub hub.Subscriber) error
	Unsubscribe(topic string, sub hub.Subscriber)
}

// placesChunk bounds the users of one positions script call, so one call
// never holds Redis for long.
const placesChunk = 500

// rooms are the waiting-room sockets of this process, one room per event.
// A room needs no goroutine per socket: one loop per event re-reads the
// places of its sockets every position_interval (which also refreshes
// their heartbeats), and one upstream subscription per event tells it at
// once whom a tick admitted.
//
// The re-read is spread over the interval: a user's sockets sit in one of
// the room's slots (by a hash of the user), slot i comes due i sweepSteps
// into each interval, and the loop reads the due slots about sweepShare
// users at a time. Read all at once, 10,000 sockets cost Redis about 50 ms
// of scripts and the process 10,000 frames in one burst every 5 s, and
// the joins that arrived meanwhile waited behind it: that burst was most
// of the join p99.
type rooms struct {
	m   *Module
	mu  sync.Mutex
	all map[string]*room
}

type room struct {
	rs    *rooms
	event string
	topic string

	mu sync.Mutex
	// slots hold the room's sockets by user, each user in the slot its
	// hash picks; users counts the users of all slots.
	slots   []map[string][]*waiter
	seed    maphash.Seed
	users   int
	pending map[string]struct{}
	wake    chan struct{}
	quit    chan struct{}
}

// sweepStep is the time between two slots' turns: a large room reads one
// slot per step, a smaller one several at a time (sweepClock).
const sweepStep = 50 * time.Millisecond

// sweepSlots is how many slots one position interval is read in: one per
// sweepStep, at most 200 (a slot of a million sockets is still 5,000).
func sweepSlots(interval time.Duration) int {
	return int(min(max(interval/sweepStep, 1), 200))
}

func newRoom(rs *rooms, event string) *room {
	r := &room{
		rs: rs, event: event, topic: keysOf(rs.m.line.keys, event).topic,
		slots: make([]map[string][]*waiter, sweepSlots(rs.m.cfg.PositionInterval)),
		seed:  maphash.MakeSeed(), pending: map[string]struct{}{},
		wake: make(chan struct{}, 1), quit: make(chan struct{}),
	}
	for i := range r.slots {
		r.slots[i] = map[string][]*waiter{}
	}
	return r
}

// slotOf is the slot user's sockets are in. The caller holds r.mu.
func (r *room) slotOf(user string) map[string][]*waiter {
	return r.slots[maphash.String(r.seed, user)%uint64(len(r.slots))]
}

// waiter is one socket in line. lastRank and lastSent are touched only by
// the room's loop.
type waiter struct {
	conn     *socket.Conn
	user     string
	lastRank int64
	lastSent time.Time
}

func newRooms(m *Module) *rooms {
	return &rooms{m: m, all: map[string]*room{}}
}

// attach adds w to its event's room, starting the room when it is the
// first socket of the event on this process.
// attach adds w to its event's room, unless its user already has limit
// sockets there (then nil).
func (rs *rooms) attach(event string, w *waiter, limit int) *room {
	rs.mu.Lock()
	if r := rs.all[event]; r != nil {
		r.mu.Lock()
		full := len(r.slotOf(w.user)[w.user]) >= limit
		r.mu.Unlock()
		if full {
			rs.mu.Unlock()
			return nil
		}
	}
	r := rs.all[event]
	if r == nil {
		r = newRoom(rs, event)
		rs.all[event] = r
		go r.run()
	}
	r.mu.Lock()
	slot := r.slotOf(w.user)
	if len(slot[w.user]) == 0 {
		r.users++
	}
	slot[w.user] = append(slot[w.user], w)
	// Check at once: an admission may have been announced before the room
	// was subscribed.
	r.pending[w.user] = struct{}{}
	r.mu.Unlock()
	rs.mu.Unlock()
	rs.m.metrics.sockets.Inc()
	r.signal()
	return r
}

// detach removes w; the last socket of a room stops it.
func (rs *rooms) detach(r *room, w *waiter) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r.mu.Lock()
	slot := r.slotOf(w.user)
	list := slot[w.user]
	for i, x := range list {
		if x == w {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		if _, ok := slot[w.user]; ok {
			delete(slot, w.user)
			r.users--
		}
	} else {
		slot[w.user] = list
	}
	empty := r.users == 0
	r.mu.Unlock()
	rs.m.metrics.sockets.Dec()
	if empty && rs.all[r.event] == r {
		delete(rs.all, r.event)
		close(r.quit)
	}
}

func (r *room) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Deliver is called by the hub with the users a tick admitted. It only
// marks them; the room's loop answers them.
func (r *room) Deliver(msg hub.Message) {
	r.mu.Lock()
	if msg.Resync {
		for _, slot := range r.slots {
			for u := range slot {
				r.pending[u] = struct{}{}
			}
		}
	} else {
		var am admittedMessage
		if json.Unmarshal(msg.Payload, &am) == nil {
			for _, u := range am.Admitted {
				if _, ok := r.slotOf(u)[u]; ok {
					r.pending[u] = struct{}{}
				}
			}
		}
	}
	r.mu.Unlock()
	r.signal()
}

func (r *room) run() {
	m := r.rs.m
	subscribed := r.subscribe()
	defer func() {
		if subscribed {
			m.hub.Unsubscribe(r.topic, r)
		}
	}()
	n := len(r.slots)
	c := newSweepClock(m.cfg.PositionInterval, n, time.Now(), r.userCount())
	t := time.NewTimer(time.Until(c.next))
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
			from, to := c.tick(time.Now())
			if !subscribed && from/n != to/n { // once an interval
				subscribed = r.subscribe()
			}
			r.readPlaces(r.slotUsers(from, to), true)
			c.schedule(time.Now(), r.userCount())
			t.Reset(time.Until(c.next))
		case <-r.wake:
			r.refreshPending()
			if c.grew(r.userCount()) {
				t.Reset(max(time.Until(c.next), 0))
			}
		}
	}
}

func (r *room) userCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.users
}

// sweepShare is about how many users a room's sweep reads at a time.
const sweepShare = 100

// sweepClock schedules a room's reads of its due slots: slot i comes due
// i steps into each interval, and a read takes every slot due since the
// last read, so each user is read once an interval however often the
// room reads. It reads about sweepShare users at a time, at most once a
// step: a room of a few sockets wakes once an interval, not twenty times
// a second.
type sweepClock struct {
	interval, step time.Duration
	slots          int
	start, last    time.Time
	next           time.Time     // the next read
	period         time.Duration // between reads, for the room's size
	done           int           // slots read since start
}

func newSweepClock(interval time.Duration, slots int, now time.Time, users int) *sweepClock {
	c := &sweepClock{interval: interval, step: interval / time.Duration(slots), slots: slots, start: now}
	c.schedule(now, users)
	return c
}

// periodFor is the time between reads for a room of users.
func (c *sweepClock) periodFor(users int) time.Duration {
	k := min(max((users+sweepShare-1)/sweepShare, 1), c.slots)
	return c.interval / time.Duration(k)
}

// tick answers the slots to read at now: from to to-1, counted from start.
func (c *sweepClock) tick(now time.Time) (from, to int) {
	from = c.done
	c.done = max(c.done, int(now.Sub(c.start)/c.step))
	return from, c.done
}

// schedule sets the next read a period after a read that ended at now.
func (c *sweepClock) schedule(now time.Time, users int) {
	c.period = c.periodFor(users)
	c.last, c.next = now, now.Add(c.period)
}

// grew reports whether the room's new size brought its next read
// forward: to a (shorter) period after the last read, never later, or a
// room growing steadily would put its read off again and again.
func (c *sweepClock) grew(users int) bool {
	p := c.periodFor(users)
	if p >= c.period {
		return false
	}
	c.period = p
	if at := c.last.Add(p); at.Before(c.next) {
		c.next = at
		return true
	}
	return false
}

func (r *room) subscribe() bool {
	m := r.rs.m
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
	defer cancel()
	if err := m.hub.Subscribe(ctx, r.topic, r); err != nil {
		m.log.Warn("waitingroom: subscribe to admissions; positions are polled meanwhile", "event", r.event, "err", err)
		return false
	}
	return true
}

// slotUsers lists the users of slots from to to-1, counted from the
// loop's start (slot i is i modulo the slots): the next share of the
// position sweep. A range of more than one interval lists each user once.
func (r *room) slotUsers(from, to int) []string {
	n := len(r.slots)
	from = max(from, to-n)
	var users []string
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := from; i < to; i++ {
		for u := range r.slots[i%n] {
			users = append(users, u)
		}
	}
	return users
}

// refreshPending re-reads the places of the sockets marked since the last
// read (new ones, and those an admission named), and tells each what
// changed.
func (r *room) refreshPending() {
	r.mu.Lock()
	users := make([]string, 0, len(r.pending))
	for u := range r.pending {
		if _, ok := r.slotOf(u)[u]; ok {
			users = append(users, u)
		}
	}
	clear(r.pending)
	r.mu.Unlock()
	r.readPlaces(users, false)
}

// readPlaces reads the places of users in chunks and tells each socket
// its news; periodic: a keepalive is due where nothing changed.
func (r *room) readPlaces(users []string, periodic bool) {
	m := r.rs.m
	for start := 0; start < len(users); start += placesChunk {
		chunk := users[start:min(start+placesChunk, len(users))]
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
		room, places, err := m.line.Places(ctx, r.event, chunk)
		cancel()
		if errors.Is(err, errNoRoom) {
			frame := wire.ErrorFrame(CodeNoRoom, "this event has no waiting room any more", "")
			for _, u := range chunk {
				r.each(u, func(w *waiter) { w.conn.SendAndClose(frame, websocket.CloseNormalClosure, CodeNoRoom) })
			}
			continue
		}
		if err != nil {
			// Fail closed: no news is sent, nobody is told they are in. The
			// other chunks still go, so their heartbeats stay fresh.
			m.metrics.storeErrors.WithLabelValues("positions").Inc()
			m.log.Warn("waitingroom: read positions", "event", r.event, "err", err)
			continue
		}
		for i, u := range chunk {
			r.tell(u, room, places[i], periodic)
		}
	}
}

func (r *room) each(user string, f func(*waiter)) {
	r.mu.Lock()
	ws := append([]*waiter(nil), r.slotOf(user)[user]...)
	r.mu.Unlock()
	for _, w := range ws {
		f(w)
	}
}

// tell sends one user's sockets their news: the pass, the end of their
// place, or their position when it changed or a keepalive is due.
func (r *room) tell(user string, room roomState, p placeInLine, periodic bool) {
	m := r.rs.m
	switch p.State {
	case StateAdmitted:
		frame, err := m.admittedFrame(r.event, user, room, p, "")
		if err != nil {
			m.log.Error("waitingroom: issue pass", "err", err)
			return
		}
		r.each(user, func(w *waiter) { w.conn.SendAndClose(frame, websocket.CloseNormalClosure, "admitted") })
	case StateAbsent:
		frame := wire.ErrorFrame(CodeNotInLine, "you are no longer in line; join again", "")
		r.each(user, func(w *waiter) { w.conn.SendAndClose(frame, websocket.CloseNormalClosure, CodeNotInLine) })
	default:
		ans := m.queuedAnswer(room, p)
		var frame []byte
		keepalive := m.cfg.KeepaliveInterval - m.cfg.PositionInterval/2
		now := time.Now()
		r.each(user, func(w *waiter) {
			if p.Rank == w.lastRank && (!periodic || now.Sub(w.lastSent) < keepalive) {
				return
			}
			if frame == nil {
				frame = wire.EventFrame(EventPosition, ans, "")
			}
			w.conn.Send(frame)
			w.lastRank, w.lastSent = p.Rank, now
		})
	}
}
