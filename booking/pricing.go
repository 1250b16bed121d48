package booking

import (
	"errors"
	"math"
	"math/bits"
	"time"
)

// Prices are integers in the currency's minor unit (cents); multipliers and
// discounts are basis points (10,000 = 1.0×). No floating point touches money.
const (
	bpsOne          = 10_000
	surgeHalfSold   = 12_500 // ≥ 50 % of the section gone
	surgeMostlySold = 15_000 // ≥ 80 % gone
	surgeLastWeek   = 500    // within 7 days of the event
	surgeCap        = 15_000
)

// errOverflow is returned when a price does not fit in 63 bits.
var errOverflow = errors.New("price overflow")

// multiplier is the scarcity multiplier of a section in basis points: 1.0×
// under half sold, 1.25× from half, 1.5× from 80 %, plus 0.05× within a week
// of the event, never above 1.5×.
func multiplier(occupied, total int64, untilEvent time.Duration) int64 {
	if total < 1 {
		total = 1
	}
	m := int64(bpsOne)
	switch pct := occupied * 100 / total; {
	case pct >= 80:
		m = surgeMostlySold
	case pct >= 50:
		m = surgeHalfSold
	}
	if untilEvent <= 7*24*time.Hour {
		m += surgeLastWeek
	}
	return min(m, surgeCap)
}

// quote is the frozen price of one seat.
type quote struct {
	Gross    int64 // base × multiplier, rounded half up
	Discount int64 // gross × discount, rounded half up
	Price    int64 // gross − discount
}

// priceSeat computes a seat's quote from its base price, the section
// multiplier and a promotion discount, all in basis points.
func priceSeat(base, multiplierBps, discountBps int64) (quote, error) {
	if base < 0 || multiplierBps < 0 || discountBps < 0 || discountBps > bpsOne {
		return quote{}, errors.New("price inputs out of range")
	}
	gross, err := mulBpsHalfUp(base, multiplierBps)
	if err != nil {
		return quote{}, err
	}
	discount, err := mulBpsHalfUp(gross, discountBps)
	if err != nil {
		return quote{}, err
	}
	return quote{Gross: gross, Discount: discount, Price: gross - discount}, nil
}

// mulBpsHalfUp returns round_half_up(v × bps / 10,000) for non-negative
// inputs, or ErrOverflow.
func mulBpsHalfUp(v, bps int64) (int64, error) {
	hi, lo := bits.Mul64(uint64(v), uint64(bps))
	lo, carry := bits.Add64(lo, bpsOne/2, 0)
	hi += carry
	if hi >= bpsOne {
		return 0, errOverflow // the quotient would not fit in 64 bits
	}
	q, _ := bits.Div64(hi, lo, bpsOne)
	if q > math.MaxInt64 {
		return 0, errOverflow
	}
	return int64(q), nil
}

// addPrice sums prices, refusing to wrap.
func addPrice(a, b int64) (int64, error) {
	s := a + b
	if (s > a) != (b > 0) {
		return 0, errOverflow
	}
	return s, nil
}
