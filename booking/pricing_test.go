package booking

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMultiplier(t *testing.T) {
	t.Parallel()
	month := 30 * 24 * time.Hour
	cases := []struct {
		occupied, total int64
		until           time.Duration
		want            int64
	}{
		{0, 100, month, 10_000},
		{49, 100, month, 10_000},
		{50, 100, month, 12_500},
		{79, 100, month, 12_500},
		{80, 100, month, 15_000},
		{100, 100, month, 15_000},
		{10, 100, 7 * 24 * time.Hour, 10_500},
		{60, 100, 24 * time.Hour, 13_000},
		{90, 100, time.Hour, 15_000}, // capped at 1.5×
		{0, 0, month, 10_000},
	}
	for _, c := range cases {
		require.Equal(t, c.want, multiplier(c.occupied, c.total, c.until), "%+v", c)
	}
}

func TestPriceSeatRoundsHalfUp(t *testing.T) {
	t.Parallel()
	q, err := priceSeat(4999, 12_500, 0)
	require.NoError(t, err)
	require.Equal(t, quote{Gross: 6249, Discount: 0, Price: 6249}, q) // 6248.75 → 6249
	q, err = priceSeat(2, 12_500, 0)
	require.NoError(t, err)
	require.Equal(t, int64(3), q.Gross) // 2.5 → 3 (half up)
	q, err = priceSeat(10_000, 10_000, 1_500)
	require.NoError(t, err)
	require.Equal(t, quote{Gross: 10_000, Discount: 1_500, Price: 8_500}, q)
	q, err = priceSeat(3, 10_000, 5_000)
	require.NoError(t, err)
	require.Equal(t, quote{Gross: 3, Discount: 2, Price: 1}, q) // 1.5 → 2
}

func TestPriceSeatOverflow(t *testing.T) {
	t.Parallel()
	_, err := priceSeat(math.MaxInt64, 15_000, 0)
	require.ErrorIs(t, err, errOverflow)
	_, err = priceSeat(math.MaxInt64/3*2+1000, 15_000, 0)
	require.ErrorIs(t, err, errOverflow, "just above MaxInt64 after 1.5×")
	q, err := priceSeat(math.MaxInt64/3*2-1000, 15_000, 0)
	require.NoError(t, err, "just below")
	require.Positive(t, q.Price)
	_, err = addPrice(math.MaxInt64, 1)
	require.ErrorIs(t, err, errOverflow)
	s, err := addPrice(40, 2)
	require.NoError(t, err)
	require.Equal(t, int64(42), s)
	_, err = priceSeat(100, 10_000, 10_001)
	require.Error(t, err)
}
