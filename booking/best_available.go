package booking

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/internal/refusal"
)

// Best available: the buyer names a section and a quantity, and the server
// picks the seats (best_available_seats, migrations 0060, 0062 and 0063) with
// SKIP LOCKED, so that buyers of one hot section spread over its free
// seats instead of queueing on the same row locks. The hold is then the named-seat hold's:
// the same invariants, stored response and prices, written by the same
// parts of one statement as a named hold alone (bestAloneSQL): one
// PostgreSQL round trip, which picks, prices and writes, or answers a
// refusal from what it read. The seat hints of Redis are not read: a
// buyer who does not name seats cannot be refused by them, and SKIP
// LOCKED is the cheaper "taken" here.

// bestInput is what a best-available hold asks for.
type bestInput struct {
	Section  string
	Quantity int
	Adjacent bool
	MaxPrice int64 // per seat, before a promotion's discount; 0: none
}

// bestFingerprint identifies a best-available request for the idempotency
// check: never equal to a named-seat request's.
func bestFingerprint(event string, b bestInput, promo string) []byte {
	var s strings.Builder
	s.WriteString(event)
	s.WriteString("\nbest:")
	s.WriteString(b.Section)
	s.WriteByte(',')
	s.WriteString(strconv.Itoa(b.Quantity))
	s.WriteByte(',')
	s.WriteString(strconv.FormatBool(b.Adjacent))
	s.WriteByte(',')
	s.WriteString(strconv.FormatInt(b.MaxPrice, 10))
	s.WriteByte('\n')
	s.WriteString(promo)
	sum := sha256.Sum256([]byte(s.String()))
	return sum[:]
}

// checkBest validates a best-available request.
func (h *holdsPlane) checkBest(in holdInput, b bestInput) ([]byte, error) {
	keyErr := checkIdempotencyKey(in.Key)
	switch {
	case !validEventID(in.Event):
		return nil, ErrEventNotFound
	case keyErr != nil:
		return nil, keyErr
	case len(in.Seats) > 0:
		return nil, refusal.Invalid("name seats or a section and a quantity, not both")
	case !sectionIDPattern.Valid(b.Section):
		return nil, refusal.Invalid("%v", sectionIDPattern.Check(b.Section))
	case b.Quantity < 1 || b.Quantity > h.cfg.MaxSeatsPerHold:
		return nil, refusal.Invalid("quantity: 1 to %d seats", h.cfg.MaxSeatsPerHold)
	case b.MaxPrice < 0:
		return nil, refusal.Invalid("maxPrice: a price in the currency's minor unit, 0 or more")
	case in.PromoCode != "" && !promoPattern.Valid(in.PromoCode):
		return nil, ErrInvalidPromoCode
	}
	return bestFingerprint(in.Event, b, in.PromoCode), nil
}

// HoldBest is a best-available hold: quantity seats of a section that the
// server picks, answered as a named-seat hold is.
func (h *holdsPlane) HoldBest(ctx context.Context, in holdInput, best bestInput) (holdResult, error) {
	fp, err := h.checkBest(in, best)
	if err != nil {
		return holdResult{}, err
	}
	resID := uuid.Must(uuid.NewV7()).String()
	// The gate without seat hints: the user's rate and admission lease
	// (moved to the hold's time when this process knows it; put back by
	// undo if the hold does not commit).
	g, err := h.gates(ctx, in, nil, resID)
	if err != nil {
		if g.hinted {
			h.undo(ctx, in, nil, resID, g, nil)
		}
		return h.refuseUnlessStored(ctx, in, fp, err)
	}
	committed := false
	defer func() {
		if !committed {
			h.undo(ctx, in, nil, resID, g, nil)
		}
	}()
	body, ev, ended, replay, err := h.pickAndWrite(ctx, in, best, fp, resID)
	if ev != nil {
		h.holdTimes.remember(in.Event, ev.holdMinutes)
	}
	if errors.Is(err, errKeyTaken) {
		return h.answerConcurrentRetry(ctx, in, fp)
	}
	if err != nil {
		return holdResult{}, err
	}
	if replay != nil {
		h.m.idempotentHits.Inc()
		return *replay, nil
	}
	committed = true
	h.afterGate(ctx, in, nil, resID, g, ev)
	for _, r := range ended {
		h.releaseAfter(ctx, r, false) // the user's own checkout: the lease stays
	}
	return holdResult{Status: http.StatusCreated, Body: body}, nil
}

