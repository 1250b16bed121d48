// Package gctune keeps the garbage collector of a process that serves
// sockets from marking its heap all the time: a heap floor while the live
// heap is small, and headroom during a burst of connects.
package gctune

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// A process serving sockets has a small live heap for the garbage it makes:
// a presence gateway at 2,000 connections and 20,000 deliveries a second
// holds about 20 MB and, with GOGC=100, collected every second or two, and
// a waiting room taking 1,000 joins a second with 10,000 sockets held
// collected every 1.3 s. On a process with one or two
// CPUs each mark phase ran for 25-100 ms beside the fan-out (a fractional
// worker sharing the processor, assists on the goroutines allocating), and
// those windows were where the latency tail lay. The heap floor lets the
// heap grow to presence.heap_floor_bytes before a collection while the
// live heap is small; once the live heap passes half the floor, GOGC is
// back to 100 and memory per connection is what it would be without it.
//
// A connect burst (a launch, a sale opening its line, or every client of a
// restarted process coming back) is the other time collections cost most:
// a presence connect allocates about 70 KB it drops at once (handshake
// buffers, Redis commands of the follow), while the live heap grows by the
// new connections, so a quarter of the CPU went to marking a heap that is
// mostly the connections already open. Opens of every kind count (the
// process's sockets: presence, the waiting room, viewers' streams).
// While connections open faster than burstOpensPerSecond, the heap
// may grow by presence.burst_heap_bytes past the live heap before a
// collection; when the burst is over GOGC is back to the floor's, and if
// the burst was still raising it, one collection hands the burst's garbage
// back to the system.
//
// GOGC is set right after each collection, from the live heap that
// collection found, so the next goal is what the rules above allow and a
// heap growing fast between collections cannot overshoot it by more than
// GOGC=100 would.

// maxFloorPercent bounds GOGC: a nearly empty heap collects at 11× its
// live size rather than at the floor.
const maxFloorPercent = 1000

// A burst is on while connections open at burstOpensPerSecond or faster in
// each burstWindow, and over after burstQuiet windows below it. A process's
// usual connects come at its users' arrival rate, far below.
const (
	burstOpensPerSecond = 200
	burstWindow         = 250 * time.Millisecond
	burstQuiet          = 4
)

// floorPercent is the GOGC that puts the next collection at floor bytes
// (never below 100) for a live heap of live bytes.
func floorPercent(live, floor uint64) int {
	if floor == 0 || live == 0 || live*2 >= floor {
		return 100
	}
	return int(min(floor*100/live-100, maxFloorPercent))
}

// headroomPercent is the GOGC that lets a heap of live bytes grow by
// headroom bytes before the next collection (never below 100).
func headroomPercent(live, headroom uint64) int {
	if headroom == 0 || live == 0 || headroom <= live {
		return 100
	}
	return int(min(headroom*100/live, maxFloorPercent))
}

// Opens counts the connections a process opened, since it started.
type Opens interface {
	Opened() int64
}

// Tuner keeps GOGC at what the heap floor and, during a connect burst, the
// burst headroom allow.
type Tuner struct {
	floor, headroom uint64
	opens           Opens
	log             *slog.Logger
	burst           atomic.Bool

	// mu orders the adjustments against each other and against the stop,
	// so none lands after GOGC was put back.
	mu      sync.Mutex
	stopped bool
	last    int
}

// New makes a tuner for a heap floor and a burst headroom in bytes (0:
// off), whose bursts are read from opens.
func New(floor, headroom int64, opens Opens, log *slog.Logger) *Tuner {
	return &Tuner{floor: uint64(max(floor, 0)), headroom: uint64(max(headroom, 0)), opens: opens, log: log, last: 100}
}

func (t *Tuner) percent(live uint64) int {
	p := floorPercent(live, t.floor)
	if t.burst.Load() {
		p = max(p, headroomPercent(live, t.headroom))
	}
	return p
}

// apply sets GOGC for the live heap the last collection found.
func (t *Tuner) apply() {
	sample := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(sample)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || sample[0].Value.Kind() != rtmetrics.KindUint64 {
		return
	}
	if p := t.percent(sample[0].Value.Uint64()); p != t.last {
		debug.SetGCPercent(p)
		t.last = p
	}
}

// current is the GOGC the tuner last set.
func (t *Tuner) current() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// Run tunes GOGC until ctx ends, then puts it back to 100. An operator's
// own GOGC wins: with it set the tuner does nothing.
func (t *Tuner) Run(ctx context.Context) {
	if t.floor == 0 && t.headroom == 0 {
		return
	}
	if v, ok := os.LookupEnv("GOGC"); ok {
		t.log.Info("GOGC is set: presence.heap_floor_bytes and burst_heap_bytes are not applied", "GOGC", v)
		return
	}
	var arm func()
	arm = func() {
		// A finalizer runs once per collection that finds its object
		// unreachable: re-armed each time, it is a hook after every GC.
		runtime.SetFinalizer(new([32]byte), func(*[32]byte) {
			t.apply()
			t.mu.Lock()
			stopped := t.stopped
			t.mu.Unlock()
			if !stopped {
				arm()
			}
		})
	}
	arm()
	t.apply()
	if t.headroom > 0 {
		t.watchBursts(ctx)
	}
	<-ctx.Done()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	debug.SetGCPercent(100)
}

// watchBursts turns the burst headroom on and off from the rate of opened
// connections until ctx ends.
func (t *Tuner) watchBursts(ctx context.Context) {
	tick := time.NewTicker(burstWindow)
	defer tick.Stop()
	threshold := int64(burstOpensPerSecond * burstWindow / time.Second)
	quiet := 0
	seen := t.opens.Opened()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := t.opens.Opened()
		fast := now-seen >= threshold
		seen = now
		switch {
		case fast:
			quiet = 0
			if !t.burst.Swap(true) {
				t.apply()
			}
		case t.burst.Load():
			if quiet++; quiet >= burstQuiet {
				// Compared with GOGC before the burst ends, whichever
				// apply (this one or a collection's) lowers it.
				before := t.current()
				t.burst.Store(false)
				t.apply()
				if t.current() < before {
					// The heap may stand at the burst's goal, mostly
					// garbage: collect it now and return the pages,
					// instead of holding them until the scavenger gets
					// there. Only when the burst held GOGC up to its end:
					// a heap larger than the headroom was collecting at
					// GOGC=100 already, and a forced collection of it
					// (0.3-0.4 s on a gateway of 250 MB sharing a busy
					// core) would stall the traffic that follows.
					debug.FreeOSMemory()
				}
			}
		}
	}
}
