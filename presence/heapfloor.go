package presence

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
)

// A gateway's live heap is small for the garbage it makes: at 2,000
// connections and 20,000 deliveries a second it holds about 20 MB and, with
// GOGC=100, collected every second or two. On a gateway with one or two
// CPUs each mark phase ran for 25-100 ms beside the fan-out (a fractional
// worker sharing the processor, assists on the goroutines allocating), and
// those windows were where the latency tail lay. The heap floor lets the
// heap grow to presence.heap_floor_bytes before a collection while the
// live heap is small; once the live heap passes half the floor, GOGC is
// back to 100 and memory per connection is what it would be without it.
//
// GOGC is raised right after each collection, from the live heap that
// collection found, so the next goal is max(floor, 2 × live) and a heap
// growing fast between collections cannot overshoot the floor by more than
// GOGC=100 would.

// maxFloorPercent bounds GOGC while the floor holds: a nearly empty heap
// collects at 11× its live size rather than at the floor.
const maxFloorPercent = 1000

// floorPercent is the GOGC that puts the next collection at floor bytes
// (never below 100) for a live heap of live bytes.
func floorPercent(live, floor uint64) int {
	if floor == 0 || live == 0 || live*2 >= floor {
		return 100
	}
	return int(min(floor*100/live-100, maxFloorPercent))
}

// runHeapFloor keeps GOGC at floorPercent after every collection until ctx
// ends, then puts it back to 100. An operator's own GOGC wins: with it set
// the floor does nothing.
func runHeapFloor(ctx context.Context, floor int64, log *slog.Logger) {
	if floor <= 0 {
		return
	}
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Info("presence: GOGC is set, presence.heap_floor_bytes is not applied", "GOGC", v)
		return
	}
	// mu orders a collection's adjustment against the stop, so none lands
	// after GOGC was put back.
	var mu sync.Mutex
	stopped := false
	sample := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	last := 100
	var arm func()
	arm = func() {
		// A finalizer runs once per collection that finds its object
		// unreachable: re-armed each time, it is a hook after every GC.
		runtime.SetFinalizer(new([32]byte), func(*[32]byte) {
			mu.Lock()
			defer mu.Unlock()
			if stopped {
				return
			}
			rtmetrics.Read(sample)
			if sample[0].Value.Kind() == rtmetrics.KindUint64 {
				if p := floorPercent(sample[0].Value.Uint64(), uint64(floor)); p != last {
					debug.SetGCPercent(p)
					last = p
				}
			}
			arm()
		})
	}
	arm()
	<-ctx.Done()
	mu.Lock()
	defer mu.Unlock()
	stopped = true
	debug.SetGCPercent(100)
}
