package booking

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
)

// holdBest admits user and asks for the best seats; it returns the status
// and the reservation on success.
func (b *bundle) holdBest(t *testing.T, event, user, key string, best bestInput, promo string) (int, *Reservation, error) {
	t.Helper()
	user = b.uid(user)
	pass := b.desk.admit(event, user)
	res, err := b.holds.HoldBest(context.Background(), holdInput{User: user, Event: event, Pass: pass, Key: key, PromoCode: promo}, best)
	if err != nil {
		if e := answerOf(err); e != nil {
			return e.Status, nil, err
		}
		return http.StatusInternalServerError, nil, err
	}
	var r Reservation
	require.NoError(t, json.Unmarshal(res.Body, &r))
	return res.Status, &r, nil
}

// requireAdjacent checks that a reservation's seats are one run of one
// row.
func requireAdjacent(t *testing.T, r *Reservation) {
	t.Helper()
	items := slices.Clone(r.Items)
	slices.SortFunc(items, func(a, b Item) int { return a.Number - b.Number })
	for i := 1; i < len(items); i++ {
		require.Equal(t, items[0].Section, items[i].Section, "reservation %s", r.ID)
		require.Equal(t, items[0].Row, items[i].Row, "reservation %s: one row", r.ID)
		require.Equal(t, items[i-1].Number+1, items[i].Number, "reservation %s: consecutive numbers", r.ID)
	}
}

// The order is documented: the row nearest the stage, its centred run,
// then outward from it; the answer is a named hold's 201, replayed on a
// retry.
func TestBestAvailablePicksInTheDocumentedOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, _ := b.event(t, "A:1x10@100,B:3x10@200")
	best := bestInput{Section: "B", Quantity: 2, Adjacent: true}
	want := [][2]int{{1, 5}, {1, 3}, {1, 7}, {1, 1}, {1, 9}, {2, 5}} // (row, first seat)
	for i, w := range want {
		status, r, err := b.holdBest(t, event, fmt.Sprintf("u%d", i), "k", best, "")
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status)
		require.Len(t, r.Items, 2)
		requireAdjacent(t, r)
		require.Equal(t, w[0], r.Items[0].Row, "hold %d", i)
		require.Equal(t, w[1], min(r.Items[0].Number, r.Items[1].Number), "hold %d", i)
		require.Equal(t, StatusPending, r.Status)
		require.Equal(t, int64(400), r.Total)
	}
	// A retry is the stored answer, byte for byte.
	first, err := b.holds.HoldBest(context.Background(), holdInput{User: b.uid("u0"), Event: event,
		Pass: b.desk.admit(event, b.uid("u0")), Key: "k"}, best)
	require.NoError(t, err)
	require.True(t, first.Replayed)
	var r Reservation
	require.NoError(t, json.Unmarshal(first.Body, &r))
	require.Equal(t, 5, min(r.Items[0].Number, r.Items[1].Number))
	// The same key for another request is refused.
	_, _, err = b.holdBest(t, event, "u0", "k", bestInput{Section: "B", Quantity: 3, Adjacent: true}, "")
	require.ErrorIs(t, err, ErrKeyReused)
	b.requireNoDoubleOwnership(t, event)
}

func TestBestAvailableRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, seats := b.event(t, "A:2x3@100,B:1x4@500")
	cases := []struct {
		name string
		best bestInput
		code string
	}{
		{"no quantity", bestInput{Section: "A"}, "bad_request"},
		{"too many", bestInput{Section: "A", Quantity: 7}, "bad_request"},
		{"bad section id", bestInput{Section: "A B", Quantity: 1}, "bad_request"},
		{"negative cap", bestInput{Section: "A", Quantity: 1, MaxPrice: -1}, "bad_request"},
		{"no such section", bestInput{Section: "Z", Quantity: 1}, "section_not_found"},
		{"not adjacent anywhere", bestInput{Section: "A", Quantity: 4, Adjacent: true}, "no_seats_available"},
		{"over the cap", bestInput{Section: "B", Quantity: 1, MaxPrice: 499}, "no_seats_available"},
	}
	for _, c := range cases {
		_, _, err := b.holdBest(t, event, "refused-"+c.name, "k", c.best, "")
		e := answerOf(err)
		require.NotNil(t, e, "%s: %v", c.name, err)
		require.Equal(t, c.code, e.Code, "%s: %v", c.name, err)
	}
	e := answerOf(func() error {
		_, _, err := b.holdBest(t, event, "refused-free", "k", bestInput{Section: "A", Quantity: 4, Adjacent: true}, "")
		return err
	}())
	require.Equal(t, map[string]any{"section": "A", "free": int64(6)}, e.Details)
	// Four of A taken: two remain, one per row: no two adjacent, yet two
	// seats anywhere.
	for i, cart := range [][]int64{{seats[0], seats[1]}, {seats[4], seats[5]}} {
		status, _, err := b.hold(t, event, fmt.Sprintf("named%d", i), "k", cart, "")
		require.Equal(t, http.StatusCreated, status, "%v", err)
	}
	_, _, err := b.holdBest(t, event, "pair", "k", bestInput{Section: "A", Quantity: 2, Adjacent: true}, "")
	require.ErrorIs(t, err, ErrNoSeatsAvailable)
	status, r, err := b.holdBest(t, event, "any2", "k", bestInput{Section: "A", Quantity: 2}, "")
	require.Equal(t, http.StatusCreated, status, "%v", err)
	require.ElementsMatch(t, []int64{seats[2], seats[3]}, []int64{r.Items[0].Seat, r.Items[1].Seat})
	// A buyer with a checkout in progress is told so.
	_, _, err = b.holdBest(t, event, "any2", "k2", bestInput{Section: "B", Quantity: 1}, "")
	require.ErrorIs(t, err, ErrPendingCheckout)
	// A section sold out for the cap: nothing was written by the refusals.
	b.requireNoDoubleOwnership(t, event)
	require.Len(t, b.liveItems(t, event), 6)
}

