package booking

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/admission"
	"github.com/presenced/presenced/internal/testenv"
)

// A hold stuck before its commit is what a process killed mid-hold leaves
// behind for ever: its seat hints. They must block other buyers for the
// claim time (seconds), not for the hold time (10 minutes): the seats are
// AVAILABLE in PostgreSQL and on the seat map all along.
func TestHintsOfAnUncommittedHoldLapseInSeconds(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) {
		c.HintClaimTTL = time.Second
		c.LockTimeout = 30 * time.Second // the stuck hold waits, as a dead one would
		c.StatementTimeout = 30 * time.Second
	})
	event, seats := b.event(t, "A:1x10@100")
	ctx := context.Background()

	// A transaction that has not committed holds the hold's idempotency
	// key (an identical request mid-commit): the hold's write waits on it
	// before it locks any seat, as a dead hold would. (A seat's row lock
	// no longer makes a hold wait: it is refused as seats_being_held.)
	blocker, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(ctx) }()
	_, err = blocker.Exec(ctx, `INSERT INTO idempotency_keys (user_id, operation, key, fingerprint, status_code, response)
		VALUES ($1, $2, 'k1', '\x00', 201, '{}')`, b.uid("stuck"), opHold)
	require.NoError(t, err)

	stuck := make(chan error, 1)
	go func() {
		_, _, err := b.hold(t, event, "stuck", "k1", []int64{seats[0], seats[1]}, "")
		stuck <- err
	}()
	hk := b.holds.hints.hintKeys(event, []int64{seats[1]})[0]
	testenv.Eventually(t, 10*time.Second, func() bool { return b.rdb.Exists(ctx, hk).Val() == 1 }, "the stuck hold hinted its seats")
	ttl := b.rdb.PTTL(ctx, hk).Val()
	require.LessOrEqual(t, ttl, time.Second, "a hint before the commit lives for the claim time, not the hold's 10 minutes")

	// Another buyer wants seat 1 (not locked in PostgreSQL): refused only
	// until the claim time is over.
	testenv.Eventually(t, 10*time.Second, func() bool {
		status, _, _ := b.hold(t, event, "next", "k2", []int64{seats[1]}, "")
		return status == http.StatusCreated
	}, "seat 1 is sold to the next buyer once the stuck hint lapsed")
	require.NoError(t, blocker.Rollback(ctx))
	select {
	case err := <-stuck:
		require.Error(t, err, "the stuck hold finds seat 1 taken")
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck hold never finished")
	}
	b.requireNoDoubleOwnership(t, event)
}

// Once committed, a hold's seats stay a cheap refusal: its hints keep
// their claim time (the commit costs no second script call), and once they
// lapse the first buyer PostgreSQL refuses a seat hints it again for its
// holder, for the rest of the hold, while that buyer's own hints go and
// its lease is put back where the gate found it. The next buyer is refused
// by Redis.
func TestCommittedHoldKeepsItsSeatsHinted(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.HintClaimTTL, c.StatementTimeout = time.Second, time.Second })
	ctx := context.Background()
	event, seats := b.event(t, "A:1x10@100")
	_, _, err := b.hold(t, event, "first", "k", []int64{seats[0]}, "") // the process learns the event's hold time
	require.NoError(t, err)
	status, r, err := b.hold(t, event, "keeper", "k", []int64{seats[3]}, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	hk := b.holds.hints.hintKeys(event, []int64{seats[3], seats[4]})
	require.True(t, strings.HasPrefix(b.rdb.Get(ctx, hk[0]).Val(), r.ID+"|"), "the hint names its reservation")
	require.LessOrEqual(t, b.rdb.PTTL(ctx, hk[0]).Val(), time.Second, "the claim time")
	status, _, err = b.hold(t, event, "rival", "k", []int64{seats[3]}, "")
	require.Equal(t, http.StatusConflict, status, "%v", err)
	require.Equal(t, float64(1), testutil.ToFloat64(b.m.hintRejections), "refused by the hint")

	testenv.Eventually(t, 10*time.Second, func() bool { return b.rdb.Exists(ctx, hk[0]).Val() == 0 }, "the claim lapsed")
	late := b.uid("late")
	pass := b.desk.admit(event, late)
	leased, err := b.rdb.ZScore(ctx, b.desk.LeaseKey(event), late).Result()
	require.NoError(t, err)
	_, err = b.holds.Hold(ctx, holdInput{User: late, Event: event, Pass: pass, Key: "k", Seats: []int64{seats[3], seats[4]}})
	require.Equal(t, http.StatusConflict, answerOf(err).Status, "%v", err)
	require.True(t, strings.HasPrefix(b.rdb.Get(ctx, hk[0]).Val(), r.ID+"|"), "hinted again for its holder")
	require.Greater(t, b.rdb.PTTL(ctx, hk[0]).Val(), time.Minute, "for the rest of the hold")
	require.Zero(t, b.rdb.Exists(ctx, hk[1]).Val(), "the refused buyer's own hint is gone")
	again, err := b.rdb.ZScore(ctx, b.desk.LeaseKey(event), late).Result()
	require.NoError(t, err)
	require.Equal(t, leased, again, "the refused buyer's lease is where the gate found it")

	status, _, err = b.hold(t, event, "rival2", "k", []int64{seats[3]}, "")
	require.Equal(t, http.StatusConflict, status, "%v", err)
	require.Equal(t, float64(2), testutil.ToFloat64(b.m.hintRejections), "refused by the hint again")
	b.requireNoDoubleOwnership(t, event)
}

