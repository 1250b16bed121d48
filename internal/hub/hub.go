// Package hub fans Redis pub/sub messages out to local subscribers.
//
// Each topic costs one upstream Redis subscription per process however many
// local subscribers it has: the first local subscriber subscribes, the last
// one to leave unsubscribes. On a Redis Cluster topics use sharded pub/sub
// (SSUBSCRIBE/SPUBLISH), so a message travels only to the node owning its
// slot; topics built with store.Keyspace carry their entity's hash tag.
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
	"time"

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
	// pendingConfirm counts subscribe commands sent per channel whose
	// confirmation has not arrived. A confirmation that arrives when none is
	// pending comes from go-redis re-subscribing after a reconnect.
	pendingConfirm map[string]int
	single         *upstream         // single node: one connection for all topics
	slots          map[int]*upstream // cluster: one connection per slot in use
	closed         bool
	wg             sync.WaitGroup
}

type topic struct {
	name    string
	slot    int
	ready   chan struct{} // closed once Redis confirmed the subscription
	isReady bool          // guarded by Hub.mu

	mu      sync.Mutex
	members map[Subscriber]struct{}
	// snap is the member list dispatch iterates without locks; nil after a
	// change, rebuilt by the next message. Joins and leaves stay O(1) even
	// for a topic with a hundred thousand local subscribers.
	snap atomic.Pointer[[]Subscriber]
}

type upstream struct {
	ps     *redis.PubSub
	slot   int
	topics int
}

// New returns a hub over rdb. Metrics are registered with reg.
func New(rdb redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger) (*Hub, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	h := &Hub{
		rdb:            rdb,
		log:            log,
		m:              m,
		topics:         map[string]*topic{},
		pendingConfirm: map[string]int{},
		slots:          map[int]*upstream{},
	}
	h.cluster, _ = rdb.(*redis.ClusterClient)
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

// Subscribe adds sub to topic and returns once Redis has confirmed the
// upstream subscription, so nothing published afterwards is missed.
func (h *Hub) Subscribe(ctx context.Context, name string, sub Subscriber) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	t := h.topics[name]
	if t == nil {
		t = &topic{name: name, ready: make(chan struct{}), members: map[Subscriber]struct{}{}}
		h.subscribeUpstream(ctx, t)
		h.topics[name] = t
		h.m.topics.Inc()
	}
	if t.add(sub) {
		h.m.localSubs.Inc()
	}
	ready := t.ready
	h.mu.Unlock()

	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		h.Unsubscribe(name, sub)
		return fmt.Errorf("hub: subscribe %s: not confirmed: %w", name, ctx.Err())
	}
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
	var ups []*upstream
	if h.single != nil {
		ups = append(ups, h.single)
	}
	for _, u := range h.slots {
		ups = append(ups, u)
	}
	h.mu.Unlock()
	var errs []error
	for _, u := range ups {
		errs = append(errs, u.ps.Close())
	}
	h.wg.Wait()
	return errors.Join(errs...)
}

// subscribeUpstream sends the subscribe command; h.mu is held so commands
// for one channel reach Redis in the order decided here. A failed write is
// not final: go-redis tracks the channel and subscribes it again when its
// reader reconnects, and Subscribe waits for that confirmation.
func (h *Hub) subscribeUpstream(ctx context.Context, t *topic) {
	h.pendingConfirm[t.name]++
	var u *upstream
	var err error
	if h.cluster == nil {
		if h.single == nil {
			h.single = &upstream{ps: h.rdb.Subscribe(ctx), slot: -1}
			defer h.startReader(h.single)
		}
		u = h.single
		err = u.ps.Subscribe(ctx, t.name)
	} else {
		t.slot = keySlot(t.name)
		if u = h.slots[t.slot]; u == nil {
			// A connection per slot: go-redis re-subscribes all channels of a
			// connection in one command after a reconnect, which Redis refuses
			// when they span slots. The connection goes to the node owning
			// the slot of its first channel, so it is made by the subscribe
			// below, never by the reader started after it.
			u = &upstream{ps: h.cluster.SSubscribe(ctx), slot: t.slot}
			h.slots[t.slot] = u
			defer h.startReader(u)
		}
		err = u.ps.SSubscribe(ctx, t.name)
	}
	u.topics++
	h.m.upstreamOps.WithLabelValues("subscribe").Inc()
	if err != nil {
		h.m.upstreamErrors.Inc()
		h.log.Warn("hub: subscribe failed; retrying on reconnect", "err", err)
	}
}

func (h *Hub) unsubscribeUpstream(t *topic) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var err error
	if h.cluster == nil {
		err = h.single.ps.Unsubscribe(ctx, t.name)
	} else if u := h.slots[t.slot]; u != nil {
		err = u.ps.SUnsubscribe(ctx, t.name)
	}
	if err != nil {
		// The connection is broken; go-redis re-subscribes only the channels
		// it still tracks, and this one is already removed from them.
		h.m.upstreamErrors.Inc()
		h.log.Debug("hub: unsubscribe", "err", err)
	}
	h.m.upstreamOps.WithLabelValues("unsubscribe").Inc()
	h.releaseUpstream(t)
}

// releaseUpstream drops a cluster slot connection when its last topic left.
func (h *Hub) releaseUpstream(t *topic) {
	if h.cluster == nil {
		if h.single != nil {
			h.single.topics--
		}
		return
	}
	u := h.slots[t.slot]
	if u == nil {
		return
	}
	u.topics--
	if u.topics <= 0 {
		delete(h.slots, t.slot)
		for name := range h.pendingConfirm {
			if keySlot(name) == t.slot {
				delete(h.pendingConfirm, name)
			}
		}
		_ = u.ps.Close()
	}
}

func (h *Hub) startReader(u *upstream) {
	ch := u.ps.ChannelWithSubscriptions(redis.WithChannelSize(4096))
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for msg := range ch {
			switch m := msg.(type) {
			case *redis.Message:
				h.deliver(m.Channel, []byte(m.Payload))
			case *redis.Subscription:
				if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
					h.confirmed(m.Channel)
				}
			}
		}
	}()
}

// confirmed handles a subscribe confirmation from Redis.
func (h *Hub) confirmed(name string) {
	h.mu.Lock()
	resync := false
	if n := h.pendingConfirm[name]; n > 0 {
		if n == 1 {
			delete(h.pendingConfirm, name)
		} else {
			h.pendingConfirm[name] = n - 1
		}
	} else {
		resync = true
	}
	t := h.topics[name]
	if t != nil && !t.isReady && h.pendingConfirm[name] == 0 {
		t.isReady = true
		close(t.ready)
		resync = false
	}
	h.mu.Unlock()
	if resync && t != nil {
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