// The correctness run: 2,000 buyers ask for the best two adjacent
// seats of a 500-seat section at once. Exactly 250 get a pair, every pair
// is adjacent, nobody owns a seat twice, and the rest are told 409
// no_seats_available.
func TestBestAvailableTwoThousandBuyersFor250Pairs(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.LockTimeout, c.StatementTimeout = time.Minute, time.Minute })
	event, _ := b.event(t, "A:2x10@100,B:10x50@300")
	const buyers = 2000
	var mu sync.Mutex
	var held []*Reservation
	other := map[string]int{}
	// All start at once, at most 64 in flight: past that the test's own
	// Redis client, not the hold, is what is measured.
	inFlight := make(chan struct{}, 64)
	statuses := race(t, buyers, func(i int) int {
		inFlight <- struct{}{}
		defer func() { <-inFlight }()
		status, r, err := b.holdBest(t, event, fmt.Sprintf("buyer%d", i), "k", bestInput{Section: "B", Quantity: 2, Adjacent: true}, "")
		mu.Lock()
		defer mu.Unlock()
		switch {
		case status == http.StatusCreated:
			held = append(held, r)
		case err != nil && !isNoSeats(err):
			other[err.Error()]++
		}
		return status
	})
	require.Equal(t, 250, statuses[http.StatusCreated], "%v %v", statuses, other)
	require.Equal(t, buyers-250, statuses[http.StatusConflict], "%v %v", statuses, other)
	require.Empty(t, other)
	for _, r := range held {
		require.Len(t, r.Items, 2)
		requireAdjacent(t, r)
		require.Equal(t, "B", r.Items[0].Section)
	}
	require.Len(t, b.liveItems(t, event), 500)
	b.requireNoDoubleOwnership(t, event)
}

func isNoSeats(err error) bool {
	e := answerOf(err)
	return e != nil && e.Code == "no_seats_available"
}

// Best-available buyers and buyers naming seats race on one section: the
// invariants are the same. Named buyers ask for random adjacent pairs.
func TestBestAvailableMixedWithNamedHolds(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.LockTimeout, c.StatementTimeout = time.Minute, time.Minute })
	event, seats := b.event(t, "B:10x20@300")
	const buyers = 400
	var mu sync.Mutex
	var held []*Reservation
	// At most 64 in flight, as in the run above: 400 at once waited past
	// the Redis client's pool timeout on a loaded machine (CI answered
	// them 503), which measured the test's client, not the holds.
	inFlight := make(chan struct{}, 64)
	statuses := race(t, buyers, func(i int) int {
		inFlight <- struct{}{}
		defer func() { <-inFlight }()
		var status int
		var r *Reservation
		var err error
		if i%2 == 0 {
			status, r, err = b.holdBest(t, event, fmt.Sprintf("best%d", i), "k", bestInput{Section: "B", Quantity: 2, Adjacent: true}, "")
		} else {
			row, first := rand.IntN(10), rand.IntN(19)
			cart := []int64{seats[row*20+first], seats[row*20+first+1]}
			status, r, err = b.hold(t, event, fmt.Sprintf("named%d", i), "k", cart, "")
		}
		if status == http.StatusCreated {
			mu.Lock()
			held = append(held, r)
			mu.Unlock()
		} else if status != http.StatusConflict {
			t.Errorf("buyer %d: %d %v", i, status, err)
		}
		return status
	})
	taken := 0
	for _, r := range held {
		require.Len(t, r.Items, 2)
		requireAdjacent(t, r)
		taken += 2
	}
	require.Equal(t, statuses[http.StatusCreated], len(held))
	require.Len(t, b.liveItems(t, event), taken)
	require.LessOrEqual(t, taken, 200)
	b.requireNoDoubleOwnership(t, event)
}

