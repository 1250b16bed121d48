package presence

import (
	"context"
	"sync"
	"time"

	"github.com/presenced/presenced/web/socket"
)

// behindSet holds the connections with changes waiting behind a write in
// flight. Every presence.coalesce_tick while it is not empty, the gateway
// looks at them: those that caught up leave, and those whose oldest
// waiting change has waited presence.slow_client_timeout are closed with
// 4008. Their changes meanwhile coalesce (latest state per user), so a slow
// reader costs at most one pending entry per user it follows. A gateway
// where every connection keeps up does no work here at all.
type behindSet struct {
	mu   sync.Mutex
	set  map[*client]struct{}
	wake chan struct{}
}

func newBehindSet() *behindSet {
	return &behindSet{set: map[*client]struct{}{}, wake: make(chan struct{}, 1)}
}

// watchBehind adds c, which has a change waiting behind a write.
func (g *gateway) watchBehind(c *client) {
	b := g.behind
	b.mu.Lock()
	b.set[c] = struct{}{}
	first := len(b.set) == 1
	b.mu.Unlock()
	if first {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// runBehind sweeps the set every tick while it holds connections, and
// sleeps while it is empty.
func (g *gateway) runBehind(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.behind.wake:
		}
		t := time.NewTicker(g.cfg.CoalesceTick)
		for g.sweepBehind(time.Now().UnixNano()) {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		t.Stop()
	}
}

// sweepBehind checks every watched connection and reports whether any is
// still behind.
func (g *gateway) sweepBehind(now int64) bool {
	b := g.behind
	b.mu.Lock()
	list := make([]*client, 0, len(b.set))
	for c := range b.set {
		list = append(list, c)
	}
	b.mu.Unlock()
	var gone []*client
	for _, c := range list {
		d := c.behindFor(now)
		switch {
		case d == 0:
			gone = append(gone, c)
		case d >= g.cfg.SlowClientTimeout:
			gone = append(gone, c)
			g.m.slowDrops.Inc()
			// The close frame waits for the stuck write; the sweep does not.
			go c.conn.Close(socket.CloseSlowConsumer, "slow consumer")
		}
	}
	b.mu.Lock()
	for _, c := range gone {
		delete(b.set, c)
	}
	left := len(b.set) > 0
	b.mu.Unlock()
	return left
}
