package hub

import (
	"context"
	"errors"
	"net"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"
)

// upstream is one Redis pub/sub connection and the topics it carries: the
// only one on a single node, one per node on a cluster.
//
// The hub re-subscribes by itself and never lets go-redis do it: after a
// reconnect go-redis sends every channel of a connection in one command.
// With tens of thousands of topics that command takes Redis hundreds of
// milliseconds, long enough to time out the next one, and the connection
// never recovers; on a cluster Redis refuses it outright when the channels
// span slots. So a connection that fails once is abandoned, and its topics
// are subscribed again on a new one, in bounded commands.
type upstream struct {
	ps      *redis.PubSub
	addr    string // cluster node address; empty on a single node
	sharded bool
	topics  map[string]*topic
	// pending counts subscribe commands per channel whose confirmation has
	// not arrived; leaving does the same for unsubscribe commands, so that
	// an unsubscribe nobody sent is known to come from Redis.
	pending map[string]int
	leaving map[string]int
	dead    bool // guarded by Hub.mu; set once the connection is abandoned
	// queue holds the commands decided under Hub.mu, in order, for the
	// connection's flusher to write; flushing: a flusher runs.
	queue    []command
	flushing bool
}

// command is one subscribe or unsubscribe of channels, to be written. On
// a cluster its channels share a slot: Redis refuses a sharded command
// whose channels span slots.
type command struct {
	subscribe bool
	slot      int
	names     []string
}

const (
	// healthInterval is how long a connection may stay silent before it is
	// pinged; a second silent interval declares it dead.
	healthInterval = 15 * time.Second
	// writeTimeout bounds one subscribe or unsubscribe command. It is the
	// hub's own, not the caller's, so a caller giving up does not break a
	// connection other topics share.
	writeTimeout = 5 * time.Second
	// repairChunk bounds the channels of one re-subscribe command.
	repairChunk = 500
	// repairMinWait and repairMaxWait bound the pause between repair passes;
	// it doubles while passes keep failing, so a Redis that is down is not
	// dialled in a tight loop.
	repairMinWait = 250 * time.Millisecond
	repairMaxWait = 5 * time.Second
)

func (u *upstream) subscribe(names ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if u.sharded {
		return u.ps.SSubscribe(ctx, names...)
	}
	return u.ps.Subscribe(ctx, names...)
}

func (u *upstream) unsubscribe(names ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if u.sharded {
		return u.ps.SUnsubscribe(ctx, names...)
	}
	return u.ps.Unsubscribe(ctx, names...)
}

// subscribeUpstream subscribes new topics; h.mu is held. SubscribeMany
// waits for each confirmation, which also comes after a failure: the
// repair loop subscribes the topic again.
func (h *Hub) subscribeUpstream(ts []*topic) {
	for _, t := range ts {
		if len(h.unrouted) > 0 {
			// Redis is failing: queue behind the topics being repaired
			// rather than dial from here.
			h.unrouted[t.name] = t
			continue
		}
		u, err := h.target(t.name)
		if err != nil {
			h.unrouted[t.name] = t
			h.sent("subscribe", err)
			h.kickRepair()
			continue
		}
		u.pending[t.name]++
		u.topics[t.name] = t
		t.up = u
		h.enqueue(u, true, t.name)
	}
}

// enqueue adds a command for u's flusher, starting it when none runs;
// h.mu is held, so commands for one channel reach Redis in the order
// decided here. While the flusher writes, later commands wait and leave
// together, merged with their neighbours of the same kind.
func (h *Hub) enqueue(u *upstream, subscribe bool, name string) {
	slot := 0
	if u.sharded {
		slot = keySlot(name)
	}
	if n := len(u.queue); n > 0 && u.queue[n-1].subscribe == subscribe && u.queue[n-1].slot == slot && len(u.queue[n-1].names) < repairChunk {
		u.queue[n-1].names = append(u.queue[n-1].names, name)
	} else {
		u.queue = append(u.queue, command{subscribe: subscribe, slot: slot, names: []string{name}})
	}
	if !u.flushing {
		u.flushing = true
		go h.flushUpstream(u)
	}
}

