package loadgen

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// HoldCollector keeps this process's garbage collector out of a measured
// window. A load generator's collection is tens of milliseconds of slowed
// reads on one CPU, and every receipt it delays counts as the server's
// latency: with the 2,000-follower fan-out it was most of the p99.
//
// It collects once, then turns the collector off up to a memory limit of
// twice what the process holds plus headroom bytes; past the limit it
// collects as usual, so a long window cannot run the machine out of
// memory. The returned function restores the settings and reports how
// many collections ran in the window, for the summary. Holds may overlap
// (scenarios run side by side in tests): the last release restores.
func HoldCollector(headroom uint64) (release func() uint32) {
	held.Lock()
	defer held.Unlock()
	var m runtime.MemStats
	if held.depth == 0 {
		runtime.GC()
		runtime.ReadMemStats(&m)
		limit := min(2*(m.Sys-m.HeapReleased)+headroom, 1<<62)
		held.limit = debug.SetMemoryLimit(int64(limit))
		held.percent = debug.SetGCPercent(-1)
	} else {
		runtime.ReadMemStats(&m)
	}
	held.depth++
	start := m.NumGC
	var once sync.Once
	var n uint32
	return func() uint32 {
		once.Do(func() {
			held.Lock()
			defer held.Unlock()
			if held.depth--; held.depth == 0 {
				debug.SetGCPercent(held.percent)
				debug.SetMemoryLimit(held.limit)
			}
			runtime.ReadMemStats(&m)
			n = m.NumGC - start
		})
		return n
	}
}

// held is the collector settings HoldCollector saved.
var held struct {
	sync.Mutex
	depth   int
	percent int
	limit   int64
}
