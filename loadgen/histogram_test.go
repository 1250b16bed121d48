package loadgen

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHistogramQuantilesWithinTwoPercent(t *testing.T) {
	t.Parallel()
	var h Histogram
	vals := make([]time.Duration, 100_000)
	for i := range vals {
		vals[i] = time.Duration(rand.ExpFloat64() * float64(3*time.Millisecond))
		h.Record(vals[i])
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.95, 0.99, 0.999} {
		want := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		require.InEpsilon(t, float64(want), float64(got), 0.02, "q=%v", q)
	}
	require.Equal(t, vals[len(vals)-1], h.Max())
	require.Equal(t, h.Max(), h.Quantile(1))
}

func TestHistogramBucketsAreOrdered(t *testing.T) {
	t.Parallel()
	prev := time.Duration(-1)
	for i := 0; i < len(Histogram{}.counts); i++ {
		u := upperOf(i)
		require.Greater(t, u, prev)
		require.Equal(t, i, bucketOf(u), "bucket %d holds its upper bound", i)
		prev = u
	}
}
