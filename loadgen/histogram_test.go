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

func TestHistogramZeroValueAndMerge(t *testing.T) {
	t.Parallel()
	var a, b, empty Histogram
	require.Zero(t, a.Count())
	require.Zero(t, a.Quantile(0.99))
	require.Zero(t, a.Mean())
	a.Record(time.Millisecond)
	b.Record(3 * time.Millisecond)
	b.Record(2 * time.Hour) // past the range: counted, and the max stays exact
	a.Merge(&b)
	a.Merge(&empty)
	require.EqualValues(t, 3, a.Count())
	require.Equal(t, 2*time.Hour, a.Max())
	require.Equal(t, (2*time.Hour+4*time.Millisecond)/3, a.Mean())
	require.InEpsilon(t, float64(time.Millisecond), float64(a.Quantile(0.3)), 0.01)
}
