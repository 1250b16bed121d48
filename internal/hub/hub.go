// Package hub fans Redis pub/sub messages out to local subscribers.
//
// Each topic costs one upstream Redis subscription per process however many
// local subscribers it has: the first local subscriber subscribes, the last
// one to leave unsubscribes. On a Redis Cluster topics use sharded pub/sub
// (SSUBSCRIBE/SPUBLISH), so a message travels only to the node owning its
// slot; topics built with store.Keyspace carry their entity's hash tag, and
// a process holds one pub/sub connection per node, whatever the topics.
//
// Delivery never waits for a subscriber: Deliver must not block, and Queue,
// the bounded per-connection mailbox, evicts a client that lets it fill.
package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Message is one payload published on a topic. Payload is shared by every
// subscriber of the topic and must not be modified.
type Message struct {
	Topic   string
	Payload []byte
	// Resync is set, with no payload, when the upstream subscription was
	// re-established after a Redis outage: messages may have been missed, so
	// subscribers should refetch the state they mirror.
	Resync bool
}

// Subscriber receives the messages of the topics it joined. The hub calls
// Deliver from its dispatch goroutine; it must return at once.
type Subscriber interface {
	Deliver(Message)
}

// ErrClosed is returned by calls on a closed hub.
var ErrClosed = errors.New("hub: closed")

// Hub multiplexes topics over as few Redis subscriptions as possible.
type Hub struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient
	log     *slog.Logger
	m       *metrics

	mu     sync.RWMutex
	topics map[string]*topic
	single *upstream            // single node: one connection for all topics
	nodes  map[string]*upstream // cluster: one connection per node, by address
	// unrouted holds topics whose connection failed or whose node
	// could not be found; the repair loop subscribes them again.
	unrouted map[string]*topic
	repair   chan struct{}
	stop     chan struct{}
	closed   bool
	wg       sync.WaitGroup
}

type topic struct {
	name    string
	up      *upstream     // guarded by Hub.mu; nil while unrouted
	ready   chan struct{} // closed once Redis confirmed the subscription
	isReady bool          // guarded by Hub.mu
	// resync is set when the subscription is being re-established after its
	// connection failed: the confirmation tells subscribers to refetch.
	resync bool // guarded by Hub.mu

	mu      sync.Mutex
	members map[Subscriber]struct{}
	// snap is the member list dispatch iterates without locks; nil after a
	// change, rebuilt by the next message. Joins and leaves stay O(1) even
	// for a topic with a hundred thousand local subscribers.
	snap atomic.Pointer[[]Subscriber]
}

// New returns a hub over rdb. Metrics are registered with reg.
func New(rdb redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger) (*Hub, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	h := &Hub{
		rdb:      rdb,
		log:      log,
		m:        m,
		topics:   map[string]*topic{},
		nodes:    map[string]*upstream{},
		unrouted: map[string]*topic{},
		repair:   make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	h.cluster, _ = rdb.(*redis.ClusterClient)
	h.wg.Add(1)
	go h.repairLoop()
	return h, nil
}

// Publish sends payload to every process subscribed to topic.
func (h *Hub) Publish(ctx context.Context, topic string, payload []byte) error {
	var err error
	if h.cluster != nil {
		err = h.cluster.SPublish(ctx, topic, payload).Err()
	} else {
		err = h.rdb.Publish(ctx, topic, payload).Err()
	}
	if err != nil {
		return fmt.Errorf("hub: publish: %w", err)
	}
	return nil
}

// Outgoing is a payload to publish to a topic.
type Outgoing struct {
	Topic   string
	Payload []byte
}

// PublishMany sends each payload to its topic in one round trip (one per
// node on a cluster) instead of one each: a message to each of thousands
// of users' control channels leaves at once. Every message is sent; the
// first error is returned.
func (h *Hub) PublishMany(ctx context.Context, msgs []Outgoing) error {
	if len(msgs) == 0 {
		return nil
	}
	cmds, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, m := range msgs {
			if h.cluster != nil {
				p.SPublish(ctx, m.Topic, m.Payload)
			} else {
				p.Publish(ctx, m.Topic, m.Payload)
			}
		}
		return nil
	})
	if err == nil {
		for _, c := range cmds {
			if err = c.Err(); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("hub: publish %d messages: %w", len(msgs), err)
	}
	return nil
}

