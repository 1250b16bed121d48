package viewers

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/wire"
)

// update is one count change, encoded once for every local subscriber.
type update struct {
	res *countResult
	ws  []byte // the count:updated envelope
}

// member is a local subscriber of a hotel's live count.
type member interface {
	push(u *update)
	transport() string
}

// feeds holds the live-count feeds of this process: one per hotel with
// local subscribers, each a single hub subscriber however many sockets
// follow the hotel. A feed pushes every change to its subscribers while
// they are at most push_throttle_above; above that, at most one push per
// push_throttle, carrying the latest count.
type feeds struct {
	hub     *hub.Hub
	keys    keys
	counter *counter
	cfg     config.Viewers
	m       *metrics
	log     *slog.Logger

	mu      sync.Mutex
	byHotel map[string]*feed
}

func newFeeds(h *hub.Hub, k keys, c *counter, cfg config.Viewers, m *metrics, log *slog.Logger) *feeds {
	return &feeds{hub: h, keys: k, counter: c, cfg: cfg, m: m, log: log, byHotel: map[string]*feed{}}
}

type feed struct {
	f     *feeds
	hotel string
	topic string
	ready chan struct{} // closed once the hub subscription is settled
	err   error         // the subscription's outcome

	mu       sync.Mutex
	members  map[member]struct{}
	snap     []member
	latest   *countResult // newest count received
	last     *countResult // last count pushed
	lastPush time.Time
	timer    *time.Timer
}

// join adds mem to hotel's feed, subscribing the process to the hotel on
// first use; it returns once updates will reach mem.
func (f *feeds) join(ctx context.Context, hotel string, mem member) error {
	f.mu.Lock()
	fd := f.byHotel[hotel]
	created := fd == nil
	if created {
		fd = &feed{f: f, hotel: hotel, topic: f.keys.topic(hotel), ready: make(chan struct{}), members: map[member]struct{}{}}
		f.byHotel[hotel] = fd
		f.m.feeds.Set(float64(len(f.byHotel)))
	}
	fd.mu.Lock()
	fd.members[mem] = struct{}{}
	fd.snap = nil
	fd.mu.Unlock()
	f.mu.Unlock()
	if created {
		fd.err = f.hub.Subscribe(ctx, fd.topic, fd)
		close(fd.ready)
	} else {
		select {
		case <-fd.ready:
		case <-ctx.Done():
			f.leave(hotel, mem)
			return ctx.Err()
		}
	}
	if fd.err != nil {
		f.mu.Lock()
		if f.byHotel[hotel] == fd {
			delete(f.byHotel, hotel)
			f.m.feeds.Set(float64(len(f.byHotel)))
		}
		f.mu.Unlock()
		return fmt.Errorf("live count of %s: %w", hotel, fd.err)
	}
	return nil
}

// leave removes mem; the last member to leave releases the subscription.
func (f *feeds) leave(hotel string, mem member) {
	f.mu.Lock()
	fd := f.byHotel[hotel]
	if fd == nil {
		f.mu.Unlock()
		return
	}
	fd.mu.Lock()
	delete(fd.members, mem)
	fd.snap = nil
	empty := len(fd.members) == 0
	if empty && fd.timer != nil {
		fd.timer.Stop()
		fd.timer = nil
	}
	fd.mu.Unlock()
	if empty {
		delete(f.byHotel, hotel)
		f.m.feeds.Set(float64(len(f.byHotel)))
	}
	f.mu.Unlock()
	if empty {
		<-fd.ready
		if fd.err == nil {
			f.hub.Unsubscribe(fd.topic, fd)
		}
	}
}

// hotels lists the hotels with local subscribers.
func (f *feeds) hotels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.byHotel))
	for h := range f.byHotel {
		out = append(out, h)
	}
	return out
}

// subscribers is the number of local subscribers of hotel.
func (f *feeds) subscribers(hotel string) int {
	f.mu.Lock()
	fd := f.byHotel[hotel]
	f.mu.Unlock()
	if fd == nil {
		return 0
	}
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return len(fd.members)
}

// Deliver receives the hotel's published counts from the hub. It runs on
// the hub's dispatch goroutine and never blocks on sockets.
func (fd *feed) Deliver(msg hub.Message) {
	if msg.Resync {
		// Messages may have been missed while Redis was away: recount.
		go func() {
			if res, err := fd.f.counter.recount(fd.hotel); err == nil {
				fd.offer(res)
			}
		}()
		return
	}
	var c Count
	if err := json.Unmarshal(msg.Payload, &c); err != nil || c.Hotel != fd.hotel {
		fd.f.log.Debug("viewers: ignoring a malformed count message", "topic", msg.Topic)
		return
	}
	res := &countResult{hotel: c.Hotel, count: c.Count, asOf: c.AsOf, stale: c.Stale, body: msg.Payload}
	fd.f.counter.observe(res)
	fd.offer(res)
}