// A best-available hold costs one round trip to PostgreSQL on an idle
// server, as a named hold that finds a writer free: the timeouts and the
// one statement that picks, reads, prices, writes and commits
// (bestAloneSQL). So does a replay, and so does every refusal the
// statement answers from what it read. It took two before: a batch that
// opened a transaction, read and picked, then one that wrote and
// committed (and a refusal after the pick: the pick, then the rollback).
func TestBestAvailableRoundTrips(t *testing.T) {
	t.Parallel()
	db, trips := countingPool(t, 1)
	b := setupWith(t, db, testenv.Redis(t))
	event, _ := b.event(t, "A:2x10@1000,B:1x4@2000")
	require.NoError(t, createPromotion(context.Background(), db, event, PromotionSpec{Code: "TEN", DiscountBps: 1000, MaxUses: 100}))
	best := bestInput{Section: "A", Quantity: 2, Adjacent: true}
	for i, promo := range []string{"", "TEN"} { // every statement prepared on the one connection
		status, _, err := b.holdBest(t, event, fmt.Sprintf("warm%d", i), "k", best, promo)
		require.Equal(t, http.StatusCreated, status, "%v", err)
	}
	trips.take()
	cases := []struct {
		name   string
		user   string
		key    string
		best   bestInput
		promo  string
		status int
	}{
		{"a hold", "one", "k", best, "", 201},
		{"a hold with a promotion", "two", "k", bestInput{Section: "A", Quantity: 3}, "TEN", 201},
		{"a replay", "one", "k", best, "", 201},
		{"a key reused", "one", "k", bestInput{Section: "A", Quantity: 1}, "", 422},
		{"a pending checkout", "two", "k2", best, "", 409},
		{"no seats fit", "three", "k", bestInput{Section: "A", Quantity: 6, Adjacent: true, MaxPrice: 999}, "", 409},
		{"over the cap", "three", "k", bestInput{Section: "B", Quantity: 1, MaxPrice: 1999}, "", 409},
		{"an unknown promotion", "three", "k", best, "NOPE", 422},
		{"no such section", "three", "k", bestInput{Section: "Z", Quantity: 1}, "", 404},
	}
	for _, c := range cases {
		status, _, err := b.holdBest(t, event, c.user, c.key, c.best, c.promo)
		n, statements := trips.take()
		t.Logf("%s: %d %v, %d round trips, %d statements", c.name, status, err, n, statements)
		require.Equal(t, c.status, status, "%s: %v", c.name, err)
		require.Equal(t, 1, n, c.name)
		if c.status == http.StatusCreated && c.name != "a replay" {
			require.Equal(t, 2, statements, "%s: the timeouts and the hold", c.name)
		}
	}
	b.requireNoDoubleOwnership(t, event)
}

