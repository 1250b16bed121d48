package booking

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// expireNow makes a reservation due.
func (b *bundle) expireNow(t *testing.T, id string) {
	t.Helper()
	_, err := b.db.Exec(context.Background(), `UPDATE reservations SET expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
}

func (b *bundle) status(t *testing.T, id string) string {
	t.Helper()
	var s string
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT status FROM reservations WHERE id = $1`, id).Scan(&s))
	return s
}

// Not parallel: an expirer of another test could reclaim this hold, and its
// cleanup would go to that test's fakes and key prefix.
func TestExpiryWorkerReleasesEverything(t *testing.T) {
	b := setup(t)
	event, seats := b.event(t, "A:1x10@1000")
	require.NoError(t, createPromotion(context.Background(), b.db, event, PromotionSpec{Code: "TEN", DiscountBps: 1000, MaxUses: 1}))
	status, r, err := b.hold(t, event, "hana", "k", []int64{seats[2], seats[3]}, "TEN")
	require.NoError(t, err)
	require.Equal(t, 201, status)
	require.Equal(t, int64(1800), r.Total, "10 % off two seats of 1000")
	// Tests share the database, and any expirer may reclaim any due hold
	// (that is the point of SKIP LOCKED): judge by the reservation's state.
	_, err = b.expiry.ExpireOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, StatusPending, b.status(t, r.ID), "not due yet")

	b.expireNow(t, r.ID)
	_, err = b.expiry.ExpireOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, StatusExpired, b.status(t, r.ID))
	require.Empty(t, b.liveItems(t, event))
	var used int
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT used FROM promotions WHERE event_id = $1 AND code = 'TEN'`, event).Scan(&used))
	require.Zero(t, used, "the promotion use is returned")
	require.False(t, b.desk.live(event, b.uid("hana")), "the admission lease is released")
	keys := b.holds.hints.hintKeys(event, []int64{seats[2], seats[3]})
	left, err := b.rdb.Exists(context.Background(), keys...).Result()
	require.NoError(t, err)
	require.Zero(t, left, "the seat hints are released")

	b.requireNoDoubleOwnership(t, event)
	// Seats and promotion are usable again.
	status, _, err = b.hold(t, event, "ivan", "k", []int64{seats[2]}, "TEN")
	require.NoError(t, err)
	require.Equal(t, 201, status)
}

// A buyer who finds an expired hold on a wanted seat reclaims it inline,
// without waiting for the worker.
func TestExpiredHoldIsReclaimedInline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, seats := b.event(t, "A:1x10@100")
	_, r, err := b.hold(t, event, "jo", "k", []int64{seats[0], seats[1]}, "")
	require.NoError(t, err)
	b.expireNow(t, r.ID)
	// The hints of an expired hold may still be in Redis (clock skew, a
	// slow release): drop them as their TTL would.
	require.NoError(t, b.holds.hints.release(context.Background(), event, []int64{seats[0], seats[1]}, r.ID))
	status, r2, err := b.hold(t, event, "kim", "k", []int64{seats[1], seats[2]}, "")
	require.NoError(t, err)
	require.Equal(t, 201, status)
	require.Equal(t, StatusExpired, b.status(t, r.ID))
	require.Len(t, r2.Items, 2)
	b.requireNoDoubleOwnership(t, event)
	var seat0 string
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT status FROM seats WHERE id = $1`, seats[0]).Scan(&seat0))
	require.Equal(t, SeatAvailable, seat0, "the rest of the expired hold is free too")
}

// Expiry, cancel and a second buyer race for the same seats: whatever the
// interleaving, no seat ends with two live items and the reservation ends
// exactly one way.
func TestExpiryRacingCancelAndASecondBuyer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for round := 0; round < 15; round++ {
		event, seats := b.event(t, "A:1x4@100")
		owner := fmt.Sprintf("owner%d", round)
		_, r, err := b.hold(t, event, owner, "k", []int64{seats[0], seats[1]}, "")
		require.NoError(t, err)
		b.expireNow(t, r.ID)
		_ = b.holds.hints.release(context.Background(), event, []int64{seats[0], seats[1]}, r.ID)

		var wg sync.WaitGroup
		var cancelErr, expireErr error
		var buyerStatus int
		wg.Add(3)
		go func() { defer wg.Done(); _, cancelErr = b.holds.Cancel(context.Background(), r.ID, b.uid(owner)) }()
		go func() { defer wg.Done(); _, expireErr = b.expiry.ExpireOnce(context.Background()) }()
		go func() {
			defer wg.Done()
			buyerStatus, _, _ = b.hold(t, event, fmt.Sprintf("second%d", round), "k", []int64{seats[1], seats[2]}, "")
		}()
		wg.Wait()
		require.NoError(t, expireErr)
		if cancelErr != nil {
			require.Equal(t, 409, answerOf(cancelErr).Status, "cancel lost to expiry: %v", cancelErr)
		}
		require.Contains(t, []string{StatusExpired, StatusCancelled}, b.status(t, r.ID))
		require.Contains(t, []int{201, 503}, buyerStatus, "the second buyer wins or is told to retry")
		b.requireNoDoubleOwnership(t, event)
	}
}

