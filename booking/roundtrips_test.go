package booking

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// tripCounter counts the round trips a pool makes to PostgreSQL and the
// statements they carry: a query or exec is one trip and one statement, a
// batch one trip and as many statements as it queues.
type tripCounter struct {
	mu                sync.Mutex
	trips, statements int
}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if d.SQL != "-- ping" { // the pool's own check of an idle connection
		c.mu.Lock()
		c.trips++
		c.statements++
		c.mu.Unlock()
	}
	return ctx
}

func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	c.trips++
	c.statements += d.Batch.Len()
	c.mu.Unlock()
	return ctx
}

func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// take returns the counts since the last call.
func (c *tripCounter) take() (trips, statements int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	trips, statements = c.trips, c.statements
	c.trips, c.statements = 0, 0
	return trips, statements
}

// countingPool is a pool of conns connections on the package's database
// whose round trips are counted. Statements are prepared once per
// connection, a trip of its own that is not counted: with one connection
// and after a warm-up, every trip is the hold's own.
func countingPool(t testing.TB, conns int32) (*pgxpool.Pool, *tripCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	require.NoError(t, err)
	cfg.MaxConns = conns
	c := &tripCounter{}
	cfg.ConnConfig.Tracer = c
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db, c
}

// A successful hold costs one round trip to PostgreSQL when it finds a
// writer free (the timeouts and the one statement that reads, checks,
// prices, writes and commits), and so does a refusal (the statement
// answers it from what it read; a seat another buyer hinted: the lookup
// of the key's stored answer). It took two before: a batch of key lookups,
// then a batch of writes.
func TestHoldRoundTrips(t *testing.T) {
	t.Parallel()
	db, trips := countingPool(t, 1)
	b := setupWith(t, db, testenv.Redis(t))
	event, seats := b.event(t, "A:2x10@1000,B:1x10@2000")
	require.NoError(t, createPromotion(context.Background(), db, event, PromotionSpec{Code: "TEN", DiscountBps: 1000, MaxUses: 100}))
	// Warm-up: every statement prepared on the one connection.
	for i, promo := range []string{"", "TEN"} {
		status, _, err := b.hold(t, event, fmt.Sprintf("warm%d", i), "k", []int64{seats[i], seats[25+i]}, promo)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status)
	}
	trips.take()

	cases := []struct {
		name         string
		run          func() int
		status, most int
	}{
		{"a hold of one section", func() int { s, _, _ := b.hold(t, event, "one", "k", []int64{seats[3], seats[4]}, ""); return s }, 201, 1},
		{"a hold of two sections with a promotion", func() int {
			s, _, _ := b.hold(t, event, "two", "k", []int64{seats[5], seats[27]}, "TEN")
			return s
		}, 201, 1},
		{"a replay", func() int { s, _, _ := b.hold(t, event, "one", "k", []int64{seats[3], seats[4]}, ""); return s }, 201, 1},
		{"a key reused", func() int { s, _, _ := b.hold(t, event, "one", "k", []int64{seats[9]}, ""); return s }, 422, 1},
		{"a pending checkout", func() int { s, _, _ := b.hold(t, event, "one", "k2", []int64{seats[9]}, ""); return s }, 409, 1},
		{"a seat taken, its hint lost", func() int {
			_ = b.rdb.Del(context.Background(), b.holds.hints.hintKeys(event, []int64{seats[3]})...).Err()
			s, _, _ := b.hold(t, event, "late", "k", []int64{seats[3], seats[8]}, "")
			return s
		}, 409, 1},
		{"a seat hinted", func() int { s, _, _ := b.hold(t, event, "later", "k", []int64{seats[4]}, ""); return s }, 409, 1},
		{"an unknown seat", func() int { s, _, _ := b.hold(t, event, "lost", "k", []int64{seats[9], 1 << 60}, ""); return s }, 400, 1},
	}
	for _, c := range cases {
		status := c.run()
		n, statements := trips.take()
		t.Logf("%s: %d, %d round trips, %d statements", c.name, status, n, statements)
		require.Equal(t, c.status, status, c.name)
		require.LessOrEqual(t, n, c.most, c.name)
		if c.status == http.StatusCreated && c.name != "a replay" {
			require.Equal(t, 1, n, c.name)
			require.Equal(t, 2, statements, "%s: the timeouts and the hold", c.name)
		}
	}

	// Refused at the gate (no lease): the stored answer is looked up (one trip).
	_, err := b.holds.Hold(context.Background(), holdInput{User: b.uid("gate"), Event: event, Pass: "x", Key: "k", Seats: []int64{seats[9]}})
	require.Equal(t, http.StatusForbidden, answerOf(err).Status)
	n, _ := trips.take()
	require.Equal(t, 1, n)
}

