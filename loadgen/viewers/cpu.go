package viewers

import (
	"fmt"
	"syscall"
	"time"
)

// serverCPUMetric is the server's own CPU seconds on its /metrics (the
// Prometheus process collector, from /proc/self/stat).
const serverCPUMetric = "process_cpu_seconds_total"

// cpuMark is the run at one moment: the server's CPU seconds so far (-1
// when /metrics did not say), this loadgen's own, and the heartbeats
// accepted so far. Two marks give heartbeats per server core-second over
// the time between them, so setup (registering hotels) and the checks
// after the load window are not charged to the heartbeats.
type cpuMark struct {
	at       time.Time
	server   float64
	self     float64
	accepted int64
}

// perCore is the heartbeats accepted between a and b per second of server
// CPU between them; false when the server's CPU was not readable or did
// not move.
func perCore(a, b cpuMark) (float64, bool) {
	cpu := b.server - a.server
	if a.server < 0 || b.server < 0 || cpu <= 0 {
		return 0, false
	}
	return float64(b.accepted-a.accepted) / cpu, true
}

// cpuShares says what share of one core the server and this loadgen used
// between a and b.
func cpuShares(a, b cpuMark) string {
	el := b.at.Sub(a.at).Seconds()
	if el <= 0 {
		return "n/a"
	}
	server := "n/a"
	if a.server >= 0 && b.server >= 0 {
		server = fmt.Sprintf("%.1f %%", 100*(b.server-a.server)/el)
	}
	return fmt.Sprintf("server %s, this loadgen %.1f %% of one core over %.1f s", server, 100*(b.self-a.self)/el, el)
}

// selfCPU is the CPU seconds this process used so far.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