// note records a count its subscribers were just sent directly (the
// snapshot on subscribe), so the same count is not pushed again.
func (f *feeds) note(res *countResult) {
	f.mu.Lock()
	fd := f.byHotel[res.hotel]
	f.mu.Unlock()
	if fd == nil || res.stale {
		return
	}
	fd.mu.Lock()
	if fd.latest == nil || res.asOf.After(fd.latest.asOf) {
		fd.latest = res
		if fd.timer == nil {
			fd.last = res
		}
	}
	fd.mu.Unlock()
}

// offer pushes res now, or schedules it when the hotel is throttled.
func (fd *feed) offer(res *countResult) {
	fd.mu.Lock()
	if fd.latest != nil && !res.asOf.After(fd.latest.asOf) {
		fd.mu.Unlock()
		return // older than what we have
	}
	fd.latest = res
	if fd.last != nil && fd.last.count == res.count {
		fd.mu.Unlock()
		return // no change
	}
	if len(fd.members) <= fd.f.cfg.PushThrottleAbove {
		snap := fd.take(res)
		fd.mu.Unlock()
		fd.fanout(snap, res)
		return
	}
	if fd.timer != nil {
		fd.mu.Unlock()
		fd.f.m.pushThrottled.Inc()
		return // the scheduled push will carry the latest count
	}
	wait := time.Until(fd.lastPush.Add(fd.f.cfg.PushThrottle))
	if wait > 0 {
		fd.f.m.pushThrottled.Inc()
	}
	fd.timer = time.AfterFunc(max(wait, 0), fd.pushLatest)
	fd.mu.Unlock()
}

func (fd *feed) pushLatest() {
	fd.mu.Lock()
	fd.timer = nil
	res := fd.latest
	if res == nil || len(fd.members) == 0 || (fd.last != nil && fd.last.count == res.count) {
		fd.mu.Unlock()
		return
	}
	snap := fd.take(res)
	fd.mu.Unlock()
	fd.fanout(snap, res)
}

// take records res as pushed and returns the members to push it to; fd.mu
// is held.
func (fd *feed) take(res *countResult) []member {
	fd.last = res
	fd.lastPush = time.Now()
	if fd.snap == nil {
		fd.snap = make([]member, 0, len(fd.members))
		for m := range fd.members {
			fd.snap = append(fd.snap, m)
		}
	}
	return fd.snap
}

func (fd *feed) fanout(members []member, res *countResult) {
	u := &update{res: res, ws: wire.EventFrame("count:updated", json.RawMessage(res.body), "")}
	var ws, sse int
	for _, m := range members {
		m.push(u)
		if m.transport() == "ws" {
			ws++
		} else {
			sse++
		}
	}
	fd.f.m.pushes.WithLabelValues("ws").Add(float64(ws))
	fd.f.m.pushes.WithLabelValues("sse").Add(float64(sse))
}

// publishLoop recounts, every push_interval, the hotels this process has
// subscribers for, and publishes the counts that changed. Several count
// processes may follow one hotel: a short per-hotel lease elects the one
// that recounts, so a hotel costs one PFCOUNT per interval in total.
func (f *feeds) publishLoop(ctx context.Context) error {
	owner := store.NewToken()
	published := map[string]int64{}
	t := time.NewTicker(f.cfg.PushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			f.publishRound(ctx, owner, published)
		}
	}
}

func (f *feeds) publishRound(ctx context.Context, owner string, published map[string]int64) {
	hotels := f.hotels()
	if len(hotels) == 0 {
		clear(published)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.PushInterval)
	defer cancel()
	leases := make([]string, len(hotels))
	for i, h := range hotels {
		leases[i] = f.keys.publishLease(h)
	}
	held, err := store.AcquireLeases(ctx, f.counter.rdb, leases, owner, 3*f.cfg.PushInterval)
	f.m.redisCommands.WithLabelValues("lease").Add(float64(len(hotels)))
	if err != nil {
		return
	}
	owned := map[string]bool{}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, h := range hotels {
		if !held[i] {
			continue
		}
		owned[h] = true
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res, err := f.counter.recount(h)
			if err != nil {
				return
			}
			mu.Lock()
			prev, seen := published[h]
			mu.Unlock()
			if seen && prev == res.count {
				return
			}
			if err := f.hub.Publish(ctx, f.keys.topic(h), res.body); err != nil {
				return
			}
			f.m.publishes.Inc()
			mu.Lock()
			published[h] = res.count
			mu.Unlock()
		}()
	}
	wg.Wait()
	for h := range published {
		if !owned[h] {
			delete(published, h)
		}
	}
}
