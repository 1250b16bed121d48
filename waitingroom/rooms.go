package waitingroom

import (
	"context"
	"encoding/json"
	"errors"
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
// places of all its sockets in batches every position_interval (which
// also refreshes their heartbeats), and one upstream subscription per
// event tells it at once whom a tick admitted.
type rooms struct {
	m   *Module
	mu  sync.Mutex
	all map[string]*room
}

type room struct {
	rs    *rooms
	event string
	topic string

	mu      sync.Mutex
	waiters map[string][]*waiter
	pending map[string]struct{}
	wake    chan struct{}
	quit    chan struct{}
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
		full := len(r.waiters[w.user]) >= limit
		r.mu.Unlock()
		if full {
			rs.mu.Unlock()
			return nil
		}
	}
	r := rs.all[event]
	if r == nil {
		r = &room{
			rs: rs, event: event, topic: keysOf(rs.m.line.keys, event).topic,
			waiters: map[string][]*waiter{}, pending: map[string]struct{}{},
			wake: make(chan struct{}, 1), quit: make(chan struct{}),
		}
		rs.all[event] = r
		go r.run()
	}
	r.mu.Lock()
	r.waiters[w.user] = append(r.waiters[w.user], w)
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
	list := r.waiters[w.user]
	for i, x := range list {
		if x == w {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(r.waiters, w.user)
	} else {
		r.waiters[w.user] = list
	}
	empty := len(r.waiters) == 0
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
		for u := range r.waiters {
			r.pending[u] = struct{}{}
		}
	} else {
		var am admittedMessage
		if json.Unmarshal(msg.Payload, &am) == nil {
			for _, u := range am.Admitted {
				if _, ok := r.waiters[u]; ok {
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
	t := time.NewTicker(m.cfg.PositionInterval)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
			if !subscribed {
				subscribed = r.subscribe()
			}
			r.refresh(true)
		case <-r.wake:
			r.refresh(false)
		}
	}
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

// refresh re-reads the places of every socket (all) or of those marked by
// an admission, and tells each what changed.
func (r *room) refresh(all bool) {
	m := r.rs.m
	r.mu.Lock()
	users := make([]string, 0, len(r.pending))
	if all {
		for u := range r.waiters {
			users = append(users, u)
		}
	} else {
		for u := range r.pending {
			if _, ok := r.waiters[u]; ok {
				users = append(users, u)
			}
		}
	}
	clear(r.pending)
	r.mu.Unlock()
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
			r.tell(u, room, places[i], all)
		}
	}
}

func (r *room) each(user string, f func(*waiter)) {
	r.mu.Lock()
	ws := append([]*waiter(nil), r.waiters[user]...)
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
