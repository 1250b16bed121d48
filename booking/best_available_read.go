package booking

import (
	"time"

	"github.com/presenced/presenced/internal/refusal"
)

// bestView is what the statement of a best-available hold read when it
// wrote nothing (bestAloneSQL).
type bestView struct {
	holdView
	sectionFound bool
	busy         bool  // fitting seats were all locked by others
	free         int64 // the section's seats neither held nor sold
}

// bestRefusal is the view's answer before anything is written: a replay
// of the stored answer, a refusal, or nil to go on (the user's own due
// checkout is ended by the caller).
func (v *bestView) bestRefusal(in holdInput, best bestInput, fp []byte) (*holdResult, error) {
	if r, err, done := v.saleRefusal(fp); done {
		return r, err
	}
	switch {
	case !v.sectionFound:
		return nil, refusal.New(ErrSectionNotFound, "no section %q in this event", best.Section)
	case v.busy:
		return nil, refusal.Busy(time.Second, "every fitting seat is being held by other buyers; retry")
	case len(v.seats) != best.Quantity:
		return nil, &NoSeatsError{Section: best.Section, Free: v.free}
	}
	return nil, v.promoRefusal(in.PromoCode)
}

// withinMaxPrice refuses seats priced over the buyer's cap (the section's
// multiplier may have risen since the seats were picked by base price).
func (v *bestView) withinMaxPrice(b bestInput, items []Item) error {
	if b.MaxPrice <= 0 {
		return nil
	}
	for _, it := range items {
		if gross := it.Price + it.Discount; gross > b.MaxPrice {
			return &NoSeatsError{Section: b.Section, Free: v.free, OverMaxPrice: true}
		}
	}
	return nil
}

// setSection records the section's counters as read (nil: no such
// section).
func (v *bestView) setSection(seatCount, taken *int64) {
	if seatCount != nil {
		v.sectionFound = true
		v.free = max(*seatCount-*taken, 0)
	}
}

// addPicked adds a seat the pick locked: free when it was locked, of a
// section with seatCount seats of which taken are held or sold.
func (v *bestView) addPicked(id int64, section string, row, num int, basePrice, seatCount, taken int64) {
	v.seats = append(v.seats, seatRow{id: id, ofEvent: true, section: section, row: row, num: num,
		status: SeatAvailable, basePrice: basePrice, sectionSeats: seatCount, sectionTaken: taken})
}
