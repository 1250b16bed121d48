package booking

import (
	"sync"
	"time"

	"github.com/presenced/presenced/loadgen"
)

// lateHolds times the holds issued after the first `after`: how fast a
// sale runs once tens of thousands of seats are held, apart from its start.
type lateHolds struct {
	after      int
	mu         sync.Mutex
	hist       loadgen.Histogram
	n          int
	from, to   time.Time
	statusSeen map[int]int
}

func (l *lateHolds) record(i int, start time.Time, status int) {
	if l.after <= 0 || i < l.after {
		return
	}
	end := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.statusSeen == nil {
		l.statusSeen = map[int]int{}
	}
	l.statusSeen[status]++
	l.hist.Record(end.Sub(start))
	l.n++
	if l.from.IsZero() || start.Before(l.from) {
		l.from = start
	}
	if end.After(l.to) {
		l.to = end
	}
}

func (l *lateHolds) report(r *loadgen.Runner) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.after <= 0 {
		return
	}
	if l.n == 0 {
		r.AddFigure("after", "no hold was issued after the first %d", l.after)
		return
	}
	took := l.to.Sub(l.from)
	r.AddFigure("after", "%d holds after the first %d: %.1f/s over %s, p50 %s, p99 %s, 201:%d 409:%d",
		l.n, l.after, float64(l.n)/took.Seconds(), took.Round(time.Millisecond),
		l.hist.Quantile(0.5).Round(10*time.Microsecond), l.hist.Quantile(0.99).Round(10*time.Microsecond),
		l.statusSeen[201], l.statusSeen[409])
}