// A retry of a committed hold answers its stored response whatever the
// gates say now: the lease was released (a cancel, its time, Redis
// restarted empty) or the user's rate is spent.
func TestCommittedHoldReplaysPastTheGates(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.HoldsPerMinute = 2 })
	event, seats := b.event(t, "A:1x10@100")
	ctx := context.Background()
	user := b.uid("ida")
	in := holdInput{User: user, Event: event, Pass: b.desk.admit(event, user), Key: "once", Seats: []int64{seats[4]}}
	first, err := b.holds.Hold(ctx, in)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, first.Status)

	require.NoError(t, b.rdb.ZRem(ctx, b.desk.LeaseKey(event), user).Err()) // the lease is gone
	again, err := b.holds.Hold(ctx, in)
	require.NoError(t, err, "not 403: the hold was committed")
	require.True(t, again.Replayed)
	require.Equal(t, string(first.Body), string(again.Body), "byte for byte")

	for i := 0; i < 3; i++ { // past holds_per_minute
		again, err = b.holds.Hold(ctx, in)
		require.NoError(t, err, "not 429: the hold was committed")
		require.Equal(t, string(first.Body), string(again.Body))
	}

	b.desk.down.Store(true) // the admission store is unreachable
	defer b.desk.down.Store(false)
	again, err = b.holds.Hold(ctx, in)
	require.NoError(t, err, "not 503")
	require.Equal(t, string(first.Body), string(again.Body))

	// A different request under the key, or a new key, still meets the gate.
	other := in
	other.Key = "new"
	_, err = b.holds.Hold(ctx, other)
	require.Equal(t, http.StatusTooManyRequests, answerOf(err).Status)
	changed := in
	changed.Seats = []int64{seats[5]}
	_, err = b.holds.Hold(ctx, changed)
	require.Equal(t, http.StatusTooManyRequests, answerOf(err).Status)
}

// A retry of a committed hold that was cancelled since, its seat now held
// (and hinted) by another buyer, is answered its stored 201, not refused
// by the other buyer's hint: the hint refusal looks up the key's answer
// first, like the gates.
func TestCommittedHoldReplaysPastAnotherBuyersHints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, seats := b.event(t, "A:1x10@100")
	ctx := context.Background()
	user := b.uid("first")
	in := holdInput{User: user, Event: event, Pass: b.desk.admit(event, user), Key: "once", Seats: []int64{seats[2]}}
	first, err := b.holds.Hold(ctx, in)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, first.Status)
	var r Reservation
	require.NoError(t, json.Unmarshal(first.Body, &r))
	_, err = b.holds.Cancel(ctx, r.ID, user)
	require.NoError(t, err)

	status, _, err := b.hold(t, event, "second", "k", []int64{seats[2]}, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, "the seat is the second buyer's now")

	in.Pass = b.desk.admit(event, user) // admitted again: the gates let the retry through
	again, err := b.holds.Hold(ctx, in)
	require.NoError(t, err, "not 409: the hold was committed")
	require.True(t, again.Replayed)
	require.Equal(t, string(first.Body), string(again.Body), "byte for byte")

	// A new request for the seat still meets the hint.
	_, err = b.holds.Hold(ctx, holdInput{User: user, Event: event, Pass: in.Pass, Key: "new", Seats: []int64{seats[2]}})
	require.Equal(t, http.StatusConflict, answerOf(err).Status)
}

