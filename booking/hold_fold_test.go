package booking

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A hold read, checked, priced and written in one statement answers what
// the read and the write in Go answered: the same items, prices (every
// band of the scarcity multiplier, the last week's surcharge, a discount
// that rounds), total and expiry, and a body byte for byte as
// mustJSON(Reservation) encodes it, stored as the key's answer.
func TestHoldAloneAnswersWhatTheTwoRoundTripsAnswered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for name, startsIn := range map[string]time.Duration{"two months ahead": 60 * 24 * time.Hour, "within the week": 3 * 24 * time.Hour} {
		t.Run(name, func(t *testing.T) {
			var events [2]string
			var seats [2][]int64
			for i := range events {
				events[i], seats[i] = b.event(t, "A:1x10@1001,B:1x10@999,C:1x10@1333", func(s *EventSpec) {
					s.StartsAt = time.Now().Add(startsIn)
				})
				// Occupancy of 0 %, 50 % and 80 %: the three bands.
				_, err := b.db.Exec(ctx, `UPDATE section_occupancy SET taken = CASE section_id WHEN 'B' THEN 5 WHEN 'C' THEN 8 ELSE 0 END
					WHERE event_id = $1 AND shard = 0`, events[i])
				require.NoError(t, err)
				require.NoError(t, createPromotion(ctx, b.db, events[i], PromotionSpec{Code: "ODD", DiscountBps: 1234, MaxUses: 10}))
			}
			user := fmt.Sprint("ann", int(startsIn.Hours()))
			cart := func(i int) []int64 { return []int64{seats[i][23], seats[i][3], seats[i][14]} }

			status, alone, err := b.hold(t, events[0], user, "k0", cart(0), "ODD")
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, status)
			body := b.storedBody(t, user, "k0")
			require.Equal(t, string(mustJSON(alone)), string(body), "encoded as mustJSON encodes it")
			twoTrips, err := b.holdTwoTrips(t, events[1], user, "k1", cart(1), "ODD")
			require.NoError(t, err)
			var queued Reservation
			require.NoError(t, json.Unmarshal(twoTrips, &queued))

			require.Equal(t, queued.Total, alone.Total)
			require.Equal(t, queued.PromoCode, alone.PromoCode)
			require.Equal(t, queued.Currency, alone.Currency)
			require.Len(t, alone.Items, 3)
			for i, it := range alone.Items {
				want := queued.Items[i]
				want.Seat = it.Seat
				require.Equal(t, want, it)
			}
			week := int64(0)
			if startsIn < 7*24*time.Hour {
				week = surgeLastWeek
			}
			require.Equal(t, []int64{bpsOne + week, surgeHalfSold + week, surgeCap},
				[]int64{alone.Items[0].SurgeBps, alone.Items[1].SurgeBps, alone.Items[2].SurgeBps})
			require.WithinDuration(t, queued.ExpiresAt, alone.ExpiresAt, time.Minute)
			var expires time.Time
			require.NoError(t, b.db.QueryRow(ctx, `SELECT expires_at FROM reservations WHERE id = $1`, alone.ID).Scan(&expires))
			require.True(t, expires.Equal(alone.ExpiresAt), "%s in the database, %s in the answer", expires, alone.ExpiresAt)
		})
	}
}

// storedBody is the stored answer of user's hold under key.
func (b *bundle) storedBody(t *testing.T, user, key string) []byte {
	t.Helper()
	var body []byte
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT response FROM idempotency_keys WHERE user_id = $1 AND operation = $2 AND key = $3`, b.uid(user), opHold, key).Scan(&body))
	return body
}