// PublishCommand is the command a Lua script must publish to the hub's
// topics with: SPUBLISH on a cluster, where the hub listens with sharded
// pub/sub, PUBLISH otherwise. Scripts that change state and announce it in
// one step take it from here, so they always match the subscriptions.
func (h *Hub) PublishCommand() string {
	if h.cluster != nil {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// Subscribe adds sub to topic and returns once Redis has confirmed the
// upstream subscription, so nothing published afterwards is missed.
func (h *Hub) Subscribe(ctx context.Context, name string, sub Subscriber) error {
	return h.SubscribeMany(ctx, []Subscription{{Topic: name, Sub: sub}})[0]
}

// Subscription is one subscriber joining one topic.
type Subscription struct {
	Topic string
	Sub   Subscriber
}

// SubscribeMany adds each subscriber to its topic and returns once Redis
// has confirmed every new upstream subscription, with one error per
// request (nil: joined). The new topics go to Redis in one command, and
// with those of other calls made while a command is being written: a burst
// of connections opening together costs a few commands, not one per topic.
// A request not confirmed when ctx ends is taken back.
func (h *Hub) SubscribeMany(ctx context.Context, reqs []Subscription) []error {
	errs := make([]error, len(reqs))
	readies := make([]chan struct{}, len(reqs))
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		for i := range errs {
			errs[i] = ErrClosed
		}
		return errs
	}
	var fresh []*topic
	for i, r := range reqs {
		t := h.topics[r.Topic]
		if t == nil {
			t = &topic{name: r.Topic, ready: make(chan struct{}), members: map[Subscriber]struct{}{}}
			h.topics[r.Topic] = t
			h.m.topics.Inc()
			fresh = append(fresh, t)
		}
		if t.add(r.Sub) {
			h.m.localSubs.Inc()
		}
		readies[i] = t.ready
	}
	h.subscribeUpstream(fresh)
	h.mu.Unlock()

	for i, r := range reqs {
		select {
		case <-readies[i]:
		case <-ctx.Done():
			h.Unsubscribe(r.Topic, r.Sub)
			errs[i] = fmt.Errorf("hub: subscribe %s: not confirmed: %w", r.Topic, ctx.Err())
		}
	}
	return errs
}

// Unsubscribe removes sub from topic; the last subscriber leaving releases
// the upstream subscription.
func (h *Hub) Unsubscribe(name string, sub Subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[name]
	if t == nil || !t.remove(sub) {
		return
	}
	h.m.localSubs.Dec()
	if t.size() > 0 {
		return
	}
	delete(h.topics, name)
	h.m.topics.Dec()
	if !h.closed {
		h.unsubscribeUpstream(t)
	}
}

// Topics is the number of topics with local subscribers, which is also the
// number of upstream subscriptions.
func (h *Hub) Topics() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.topics)
}

// Subscribers is the number of local subscribers of topic.
func (h *Hub) Subscribers(name string) int {
	h.mu.RLock()
	t := h.topics[name]
	h.mu.RUnlock()
	if t == nil {
		return 0
	}
	return t.size()
}

// Close releases every upstream subscription. Subscribers are not told;
// their owners close them during shutdown.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.stop)
	ups := make([]*upstream, 0, len(h.nodes)+1)
	if h.single != nil {
		ups = append(ups, h.single)
	}
	for _, u := range h.nodes {
		ups = append(ups, u)
	}
	for _, u := range ups {
		u.dead = true
	}
	h.mu.Unlock()
	var errs []error
	for _, u := range ups {
		errs = append(errs, u.ps.Close())
	}
	h.wg.Wait()
	return errors.Join(errs...)
}

// confirmed handles a subscribe confirmation from Redis on connection u.
func (h *Hub) confirmed(u *upstream, name string) {
	h.mu.Lock()
	resync := false
	if n := u.pending[name]; n > 0 {
		if n == 1 {
			delete(u.pending, name)
		} else {
			u.pending[name] = n - 1
		}
	} else {
		// Nobody asked: go-redis re-subscribed after a reconnect.
		resync = true
	}
	t := h.topics[name]
	if t == nil || t.up != u || u.pending[name] > 0 {
		h.mu.Unlock()
		return
	}
	if !t.isReady {
		t.isReady = true
		close(t.ready)
		resync = false
	}
	if t.resync {
		t.resync = false
		resync = true
	}
	h.mu.Unlock()
	if resync {
		h.m.resyncs.Inc()
		h.fanout(t, Message{Topic: name, Resync: true})
	}
}

func (h *Hub) deliver(name string, payload []byte) {
	h.mu.RLock()
	t := h.topics[name]
	h.mu.RUnlock()
	h.m.received.Inc()
	if t == nil {
		return
	}
	h.fanout(t, Message{Topic: name, Payload: payload})
}

func (h *Hub) fanout(t *topic, m Message) {
	subs := t.snapshot()
	for _, s := range subs {
		s.Deliver(m)
	}
	h.m.deliveries.Add(float64(len(subs)))
}

// add returns false if sub was already subscribed.
func (t *topic) add(sub Subscriber) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.members[sub]; ok {
		return false
	}
	t.members[sub] = struct{}{}
	t.snap.Store(nil)
	return true
}

// remove returns false if sub was not subscribed.
func (t *topic) remove(sub Subscriber) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.members[sub]; !ok {
		return false
	}
	delete(t.members, sub)
	t.snap.Store(nil)
	return true
}

func (t *topic) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.members)
}

func (t *topic) snapshot() []Subscriber {
	if p := t.snap.Load(); p != nil {
		return *p
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.snap.Load(); p != nil {
		return *p
	}
	subs := make([]Subscriber, 0, len(t.members))
	for s := range t.members {
		subs = append(subs, s)
	}
	t.snap.Store(&subs)
	return subs
}
