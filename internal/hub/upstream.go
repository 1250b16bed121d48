package hub

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// upstream is one Redis pub/sub connection and the topics it carries.
//
// On a single node one connection carries every topic and go-redis
// re-subscribes them after a reconnect. On a cluster there is one connection
// per node, and the hub re-subscribes itself: go-redis would send every
// channel of a connection in one SSUBSCRIBE, which Redis refuses when they
// span slots, and a node may no longer own a slot after a failover.
type upstream struct {
	ps     *redis.PubSub
	addr   string // cluster node address; empty on a single node
	topics map[string]*topic
	// pending counts subscribe commands per channel whose confirmation has
	// not arrived; leaving does the same for unsubscribe commands, so that
	// an unsubscribe nobody sent is known to come from Redis.
	pending map[string]int
	leaving map[string]int
	dead    bool // guarded by Hub.mu; set once the connection is given up
}

func newUpstream(ps *redis.PubSub, addr string) *upstream {
	return &upstream{ps: ps, addr: addr, topics: map[string]*topic{}, pending: map[string]int{}, leaving: map[string]int{}}
}

const (
	// healthInterval is how long a cluster connection may stay silent before
	// it is pinged; a second silent interval declares it dead.
	healthInterval = 15 * time.Second
	// repairInterval bounds how often unrouted topics are retried, so a node
	// that refuses connections is not dialled in a tight loop.
	repairInterval = 250 * time.Millisecond
)

// subscribeUpstream sends the subscribe command; h.mu is held so commands
// for one channel reach Redis in the order decided here. A failed write is
// not final: on a single node go-redis subscribes the channel again when its
// reader reconnects, on a cluster the failed connection's reader hands its
// topics to the repair loop; Subscribe waits for the confirmation either way.
func (h *Hub) subscribeUpstream(ctx context.Context, t *topic) {
	if h.cluster != nil {
		h.route(ctx, t)
		return
	}
	if h.single == nil {
		h.single = newUpstream(h.rdb.Subscribe(ctx), "")
		h.m.connections.Inc()
		defer h.startSingleReader(h.single)
	}
	u := h.single
	u.pending[t.name]++
	u.topics[t.name] = t
	t.up = u
	h.sent("subscribe", u.ps.Subscribe(ctx, t.name))
}

// route subscribes a cluster topic on the connection to its slot's node.
func (h *Hub) route(ctx context.Context, t *topic) {
	node, err := h.cluster.MasterForKey(ctx, t.name)
	if err != nil {
		h.unrouted[t.name] = t
		h.sent("subscribe", err)
		return
	}
	addr := node.Options().Addr
	u := h.nodes[addr]
	if u == nil {
		u = newUpstream(node.SSubscribe(ctx), addr)
		h.nodes[addr] = u
		h.m.connections.Inc()
		h.wg.Add(1)
		go h.readNode(u)
	}
	u.pending[t.name]++
	u.topics[t.name] = t
	t.up = u
	h.sent("subscribe", u.ps.SSubscribe(ctx, t.name))
}

func (h *Hub) unsubscribeUpstream(t *topic) {
	u := t.up
	t.up = nil
	if u == nil {
		delete(h.unrouted, t.name)
		return
	}
	delete(u.topics, t.name)
	if u != h.single && len(u.topics) == 0 {
		// The node's last topic left: closing the connection unsubscribes.
		h.dropNode(u)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if u == h.single {
		h.sent("unsubscribe", u.ps.Unsubscribe(ctx, t.name))
		return
	}
	u.leaving[t.name]++
	h.sent("unsubscribe", u.ps.SUnsubscribe(ctx, t.name))
}

// sent counts a command; a failure is logged, not returned, because the
// reconnect path owns recovery.
func (h *Hub) sent(op string, err error) {
	h.m.upstreamOps.WithLabelValues(op).Inc()
	if err != nil {
		h.m.upstreamErrors.Inc()
		h.log.Debug("hub: upstream command failed; recovered on reconnect", "op", op, "err", err)
	}
}

// dropNode forgets a cluster connection; h.mu is held.
func (h *Hub) dropNode(u *upstream) {
	if u.dead {
		return
	}
	u.dead = true
	if h.nodes[u.addr] == u {
		delete(h.nodes, u.addr)
	}
	h.m.connections.Dec()
	// Closing only wakes the reader, which then exits; never waits on Redis.
	go func() { _ = u.ps.Close() }()
}

func (h *Hub) startSingleReader(u *upstream) {
	ch := u.ps.ChannelWithSubscriptions(redis.WithChannelSize(4096))
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for msg := range ch {
			switch m := msg.(type) {
			case *redis.Message:
				h.deliver(m.Channel, []byte(m.Payload))
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					h.confirmed(u, m.Channel)
				}
			}
		}
	}()
}

// readNode reads one cluster connection until it fails or is closed. Any
// error gives the connection up and re-routes its topics: after a reconnect
// go-redis would re-subscribe them in one cross-slot command, and after a
// failover the node may no longer own them.
func (h *Hub) readNode(u *upstream) {
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
			h.failNode(u, err)
			return
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			h.deliver(m.Channel, []byte(m.Payload))
		case *redis.Subscription:
			switch m.Kind {
			case "ssubscribe":
				h.confirmed(u, m.Channel)
			case "sunsubscribe":
				h.unsubscribed(u, m.Channel)
			}
		}
	}
}

// failNode gives up a broken cluster connection and queues its topics for
// the repair loop.
func (h *Hub) failNode(u *upstream, err error) {
	h.mu.Lock()
	if u.dead {
		h.mu.Unlock()
		return
	}
	for _, t := range u.topics {
		h.unroute(t)
	}
	u.topics = nil
	h.dropNode(u)
	h.mu.Unlock()
	h.m.upstreamErrors.Inc()
	h.log.Warn("hub: redis connection lost; re-subscribing its topics", "node", u.addr, "err", err)
	h.kickRepair()
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

// repairLoop subscribes unrouted cluster topics again, on whichever node
// owns their slot now.
func (h *Hub) repairLoop() {
	defer h.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-h.repair:
		case <-tick.C:
		}
		h.repairOnce()
		select {
		case <-h.stop:
			return
		case <-time.After(repairInterval):
		}
	}
}

func (h *Hub) repairOnce() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.unrouted) == 0 || h.closed {
		return
	}
	// The slot map may be stale after a failover; the reload is lazy, so
	// a topic routed to a dead node now is re-routed on a later pass.
	h.cluster.ReloadState(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	todo := make([]*topic, 0, len(h.unrouted))
	for name, t := range h.unrouted {
		todo = append(todo, t)
		delete(h.unrouted, name)
	}
	for _, t := range todo {
		h.route(ctx, t)
	}
}