// A named hold whose seat another transaction holds locked is refused at
// once (409 seats_being_held, a jittered retry suggestion), not queued on
// the lock: here the lock is only let go once the hold has answered, and
// the lock timeout is a minute. Before, the hold waited for the lock.
func TestHotNamedSeatsFailFast(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.LockTimeout, c.StatementTimeout = time.Minute, time.Minute })
	event, seats := b.event(t, "A:1x10@100")
	ctx := context.Background()
	tx, err := b.db.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT id FROM seats WHERE id = $1 FOR UPDATE`, seats[4])
	require.NoError(t, err)
	answered := make(chan struct{})
	go func() {
		// Let the lock go anyway, so that a hold that waits ends.
		select {
		case <-answered:
		case <-time.After(5 * time.Second):
		}
		_ = tx.Rollback(ctx)
	}()
	// Each buyer reaches PostgreSQL: the refusal let the hints go.
	retries := map[time.Duration]bool{}
	for i := range 5 {
		_, _, err := b.hold(t, event, fmt.Sprintf("hot%d", i), "k", []int64{seats[3], seats[4]}, "")
		require.ErrorIs(t, err, ErrSeatsBeingHeld)
		e := answerOf(err)
		require.Equal(t, http.StatusConflict, e.Status)
		require.Equal(t, "seats_being_held", e.Code)
		require.Greater(t, e.RetryAfter, time.Duration(0))
		require.Equal(t, e.RetryAfter.Milliseconds(), e.Details["retryAfterMs"])
		retries[e.RetryAfter] = true
	}
	require.Greater(t, len(retries), 1, "the retry suggestions are jittered")
	close(answered)
	require.Eventually(t, func() bool {
		status, _, _ := b.hold(t, event, "after", fmt.Sprintf("k%d", time.Now().UnixNano()), []int64{seats[3], seats[4]}, "")
		return status == http.StatusCreated
	}, 10*time.Second, 50*time.Millisecond, "once the lock is let go the seats can be held")
	b.requireNoDoubleOwnership(t, event)
}

// Over HTTP, as the OpenAPI document says (spectest checks every request
// and answer): a best-available body, its refusals, and a named hold that
// meets a seat being held.
func TestBestAvailableOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	do := serveHTTP(t, b)
	event, seats := b.event(t, "A:1x4@100,B:2x3@200")
	user := b.uid("web")
	tok, err := auth.SignDev(testSecret, user, time.Hour, nil, "", "")
	require.NoError(t, err)
	hdr := func(key string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + tok, HeaderAdmissionPass: b.desk.admit(event, user),
			HeaderIdempotencyKey: key, "Content-Type": "application/json"}
	}
	path := "/v1/events/" + event + "/holds"
	for _, bad := range []string{
		`{"seats":[1],"section":"A","quantity":1}`,
		`{"quantity":2}`,
		`{"section":"A","quantity":0}`,
		`{"section":"A","quantity":2,"adjacent":"yes"}`,
	} {
		code, _, body := do("POST", path, bad, hdr("bad"))
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", bad, body)
	}
	code, _, body := do("POST", path, `{"section":"B","quantity":4,"adjacent":true}`, hdr("k1"))
	require.Equal(t, http.StatusConflict, code, body)
	require.JSONEq(t, `{"error":{"code":"no_seats_available","message":"no seats of the section fit the request","section":"B","free":6}}`, body)
	code, _, body = do("POST", path, `{"section":"Z","quantity":1}`, hdr("k2"))
	require.Equal(t, http.StatusNotFound, code, body)
	code, _, first := do("POST", path, `{"section":"B","quantity":3,"adjacent":true,"maxPrice":200}`, hdr("k3"))
	require.Equal(t, http.StatusCreated, code, first)
	var r Reservation
	require.NoError(t, json.Unmarshal([]byte(first), &r))
	require.Len(t, r.Items, 3)
	require.Equal(t, 1, r.Items[0].Row)
	code, h, again := do("POST", path, `{"section":"B","quantity":3,"adjacent":true,"maxPrice":200}`, hdr("k3"))
	require.Equal(t, http.StatusCreated, code)
	require.Equal(t, "true", h.Get("Idempotent-Replayed"))
	require.Equal(t, first, again)

	// A named seat being held by another transaction: 409 with a retry.
	tx, err := b.db.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(context.Background(), `SELECT id FROM seats WHERE id = $1 FOR UPDATE`, seats[0])
	require.NoError(t, err)
	other := b.uid("web2")
	tok2, err := auth.SignDev(testSecret, other, time.Hour, nil, "", "")
	require.NoError(t, err)
	code, h, body = do("POST", path, `{"seats":[`+itoa(seats[0])+`]}`, map[string]string{"Authorization": "Bearer " + tok2,
		HeaderAdmissionPass: b.desk.admit(event, other), HeaderIdempotencyKey: "n1", "Content-Type": "application/json"})
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, `"code":"seats_being_held"`)
	require.Contains(t, body, `"retryAfterMs":`)
	require.NotEmpty(t, h.Get("Retry-After"))
}

// The sections overview: every section's price, multiplier and free seats,
// no seats; it follows holds as the seat map does.
func TestSectionsOverview(t *testing.T) {
	t.Parallel()
	br := setupBrowse(t, testenv.Redis(t))
	event, _ := br.event(t, "A:2x5@100,B:1x4@300")
	resp, body := br.get(t, "/v1/events/"+event+"/sections")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var v SectionsView
	require.NoError(t, json.Unmarshal(body, &v))
	require.Equal(t, 14, v.SeatCount)
	require.Equal(t, []SectionView{
		{ID: "A", Name: "Section A", BasePrice: 100, MultiplierBps: 10000, SeatCount: 10, Available: 10},
		{ID: "B", Name: "Section B", BasePrice: 300, MultiplierBps: 10000, SeatCount: 4, Available: 4},
	}, v.Sections)
	require.NotContains(t, string(body), `"seats"`)
	status, _, err := br.holdBest(t, event, "o", "k", bestInput{Section: "B", Quantity: 3, Adjacent: true}, "")
	require.Equal(t, http.StatusCreated, status, "%v", err)
	require.Eventually(t, func() bool {
		_, body := br.get(t, "/v1/events/"+event+"/sections")
		var v SectionsView
		return json.Unmarshal(body, &v) == nil && v.Sections[1].Available == 1 && v.Sections[1].MultiplierBps == 12500
	}, 10*time.Second, 50*time.Millisecond, "the overview follows the hold")
	resp, _ = br.get(t, "/v1/events/no-such-event/sections")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// Identical best-available requests racing under one key hold once: each
// picks its own seats (SKIP LOCKED), the first to commit wins the key,
// the others roll back and answer its stored response.
func TestBestAvailableConcurrentRetriesHoldOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, _ := b.event(t, "A:4x10@100")
	user := b.uid("retrier")
	pass := b.desk.admit(event, user)
	var mu sync.Mutex
	bodies := map[string]int{}
	statuses := race(t, 8, func(int) int {
		res, err := b.holds.HoldBest(context.Background(), holdInput{User: user, Event: event, Pass: pass, Key: "same"},
			bestInput{Section: "A", Quantity: 2, Adjacent: true})
		if err != nil {
			return answerOf(err).Status
		}
		mu.Lock()
		bodies[string(res.Body)]++
		mu.Unlock()
		return res.Status
	})
	require.Equal(t, map[int]int{http.StatusCreated: 8}, statuses)
	require.Len(t, bodies, 1, "every try answers the one hold")
	require.Len(t, b.liveItems(t, event), 2)
	b.requireNoDoubleOwnership(t, event)
}

// A buyer whose own checkout is due is not refused: the statement reads
// it and picks nothing, the checkout is ended (as the expiry worker would)
// and the hold runs again. Not parallel: another test's expirer could end
// the due checkout first (the hold would pass without this path).
func TestBestAvailableEndsTheBuyersDueCheckout(t *testing.T) {
	b := setup(t)
	event, _ := b.event(t, "A:2x10@100")
	best := bestInput{Section: "A", Quantity: 2, Adjacent: true}
	status, first, err := b.holdBest(t, event, "due", "k1", best, "")
	require.Equal(t, http.StatusCreated, status, "%v", err)
	b.expireNow(t, first.ID)
	status, second, err := b.holdBest(t, event, "due", "k2", best, "")
	require.Equal(t, http.StatusCreated, status, "%v", err)
	require.Equal(t, StatusExpired, b.status(t, first.ID))
	requireAdjacent(t, second)
	require.Equal(t, []int{5, 6}, []int{min(second.Items[0].Number, second.Items[1].Number), max(second.Items[0].Number, second.Items[1].Number)},
		"the ended checkout's seats are free again: the centre of row 1")
	require.Len(t, b.liveItems(t, event), 2)
	b.requireNoDoubleOwnership(t, event)
}

// A buyer who could only half lock every fitting run (another transaction
// holds the seat both runs share) does not wait holding the halves: it
// runs its statement again a few times, then is told to retry (503), and
// leaves no seat locked. Once the other lets go, the run is held.
func TestBestAvailableHalfLockedRunsAreLetGo(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.LockTimeout, c.StatementTimeout = time.Minute, time.Minute })
	event, seats := b.event(t, "A:1x3@100") // runs of 2: seats 1-2 and 2-3
	ctx := context.Background()
	other, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, `SELECT id FROM seats WHERE id = $1 FOR UPDATE`, seats[1])
	require.NoError(t, err)

	best := bestInput{Section: "A", Quantity: 2, Adjacent: true}
	start := time.Now()
	status, _, err := b.holdBest(t, event, "half", "k", best, "")
	require.Equal(t, http.StatusServiceUnavailable, status, "%v", err)
	require.Less(t, time.Since(start), 5*time.Second, "it did not wait for the lock")
	check, err := b.db.Begin(ctx)
	require.NoError(t, err)
	_, err = check.Exec(ctx, `SELECT id FROM seats WHERE id = ANY($1) FOR UPDATE NOWAIT`, []int64{seats[0], seats[2]})
	require.NoError(t, err, "the halves were let go")
	require.NoError(t, check.Rollback(ctx))

	require.NoError(t, other.Rollback(ctx))
	status, r, err := b.holdBest(t, event, "half", "k2", best, "")
	require.Equal(t, http.StatusCreated, status, "%v", err)
	require.Equal(t, []int64{seats[0], seats[1]}, []int64{r.Items[0].Seat, r.Items[1].Seat})
	b.requireNoDoubleOwnership(t, event)
}