// A reservation that ends leaves, in its own transaction, an outbox event
// that releases its seat hints again: a process killed between the commit
// and the release, or a Redis failing then, does not block the seats for
// the hold's time.
func TestEndedReservationReleasesHintsDurably(t *testing.T) {
	t.Parallel()
	b := setup(t)
	event, seats := b.event(t, "A:1x10@100")
	_, r, err := b.hold(t, event, "leaver", "k", []int64{seats[6], seats[7]}, "")
	require.NoError(t, err)
	_, err = b.holds.Cancel(context.Background(), r.ID, b.uid("leaver"))
	require.NoError(t, err)
	var payload []byte
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT payload FROM outbox WHERE kind = $1 AND aggregate_id = $2`, KindHintsReleased, r.ID).Scan(&payload))
	var p HintsReleased
	require.NoError(t, json.Unmarshal(payload, &p))
	require.Equal(t, HintsReleased{Event: event, Reservation: r.ID, Seats: []int64{seats[6], seats[7]}}, p)
}

// cutFromPostgres is a second holds plane on the bundle's Redis keys whose
// PostgreSQL is out of reach (a refused port): the front plane during a
// partition, while the first plane's writes stand.
func (b *bundle) cutFromPostgres(t *testing.T) *holdsPlane {
	t.Helper()
	dead, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(dead.Close)
	cut, err := newHolds(holdsDeps{DB: dead, Redis: b.rdb, Keys: b.ks, Admission: b.desk,
		Leases: admission.NewLeases(b.rdb, b.ks, time.Second), Config: b.cfg, Metrics: b.m, Log: testenv.Logger()})
	require.NoError(t, err)
	return cut
}

// A retry of a committed hold refused before PostgreSQL (its rate spent,
// its lease gone) while PostgreSQL is out of reach is answered 503, never
// the refusal: the buyer owns the
// seats, and a 429, 403 or 409 would tell them to give up. Once PostgreSQL
// answers, the retry gets its stored 201.
func TestGateRefusalOfARetryIsNotDefinitiveWithoutPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Booking) { c.HoldsPerMinute = 1 })
	event, seats := b.event(t, "A:1x10@100")
	ctx := context.Background()
	user := b.uid("ida")
	in := holdInput{User: user, Event: event, Pass: b.desk.admit(event, user), Key: "once", Seats: []int64{seats[1]}}
	first, err := b.holds.Hold(ctx, in)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, first.Status)

	cut := b.cutFromPostgres(t)
	_, err = cut.Hold(ctx, in) // the rate is spent
	require.Equal(t, http.StatusServiceUnavailable, answerOf(err).Status, "not 429: %v", err)
	require.NoError(t, b.rdb.ZRem(ctx, b.desk.LeaseKey(event), user).Err())
	_, err = cut.Hold(ctx, in) // and the lease is gone
	require.Equal(t, http.StatusServiceUnavailable, answerOf(err).Status, "not 403: %v", err)

	again, err := b.holds.Hold(ctx, in) // PostgreSQL answers again
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, string(first.Body), string(again.Body))

	// Best available meets the same gates.
	_, err = cut.HoldBest(ctx, holdInput{User: user, Event: event, Pass: in.Pass, Key: "best"}, bestInput{Section: "A", Quantity: 1})
	require.Equal(t, http.StatusServiceUnavailable, answerOf(err).Status, "not 429 or 403: %v", err)
}

// A stay hold's retry refused by the rate while PostgreSQL is out of
// reach is a 503 too; with PostgreSQL back it gets its stored 201.
func TestStayGateRefusalOfARetryIsNotDefinitiveWithoutPostgres(t *testing.T) {
	t.Parallel()
	b := setupStays(t, setup(t, func(c *config.Booking) { c.HoldsPerMinute = 1 }))
	hotel, _ := b.hotel(t, "std:3x2@10000")
	req := StayHoldRequest{RoomType: "std", CheckIn: night(3), CheckOut: night(5), Rooms: 1, Guests: 2}
	status, first, err := b.holdStay(t, hotel, "ana", "k1", req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)

	cut := newStays(b.cutFromPostgres(t), b.sm)
	in := stayInput{User: b.uid("ana"), Hotel: hotel, Key: "k1", Req: req}
	_, err = cut.HoldStay(context.Background(), in)
	require.Equal(t, http.StatusServiceUnavailable, answerOf(err).Status, "not 429: %v", err)

	again, err := b.stays.HoldStay(context.Background(), in)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	var r Reservation
	require.NoError(t, json.Unmarshal(again.Body, &r))
	require.Equal(t, first.ID, r.ID)
}