// M buyers race for a promotion with K < M uses: exactly K get it.
func TestPromotionCapsUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, seats := b.event(t, "A:2x20@1000")
	const uses, buyers = 5, 25
	require.NoError(t, createPromotion(context.Background(), b.db, event, PromotionSpec{Code: "FIRST5", DiscountBps: 5000, MaxUses: uses}))
	statuses := race(t, buyers, func(i int) int {
		s, _, _ := b.hold(t, event, fmt.Sprintf("promo%d", i), "k", []int64{seats[i]}, "FIRST5")
		return s
	})
	require.Equal(t, uses, statuses[201], "%v", statuses)
	require.Equal(t, buyers-uses, statuses[409], "%v", statuses)
	var used, rows int
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT used FROM promotions WHERE event_id = $1`, event).Scan(&used))
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT count(*) FROM promotion_uses WHERE event_id = $1`, event).Scan(&rows))
	require.Equal(t, uses, used)
	require.Equal(t, uses, rows)

	// One use per user.
	require.NoError(t, createPromotion(context.Background(), b.db, event, PromotionSpec{Code: "ONCE", DiscountBps: 100, MaxUses: 100}))
	_, r, err := b.hold(t, event, "repeat", "k1", []int64{seats[30]}, "ONCE")
	require.NoError(t, err)
	_, err = b.holds.Cancel(context.Background(), r.ID, b.uid("repeat"))
	require.NoError(t, err)
	status, _, err := b.hold(t, event, "repeat", "k2", []int64{seats[31]}, "ONCE")
	require.NoError(t, err, "a cancelled hold returns the use")
	require.Equal(t, 201, status)

	status, _, err = b.hold(t, event, "nobody", "k", []int64{seats[32]}, "NOPE")
	require.Equal(t, 422, status)
	require.Error(t, err)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, seats := b.event(t, "A:1x4@100")
	_, r, err := b.hold(t, event, "lee", "k", []int64{seats[0]}, "")
	require.NoError(t, err)
	_, err = b.holds.Cancel(context.Background(), r.ID, b.uid("mallory"))
	require.Equal(t, 404, answerOf(err).Status, "not the owner: not found")
	res, err := b.holds.Cancel(context.Background(), r.ID, b.uid("lee"))
	require.NoError(t, err)
	require.Equal(t, StatusCancelled, res.Status)
	require.Equal(t, "RELEASED", res.Items[0].Status)
	res, err = b.holds.Cancel(context.Background(), r.ID, b.uid("lee"))
	require.NoError(t, err, "cancelling twice answers the state")
	require.Equal(t, StatusCancelled, res.Status)
	require.False(t, b.desk.live(event, b.uid("lee")))

	_, r2, err := b.hold(t, event, "max", "k", []int64{seats[1]}, "")
	require.NoError(t, err)
	b.expireNow(t, r2.ID)
	_, err = b.expiry.ExpireOnce(context.Background())
	require.NoError(t, err)
	_, err = b.holds.Cancel(context.Background(), r2.ID, b.uid("max"))
	require.Equal(t, 409, answerOf(err).Status, "an expired hold cannot be cancelled")
}

func TestHintsBounceObviousContention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, seats := b.event(t, "A:1x4@100")
	_, _, err := b.hold(t, event, "ned", "k", []int64{seats[0]}, "")
	require.NoError(t, err)
	status, _, err := b.hold(t, event, "oli", "k", []int64{seats[1], seats[0]}, "")
	require.Equal(t, 409, status)
	require.Equal(t, []int64{seats[0]}, answerOf(err).Details["seats"])
	var avail string
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT status FROM seats WHERE id = $1`, seats[1]).Scan(&avail))
	require.Equal(t, SeatAvailable, avail, "the cart failed as a unit")
	left, err := b.rdb.Exists(context.Background(), b.holds.hints.hintKeys(event, []int64{seats[1]})...).Result()
	require.NoError(t, err)
	require.Zero(t, left, "no hint left behind by the refused cart")
	_ = time.Second
}
