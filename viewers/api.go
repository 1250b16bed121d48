package viewers

import (
	"context"
	"errors"
)

// The module's in-process API: what the app and other modules may call, and
// the ports viewers needs from others. Everything else is viewers' own.

// Hotels tells viewers which hotels exist. Booking provides it through the
// app; viewers never reads booking's tables.
type Hotels interface {
	// HotelsSince lists hotels registered after cursor, oldest first, at
	// most limit, and the cursor to pass next time (0 lists from the start).
	HotelsSince(ctx context.Context, cursor int64, limit int) (ids []string, next int64, err error)
}

// ErrNotStarted says no part that reads counts runs in this process.
var ErrNotStarted = errors.New("viewers: no count-reading part is started in this process")

// Count is hotel's live viewer count as GET /v1/viewers/{hotel}/count
// answers it: from the in-process cache, recounted, or the last known one
// marked stale while Redis fails. It errs only when nothing is known and
// Redis fails, or when no count-reading part runs here.
func (mod *Module) Count(_ context.Context, hotel string) (Count, error) {
	if mod.counter == nil {
		return Count{}, ErrNotStarted
	}
	res, err := mod.counter.get(hotel)
	if err != nil {
		return Count{}, err
	}
	return Count{Hotel: res.hotel, Count: res.count, Stale: res.stale, AsOf: res.asOf}, nil
}
