package viewers

import (
	"context"
	"log/slog"
	"maps"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/internal/refusal"
)

// registry is this process's set of the hotels that exist, learned from
// booking through the Hotels port. The request paths read it with one
// atomic load and a map lookup: no database round trip per heartbeat. A
// loop asks only for hotels registered since its last look, so a new hotel
// is known within hotel_refresh. Hotels are never deleted, so the set only
// grows.
type registry struct {
	src   Hotels
	every time.Duration
	m     *metrics
	log   *slog.Logger

	known  atomic.Pointer[map[string]struct{}]
	loaded atomic.Bool
	cursor int64 // owned by the refresh loop
}

// registryPage is how many hotels one refresh asks for at a time.
const registryPage = 5000

func newRegistry(src Hotels, every time.Duration, m *metrics, log *slog.Logger) *registry {
	r := &registry{src: src, every: every, m: m, log: log}
	empty := map[string]struct{}{}
	r.known.Store(&empty)
	return r
}

// check refuses a hotel that does not exist (ErrHotelNotFound), or says
// busy while the registry has not loaded once (it cannot tell yet).
func (r *registry) check(hotel string) error {
	if _, ok := (*r.known.Load())[hotel]; ok {
		return nil
	}
	if !r.loaded.Load() {
		return refusal.Busy(time.Second, "the hotel registry is loading")
	}
	r.m.unknownHotel.Inc()
	return ErrHotelNotFound
}

// refresh adds the hotels registered since the last refresh.
func (r *registry) refresh(ctx context.Context) error {
	var added []string
	cursor := r.cursor
	for {
		ids, next, err := r.src.HotelsSince(ctx, cursor, registryPage)
		if err != nil {
			return err
		}
		added = append(added, ids...)
		cursor = next
		if len(ids) < registryPage {
			break
		}
	}
	if len(added) > 0 {
		// Copy on write: readers keep the map they loaded.
		next := maps.Clone(*r.known.Load())
		for _, id := range added {
			next[id] = struct{}{}
		}
		r.known.Store(&next)
		r.m.knownHotels.Set(float64(len(next)))
	}
	r.cursor = cursor
	r.loaded.Store(true)
	return nil
}

// run refreshes every hotel_refresh until ctx ends.
func (r *registry) run(ctx context.Context) error {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.log.Warn("viewers: hotel registry refresh failed; keeping the hotels known", "err", err)
		}
	}
}
