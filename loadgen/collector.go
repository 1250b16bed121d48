package loadgen

import (
	"runtime"
	"runtime/debug"
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
// many collections ran in the window, for the summary.
func HoldCollector(headroom uint64) (release func() uint32) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	held := m.Sys - m.HeapReleased
	limit := min(2*held+headroom, 1<<62)
	oldLimit := debug.SetMemoryLimit(int64(limit))
	oldPercent := debug.SetGCPercent(-1)
	start := m.NumGC
	return func() uint32 {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
		runtime.ReadMemStats(&m)
		return m.NumGC - start
	}
}
