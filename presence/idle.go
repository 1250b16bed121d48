package presence

import (
	"context"
	"sync"
	"time"
)

// idleWheel fires the idle checks of every connection of a gateway from
// one goroutine, in slots of idleTick, instead of a timer per connection:
// an idle connection then costs a slot entry, not a runtime timer.
type idleWheel struct {
	tick time.Duration

	mu      sync.Mutex
	slots   map[int64][]*client
	done    int64 // last slot fired
	started bool
}

const idleTick = 100 * time.Millisecond

func newIdleWheel() *idleWheel {
	return &idleWheel{tick: idleTick, slots: map[int64][]*client{}}
}

func (w *idleWheel) slotOf(t time.Time) int64 { return t.UnixNano()/int64(w.tick) + 1 }

// arm makes c's check fire at the first slot after at; an earlier arming
// of c is superseded (its entry is skipped when its slot comes).
func (w *idleWheel) arm(c *client, at time.Time) {
	slot := w.slotOf(at)
	c.idleSlot.Store(slot)
	w.mu.Lock()
	if slot <= w.done {
		slot = w.done + 1
		c.idleSlot.Store(slot)
	}
	w.slots[slot] = append(w.slots[slot], c)
	w.mu.Unlock()
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
		for _, c := range w.slots[s] {
			if c.idleSlot.CompareAndSwap(s, 0) {
				out = append(out, c)
			}
		}
		delete(w.slots, s)
	}
	if last > w.done {
		w.done = last
	}
	return out
}
