package viewers

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/web"
)

// registry is this process's set of the hotels that exist, learned from
// booking through the Hotels port. The request paths read it with one
// atomic load and a map lookup: no database round trip per heartbeat. A
// loop asks only for hotels registered since its last look, so a new hotel
// is known within hotel_refresh. Hotels are never deleted, so the set only
// grows.
//
// Registration numbers come from a sequence, and transactions commit out
// of order: hotel 5 may become visible after hotel 6 has been read. So the
// cursor a refresh starts from is the one reached registrySettle ago, and
// the hotels of the last registrySettle are read again each time (few: a
// hotel is registered rarely); one that committed late is learned then,
// instead of never.
type registry struct {
	src   Hotels
	every time.Duration
	m     *metrics
	log   *slog.Logger

	known  atomic.Pointer[map[string]struct{}]
	loaded atomic.Bool
	// Owned by the refresh loop: the settled cursor, and the cursors
	// reached by recent refreshes, oldest first.
	cursor int64
	recent []cursorMark
}

type cursorMark struct {
	at     time.Time
	cursor int64
}

// registryPage is how many hotels one refresh asks for at a time.
const registryPage = 5000

// registrySettle bounds how long a hotel's registering transaction can
// stay uncommitted after taking its number: far above booking's
// statement timeout.
const registrySettle = 30 * time.Second

func newRegistry(src Hotels, every time.Duration, m *metrics, log *slog.Logger) *registry {
	r := &registry{src: src, every: every, m: m, log: log}
	empty := map[string]struct{}{}
	r.known.Store(&empty)
	return r
}

// check refuses a hotel that does not exist: 404, or 503 while the
// registry has not loaded once (it cannot tell yet).
func (r *registry) check(hotel string) error {
	if _, ok := (*r.known.Load())[hotel]; ok {
		return nil
	}
	if !r.loaded.Load() {
		return web.Unavailable(time.Second, "the hotel registry is loading")
	}
	r.m.unknownHotel.Inc()
	return web.Errorf(http.StatusNotFound, "hotel_not_found", "no such hotel")
}

// refresh adds the hotels registered since the settled cursor.
func (r *registry) refresh(ctx context.Context) error {
	now := time.Now()
	known := *r.known.Load()
	var added []string
	cursor := r.cursor
	for {
		ids, next, err := r.src.HotelsSince(ctx, cursor, registryPage)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, ok := known[id]; !ok {
				added = append(added, id)
			}
		}
		cursor = next
		if len(ids) < registryPage {
			break
		}
	}
	if len(added) > 0 {
		// Copy on write: readers keep the map they loaded.
		next := maps.Clone(known)
		for _, id := range added {
			next[id] = struct{}{}
		}
		r.known.Store(&next)
		r.m.knownHotels.Set(float64(len(next)))
	}
	r.recent = append(r.recent, cursorMark{at: now, cursor: cursor})
	for len(r.recent) > 0 && now.Sub(r.recent[0].at) >= registrySettle {
		r.cursor = r.recent[0].cursor
		r.recent = r.recent[1:]
	}
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