// flushUpstream writes u's queued commands in order until none is left. A
// failed write abandons the connection; its topics go to the repair loop.
//
// It first yields the processor once: subscribers already runnable (a
// connect burst) queue their topics and leave in its first command instead
// of one command each (10,000 connects following 20 sent 4,503 SUBSCRIBEs,
// now about 300). With nothing else runnable the yield returns at once.
func (h *Hub) flushUpstream(u *upstream) {
	runtime.Gosched()
	for {
		h.mu.Lock()
		if u.dead || len(u.queue) == 0 {
			u.queue = nil
			u.flushing = false
			h.mu.Unlock()
			return
		}
		q := u.queue
		u.queue = nil
		h.mu.Unlock()
		for _, c := range q {
			op := "unsubscribe"
			if c.subscribe {
				op = "subscribe"
			}
			// Counted before the write: Redis may confirm the channels (and
			// a waiting subscriber return) before the write call does.
			h.m.upstreamOps.WithLabelValues(op).Inc()
			var err error
			if c.subscribe {
				err = u.subscribe(c.names...)
			} else {
				err = u.unsubscribe(c.names...)
			}
			if err != nil {
				h.failed(op, err)
				h.mu.Lock()
				h.abandon(u, err)
				u.flushing = false
				h.mu.Unlock()
				return
			}
		}
	}
}

// target is the live connection for a channel, created when missing.
func (h *Hub) target(channel string) (*upstream, error) {
	if h.cluster == nil {
		if h.single == nil {
			h.single = h.open(h.rdb.Subscribe(context.Background()), "", false)
		}
		return h.single, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	node, err := h.cluster.MasterForKey(ctx, channel)
	if err != nil {
		return nil, err
	}
	addr := node.Options().Addr
	u := h.nodes[addr]
	if u == nil {
		u = h.open(node.SSubscribe(ctx), addr, true)
		h.nodes[addr] = u
	}
	return u, nil
}

// open starts reading a new connection; nothing is dialled before its
// first command.
func (h *Hub) open(ps *redis.PubSub, addr string, sharded bool) *upstream {
	u := &upstream{ps: ps, addr: addr, sharded: sharded, topics: map[string]*topic{}, pending: map[string]int{}, leaving: map[string]int{}}
	h.m.connections.Inc()
	h.wg.Add(1)
	go h.read(u)
	return u
}

// attach subscribes topics on u in one command; h.mu is held.
func (h *Hub) attach(u *upstream, ts []*topic) {
	names := make([]string, len(ts))
	for i, t := range ts {
		u.pending[t.name]++
		u.topics[t.name] = t
		t.up = u
		names[i] = t.name
	}
	err := u.subscribe(names...)
	h.sent("subscribe", err)
	if err != nil {
		h.abandon(u, err)
	}
}

func (h *Hub) unsubscribeUpstream(t *topic) {
	u := t.up
	t.up = nil
	if u == nil {
		delete(h.unrouted, t.name)
		return
	}
	delete(u.topics, t.name)
	if u.sharded && len(u.topics) == 0 {
		// The node's last topic left: closing the connection unsubscribes.
		h.drop(u)
		return
	}
	u.leaving[t.name]++
	h.enqueue(u, false, t.name)
}

// sent counts a command and logs a failure; recovery is the repair loop's.
func (h *Hub) sent(op string, err error) {
	h.m.upstreamOps.WithLabelValues(op).Inc()
	if err != nil {
		h.failed(op, err)
	}
}

// failed counts and logs a failed command.
func (h *Hub) failed(op string, err error) {
	h.m.upstreamErrors.Inc()
	h.log.Debug("hub: upstream command failed", "op", op, "err", err)
}

// abandon gives up a failed connection and queues its topics for the
// repair loop; h.mu is held.
func (h *Hub) abandon(u *upstream, err error) {
	if u.dead {
		return
	}
	for _, t := range u.topics {
		h.unroute(t)
	}
	u.topics = nil
	h.drop(u)
	h.m.upstreamErrors.Inc()
	h.log.Warn("hub: redis pub/sub connection lost; re-subscribing its topics", "node", u.addr, "topics", len(h.unrouted), "err", err)
	h.kickRepair()
}

// drop forgets a connection and closes it; h.mu is held.
func (h *Hub) drop(u *upstream) {
	if u.dead {
		return
	}
	u.dead = true
	if h.single == u {
		h.single = nil
	}
	if h.nodes[u.addr] == u {
		delete(h.nodes, u.addr)
	}
	h.m.connections.Dec()
	// Closing only wakes the reader, which then exits; never waits on Redis.
	go func() { _ = u.ps.Close() }()
}

// read reads one connection until it fails or is closed.
func (h *Hub) read(u *upstream) {
	defer h.wg.Done()
	pinged := false
	for {
		msg, err := u.ps.ReceiveTimeout(context.Background(), healthInterval)
		var nerr net.Error
		if err != nil && errors.As(err, &nerr) && nerr.Timeout() && !pinged {
			pinged = true
			err = u.ps.Ping(context.Background())
		}
		if err != nil {
			h.mu.Lock()
			h.abandon(u, err)
			h.mu.Unlock()
			return
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			h.deliver(m.Channel, []byte(m.Payload))
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				h.confirmed(u, m.Channel)
			case "unsubscribe", "sunsubscribe":
				h.unsubscribed(u, m.Channel)
			}
		}
	}
}