// pickAndWrite runs the hold's one statement (bestWriters) and answers what
// it read when it wrote nothing. A user whose own checkout is due has it
// ended first, in a transaction of its own, and the statement runs again
// (rare: the expiry worker ends due holds every second). So does a pick
// that found every fitting run locked by others while it held half of one
// (best_available_seats does not wait then), a few times.
func (h *holdsPlane) pickAndWrite(ctx context.Context, in holdInput, best bestInput, fp []byte, resID string) ([]byte, *eventRow, []*released, *holdResult, error) {
	var ended []*released
	for reruns := 0; ; {
		c := &bestCall{in: in, best: best, fp: fp, resID: resID}
		if err := h.bests.hold(ctx, c); err != nil {
			return nil, nil, nil, nil, err
		}
		v := c.view
		if c.body != nil {
			return c.body, v.event, ended, nil, nil
		}
		if replay, err, done := v.saleRefusal(fp); done {
			return nil, v.event, nil, replay, err
		}
		if v.pendingID != "" && v.pendingDue && ended == nil {
			var err error
			if ended, err = h.endOwnCheckout(ctx, v.pendingID); err != nil {
				return nil, nil, nil, nil, err
			}
			if ended == nil {
				ended = []*released{} // someone else ended it: run again once
			}
			continue
		}
		if v.busy && reruns < maxBusyReruns {
			// The run's other buyer is about to commit or let it go.
			reruns++
			if !sleepCtx(ctx, refusal.Jitter(busyRerunWait)) {
				return nil, nil, nil, nil, refusal.Busy(time.Second, "every fitting seat is being held by other buyers; retry")
			}
			continue
		}
		return nil, v.event, nil, nil, h.bestAnswer(c, v)
	}
}

// maxBusyReruns bounds the statements of a best-available hold whose picks
// found every fitting run locked by other buyers.
const maxBusyReruns = 3

// busyRerunWait is the middle of the wait before such a rerun: about one
// hold's statement.
const busyRerunWait = 10 * time.Millisecond

// sleepCtx waits d, or less if ctx ends first (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// bestAnswer is the refusal of a best-available hold the statement did not
// write, from what it read, in the order the two round trips met them:
// the pick's, the promotion's, the price's, the buyer's cap.
func (h *holdsPlane) bestAnswer(c *bestCall, v *bestView) error {
	if v.pendingDue {
		// Still due after it was ended: a concurrent hold of the user.
		return refusal.Busy(time.Second, "your previous checkout is being ended; retry")
	}
	if _, err := h.pricedBest(c, v); err != nil {
		return err
	}
	// Nothing read refuses it: what changed between the reads of the one
	// statement (a seat let go between its snapshot and the pick's).
	return refusal.Busy(time.Second, "the seats changed while they were picked; retry")
}

// pricedBest prices the seats v picked for c, or returns what refuses the
// hold: an error, or nil and nil for a replay of the key's stored answer
// (saleRefusal answers it).
func (h *holdsPlane) pricedBest(c *bestCall, v *bestView) (*pendingHold, error) {
	if r, err := v.bestRefusal(c.in, c.best, c.fp); r != nil || err != nil {
		return nil, err
	}
	p, err := h.price(c.in, c.fp, c.resID, &v.holdView)
	if err != nil {
		return nil, err
	}
	if err := v.withinMaxPrice(c.best, p.items); err != nil {
		return nil, err
	}
	return p, nil
}

// endOwnCheckout ends the user's checkout whose time is up, as the expiry
// worker would, so that the new hold passes one_active_checkout.
func (h *holdsPlane) endOwnCheckout(ctx context.Context, id string) ([]*released, error) {
	var ended []*released
	err := pgx.BeginFunc(ctx, h.db, func(tx pgx.Tx) error {
		r, err := endReservation(ctx, tx, id, StatusExpired, true, "")
		if errors.Is(err, ErrNotPending) {
			return nil // someone else ended it first
		}
		if err != nil {
			return err
		}
		ended = append(ended, r)
		return nil
	})
	if err != nil {
		return nil, storeError("expire own checkout", err)
	}
	return ended, nil
}

// seatsBeingHeld refuses a named hold that met a seat another transaction
// holds locked: at once, with a short jittered wait before the retry, so
// that the buyers of a hot seat do not all come back together.
func seatsBeingHeld() error {
	return &refusal.Error{Kind: ErrSeatsBeingHeld, Msg: "another buyer is holding these seats right now; retry, or ask for the best available",
		RetryAfter: refusal.Jitter(seatsBeingHeldRetry)}
}

// seatsBeingHeldRetry is the middle of the retry suggestion: about a
// hold's write, after which the seat is either taken or free again.
const seatsBeingHeldRetry = 300 * time.Millisecond