// Every statement of a hold runs its one generic plan, however many holds a
// connection serves: PostgreSQL would otherwise plan some of them anew on
// every execution (the array of seats makes a custom plan look cheaper),
// about a sixth of its CPU per hold. TestHoldQueryPlans shows the generic
// plans are key lookups.
func TestHoldStatementsAreNotPlannedPerExecution(t *testing.T) {
	t.Parallel()
	db, _ := countingPool(t, 1)
	b := setupWith(t, db, testenv.Redis(t))
	event, seats := b.event(t, "A:4x10@1000,B:1x10@2000")
	require.NoError(t, createPromotion(context.Background(), db, event, PromotionSpec{Code: "TEN", DiscountBps: 1000, MaxUses: 100}))
	for i := range 12 { // past the five custom plans a statement gets before its generic one is considered
		promo := ""
		if i%2 == 1 {
			promo = "TEN"
		}
		status, _, err := b.hold(t, event, fmt.Sprintf("buyer%d", i), "k", []int64{seats[2*i], seats[2*i+1]}, promo)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status)
		// The way of a hold that queued for a writer.
		_, err = b.holdTwoTrips(t, event, fmt.Sprintf("queued%d", i), "k", []int64{seats[24+i]}, promo)
		require.NoError(t, err)
	}
	holdSQL := []string{holdAloneSQL, selectHoldEvent, selectHoldSeats, selectHoldPromotion, writeHoldSQL, writeHoldPromoSQL}
	rows, err := db.Query(context.Background(),
		`SELECT statement, custom_plans, generic_plans FROM pg_prepared_statements WHERE statement = ANY($1)`, holdSQL)
	require.NoError(t, err)
	type prepared struct {
		sql             string
		custom, generic int64
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (prepared, error) {
		var p prepared
		return p, r.Scan(&p.sql, &p.custom, &p.generic)
	})
	require.NoError(t, err)
	require.Len(t, got, len(holdSQL), "every hold statement was prepared on the one connection")
	for _, p := range got {
		if p.sql == selectHoldEvent {
			// It sets the mode for the rest of the batch; PostgreSQL's
			// own rule gives its one key lookup a generic plan after five
			// custom ones.
			require.LessOrEqual(t, p.custom, int64(5), "custom plans of the event's lookup")
			continue
		}
		require.Zero(t, p.custom, "custom plans of %s (%d generic)", p.sql, p.generic)
	}
}

// A successful hold makes one round trip to Redis, one script call: the
// gate (the rate, the admission lease, the seat hints, and the lease moved
// to the hold's time). The first hold of an event in a process adds the
// extension after the commit (the gate did not know the event's hold
// time yet). It made two calls before (the gate, then the extension after
// every commit), five in three round trips when the hints had a hash tag
// of their own, and five round trips before that. A Redis that lost its
// scripts (a restart, a failover) costs the call one EVAL, not the hold.
func TestHoldRedisRoundTrips(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := testenv.RedisClient(t, srv.URL)
	trips := &testenv.RedisTrips{}
	rdb.AddHook(trips)
	b := setupWith(t, testenv.Postgres(t), rdb)
	event, seats := b.event(t, "A:2x10@1000")

	for i := range 3 { // a warm-up (scripts loaded, connections made), a hold, a hold after SCRIPT FLUSH
		if i == 2 {
			require.NoError(t, rdb.ScriptFlush(context.Background()).Err())
		}
		user := b.uid(fmt.Sprintf("buyer%d", i))
		pass := b.desk.admit(event, user)
		require.NoError(t, rdb.ConfigResetStat(context.Background()).Err())
		trips.Start()
		res, err := b.holds.Hold(context.Background(), holdInput{User: user, Event: event, Pass: pass, Key: "k", Seats: []int64{seats[2*i], seats[2*i+1]}})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.Status)
		n, _ := trips.Count()
		stats, err := rdb.Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		t.Logf("hold %d: %d round trips to Redis\n%s", i, n, stats)
		switch i {
		case 0:
			// The scripts not loaded yet: each call is refused NOSCRIPT
			// once, then sent whole.
			require.Equal(t, 2, commandCalls(stats, "eval"), "the event's first hold in this process: the gate and the extension")
		case 1:
			require.Equal(t, 1, n)
			require.Equal(t, 1, commandCalls(stats, "evalsha"), "one script call")
			require.Zero(t, commandCalls(stats, "eval"))
		case 2:
			require.Equal(t, 2, n, "the call refused with NOSCRIPT is sent again once")
			require.Equal(t, 1, commandCalls(stats, "eval"), "the script was sent again")
		}
		exp, err := rdb.ZScore(context.Background(), b.desk.LeaseKey(event), user).Result()
		require.NoError(t, err)
		require.WithinDuration(t, time.Now().Add(10*time.Minute), time.UnixMilli(int64(exp)), time.Minute,
			"hold %d: the lease has the hold's time", i)
	}
	b.requireNoDoubleOwnership(t, event)
}

// holdTwoTrips runs a hold the way one queued for a writer goes, alone
// and without the gates: the read, the checks and prices in Go, the
// write. It returns the body written.
func (b *bundle) holdTwoTrips(t *testing.T, event, user, key string, seats []int64, promo string) ([]byte, error) {
	t.Helper()
	ctx := context.Background()
	h := b.holds
	in := holdInput{User: b.uid(user), Event: event, Key: key, Seats: seats, PromoCode: promo}
	sorted, fp, err := h.check(in)
	require.NoError(t, err)
	v, err := h.read(ctx, in, sorted)
	if err != nil {
		return nil, err
	}
	if replay, err := v.refusal(in, sorted, fp); replay != nil || err != nil {
		return nil, fmt.Errorf("refused: %v %v", replay, err)
	}
	p, err := h.price(in, fp, uuid.Must(uuid.NewV7()).String(), v)
	if err != nil {
		return nil, err
	}
	return p.body, h.write(ctx, p)
}

// commandCalls reads a command's calls from INFO commandstats.
func commandCalls(stats, cmd string) int {
	for _, line := range strings.Split(stats, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}