// unsubscribed handles an unsubscribe confirmation. One nobody sent means
// Redis dropped the channel because its slot moved to another node.
func (h *Hub) unsubscribed(u *upstream, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := u.leaving[name]; n > 0 {
		if n == 1 {
			delete(u.leaving, name)
		} else {
			u.leaving[name] = n - 1
		}
		return
	}
	t := u.topics[name]
	if t == nil || u.dead {
		return
	}
	delete(u.topics, name)
	h.unroute(t)
	h.kickRepair()
}

// unroute detaches a topic from its connection; h.mu is held.
func (h *Hub) unroute(t *topic) {
	t.up = nil
	t.resync = t.resync || t.isReady
	h.unrouted[t.name] = t
}

func (h *Hub) kickRepair() {
	select {
	case h.repair <- struct{}{}:
	default:
	}
}

// repairLoop subscribes unrouted topics again, on whichever node owns
// their slot now.
func (h *Hub) repairLoop() {
	defer h.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	wait := repairMinWait
	for {
		select {
		case <-h.stop:
			return
		case <-h.repair:
		case <-tick.C:
		}
		if h.repairOnce() {
			wait = repairMinWait
		} else {
			wait = min(2*wait, repairMaxWait)
		}
		select {
		case <-h.stop:
			return
		case <-time.After(wait):
		}
	}
}

// repairOnce re-subscribes the unrouted topics in commands of at most
// repairChunk channels of one slot. A slot without a known node is skipped
// for this pass; a connection that fails ends the pass. It reports whether
// nothing failed.
func (h *Hub) repairOnce() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.unrouted) == 0 || h.closed {
		return true
	}
	if h.cluster != nil {
		// The slot map may be stale after a failover; the reload is lazy,
		// so a topic routed to a dead node now is re-routed on a later pass.
		h.cluster.ReloadState(context.Background())
	}
	groups := map[int][]*topic{}
	for _, t := range h.unrouted {
		slot := 0
		if h.cluster != nil {
			slot = keySlot(t.name)
		}
		groups[slot] = append(groups[slot], t)
	}
	ok := true
	for _, ts := range groups {
		for len(ts) > 0 {
			chunk := ts[:min(len(ts), repairChunk)]
			ts = ts[len(chunk):]
			u, err := h.target(chunk[0].name)
			if err != nil {
				h.sent("subscribe", err)
				ok = false
				break
			}
			for _, t := range chunk {
				delete(h.unrouted, t.name)
			}
			h.attach(u, chunk)
			if u.dead {
				return false // attach failed; its topics are unrouted again
			}
		}
	}
	return ok
}
