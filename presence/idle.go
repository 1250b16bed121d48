package presence

import (
	"context"
	"sync"
	"time"
)

// idleWheel fires the idle checks of every connection of a gateway from
// one goroutine, in slots of idleTick, instead of a timer per connection:
// an idle connection then costs a slot entry, not a runtime timer. A
// connection is in at most one slot; closing it takes it out.
type idleWheel struct {
	tick time.Duration

	mu    sync.Mutex
	slots map[int64]map[*client]struct{}
	done  int64 // last slot fired
}

const idleTick = 100 * time.Millisecond

func newIdleWheel() *idleWheel {
	return &idleWheel{tick: idleTick, slots: map[int64]map[*client]struct{}{}}
}

func (w *idleWheel) slotOf(t time.Time) int64 { return t.UnixNano()/int64(w.tick) + 1 }

// arm makes c's check fire at the first slot after at, replacing any
// earlier arming of c.
func (w *idleWheel) arm(c *client, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removeLocked(c)
	slot := max(w.slotOf(at), w.done+1)
	set := w.slots[slot]
	if set == nil {
		set = map[*client]struct{}{}
		w.slots[slot] = set
	}
	set[c] = struct{}{}
	c.idleSlot = slot
}

// stop takes c out of the wheel.
func (w *idleWheel) stop(c *client) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removeLocked(c)
}

func (w *idleWheel) removeLocked(c *client) {
	if c.idleSlot == 0 {
		return
	}
	if set := w.slots[c.idleSlot]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(w.slots, c.idleSlot)
		}
	}
	c.idleSlot = 0
}

// run fires due slots every tick until ctx ends.
func (w *idleWheel) run(ctx context.Context) {
	t := time.NewTicker(w.tick)
	defer t.Stop()
	w.mu.Lock()
	w.done = w.slotOf(time.Now()) - 1
	w.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, c := range w.due(w.slotOf(now) - 1) {
				go c.onIdle()
			}
		}
	}
}

// due takes the connections whose slot, up to last, has come.
func (w *idleWheel) due(last int64) []*client {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*client
	for s := w.done + 1; s <= last; s++ {
		for c := range w.slots[s] {
			c.idleSlot = 0
			out = append(out, c)
		}
		delete(w.slots, s)
	}
	if last > w.done {
		w.done = last
	}
	return out
}
