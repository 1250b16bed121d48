package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records latencies in log-linear buckets: each power of two of
// nanoseconds is split into 64 linear sub-buckets, so any quantile is within
// about 1.6 % of the true value at a fixed, small memory cost however long
// the run.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	max    time.Duration
	sum    time.Duration
}

const (
	subBuckets = 64
	// Values below 64 ns get a bucket each; above, exponents 0..56 cover
	// every positive int64 with 64 sub-buckets apiece.
	numBuckets = (56 + 2) * subBuckets
)

func bucketOf(d time.Duration) int {
	v := uint64(d)
	if v < subBuckets {
		return int(v)
	}
	exp := bits.Len64(v) - 7 // v >> exp falls in [64, 128)
	sub := int(v>>uint(exp)) - subBuckets
	return (exp+1)*subBuckets + sub
}

// upperOf is the largest value a bucket holds.
func upperOf(idx int) time.Duration {
	if idx < subBuckets {
		return time.Duration(idx)
	}
	exp := idx/subBuckets - 1
	sub := idx % subBuckets
	return time.Duration((uint64(subBuckets+sub+1) << uint(exp)) - 1)
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(d)]++
	h.n++
	h.sum += d
	if d > h.max {
		h.max = d
	}
}

// Merge adds o's observations to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	if o.max > h.max {
		h.max = o.max
	}
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest observation.
func (h *Histogram) Max() time.Duration { return h.max }

// Mean is the average observation.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile returns the q-quantile (0 < q ≤ 1).
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if u := upperOf(i); u < h.max {
				return u
			}
			return h.max
		}
	}
	return h.max
}
