package loadgen

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram records latencies in an HdrHistogram (1 ns to 1 h, two
// significant digits: any quantile within 1 % of the true value) at a
// fixed, small memory cost however long the run. The count, mean and max
// are kept exact beside it. The zero value is ready to use; it is not safe
// for concurrent use.
type Histogram struct {
	h   *hdrhistogram.Histogram
	max time.Duration
	sum time.Duration
}

// histogramMax is the longest latency told apart; longer ones count as it.
const histogramMax = time.Hour

func (h *Histogram) init() {
	if h.h == nil {
		h.h = hdrhistogram.New(1, int64(histogramMax), 2)
	}
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	h.init()
	d = max(d, 0)
	_ = h.h.RecordValue(int64(min(d, histogramMax))) // within range by construction
	h.sum += d
	h.max = max(h.max, d)
}

// Merge adds o's observations to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.h == nil {
		return
	}
	h.init()
	h.h.Merge(o.h)
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 {
	if h.h == nil {
		return 0
	}
	return uint64(h.h.TotalCount())
}

// Max is the largest observation.
func (h *Histogram) Max() time.Duration { return h.max }

// Mean is the average observation.
func (h *Histogram) Mean() time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	return h.sum / time.Duration(n)
}

// Quantile returns the q-quantile (0 < q ≤ 1), never above the largest
// observation.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.Count() == 0 {
		return 0
	}
	return min(time.Duration(h.h.ValueAtQuantile(q*100)), h.max)
}
