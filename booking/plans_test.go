package booking

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// keyIndexes are the primary and unique keys the hot path may look rows up
// by. Anything else (a scan of an event through an (event_id, …) index, a
// partial index that grows with the sale, a sequential scan) makes a hold's
// cost depend on the size of the sale or on statistics.
var keyIndexes = map[string]bool{
	"events_pkey": true, "seats_pkey": true, "sections_pkey": true, "section_occupancy_pkey": true,
	"reservations_pkey": true, "one_active_checkout": true, "idempotency_keys_pkey": true,
	"promotions_pkey": true, "reservation_items_reservation_id_seat_id_key": true,
}

// catalogTables hold rows per event, section or promotion code: a sale
// does not grow them. A planner may rightly read one whole while it is a
// few pages: it scales its row estimates by a table's current size, so it
// stops as soon as the catalog grows, statistics or not.
var catalogTables = map[string]bool{"events": true, "sections": true, "section_occupancy": true, "promotions": true}

// planNode is the part of EXPLAIN (FORMAT JSON) the check reads.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	Plans     []planNode `json:"Plans"`
}

// keyLookupsOnly returns the scans of a plan that do not go by a key.
// A scan below a Hash reads everything it matches into the hash before
// the join looks anything up (a key index used as a range: every pending
// checkout of the sale to find a batch's few), so only the catalog may be
// scanned there.
func keyLookupsOnly(n planNode) []string { return lookups(n, false) }

func lookups(n planNode, hashed bool) []string {
	var bad []string
	switch n.NodeType {
	case "Seq Scan", "Sample Scan", "Tid Range Scan":
		if !catalogTables[n.Relation] {
			bad = append(bad, n.NodeType+" on "+n.Relation)
		}
	case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
		if !keyIndexes[n.IndexName] {
			bad = append(bad, n.NodeType+" using "+n.IndexName)
		}
	case "Bitmap Heap Scan":
		if hashed && !catalogTables[n.Relation] {
			bad = append(bad, n.NodeType+" on "+n.Relation+" into a hash")
		}
	}
	if hashed && (n.NodeType == "Index Scan" || n.NodeType == "Index Only Scan") && !catalogTables[n.Relation] {
		bad = append(bad, n.NodeType+" on "+n.Relation+" into a hash")
	}
	for _, c := range n.Plans {
		bad = append(bad, lookups(c, hashed || n.NodeType == "Hash")...)
	}
	return bad
}

// explain returns the plan of sql with args: the custom plan the first
// executions get, and the generic one a cached statement may switch to.
func explain(t *testing.T, db *pgxpool.Pool, sql string, args ...any) (custom, generic planNode) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	read := func(mode string) planNode {
		_, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
		require.NoError(t, err)
		name := "plan_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		_, err = tx.Prepare(ctx, name, sql)
		require.NoError(t, err)
		var out []struct {
			Plan planNode `json:"Plan"`
		}
		var raw []byte
		require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+name+"("+literals(args)+")").Scan(&raw))
		require.NoError(t, json.Unmarshal(raw, &out))
		_, err = tx.Exec(ctx, "DEALLOCATE "+name)
		require.NoError(t, err)
		return out[0].Plan
	}
	return read("force_custom_plan"), read("force_generic_plan")
}

// literals renders args as SQL literals for EXECUTE, whose parameters
// PostgreSQL cannot type from the outside; the prepared statement gives
// them their types.
func literals(args []any) string {
	out := make([]string, len(args))
	for i, a := range args {
		quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
		array := func(n int, elem func(int) string) string {
			es := make([]string, n)
			for j := range es {
				es[j] = elem(j)
			}
			return quote("{" + strings.Join(es, ",") + "}")
		}
		switch v := a.(type) {
		case string:
			out[i] = quote(v)
		case *string:
			out[i] = "NULL"
			if v != nil {
				out[i] = quote(*v)
			}
		case []byte:
			out[i] = quote(fmt.Sprintf(`\x%x`, v))
		case time.Time:
			out[i] = quote(v.Format(time.RFC3339Nano))
		case []int64:
			out[i] = array(len(v), func(j int) string { return fmt.Sprint(v[j]) })
		case []int32:
			out[i] = array(len(v), func(j int) string { return fmt.Sprint(v[j]) })
		case []bool:
			out[i] = array(len(v), func(j int) string { return fmt.Sprint(v[j]) })
		case []*int64:
			out[i] = array(len(v), func(j int) string {
				if v[j] == nil {
					return "NULL"
				}
				return fmt.Sprint(*v[j])
			})
		case [][]byte:
			out[i] = array(len(v), func(j int) string { return fmt.Sprintf(`"\\x%x"`, v[j]) })
		case []time.Time:
			out[i] = array(len(v), func(j int) string { return `"` + v[j].Format(time.RFC3339Nano) + `"` })
		case []string:
			out[i] = array(len(v), func(j int) string {
				return `"` + strings.ReplaceAll(strings.ReplaceAll(v[j], `\`, `\\`), `"`, `\"`) + `"`
			})
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return strings.Join(out, ", ")
}

// holdStatements are the statements of a hold, its release and its sale,
// with arguments for event's seats.
func holdStatements(event, user string, seats []int64) map[string][]any {
	res := uuid.NewString()
	return map[string][]any{
		"stored":                 {selectStored, user, opHold, "k"},
		"event":                  {selectHoldEvent, event, user},
		"seats":                  {selectHoldSeats, seats, event, user, opHold, "k"},
		"promotion":              {selectHoldPromotion, event, "CODE"},
		"write":                  writeArgs(writeHoldSQL, event, user, res, seats),
		"write with promotion":   writeArgs(writeHoldPromoSQL, event, user, res, seats),
		"write of several holds": writeBatchArgs(event, user, seats),
		"alone":                  {holdAloneSQL, user, opHold, "k", []byte{1, 2, 3}, 201, res, event, seats, (*string)(nil), int32(3), KindInventoryChanged},
		"best available, several": {pickManySQL, []string{user, user + "2"}, []string{"k", "k"}, []string{event, event},
			[]string{"A", "B"}, []int32{2, 1}, []bool{true, false}, []*int64{nil, new(int64)}, opHold},
		"alone with a promotion": {holdAloneSQL, user, opHold, "k", []byte{1, 2, 3}, 201, res, event, seats, "CODE", int32(3), KindInventoryChanged},
		"release":                {releaseSeats, res},
		"sell":                   {sellSeats, res},
		"lock":                   {lockReservation, res},
	}
}

// writeArgs are the statement and arguments of a hold's write of seats.
func writeArgs(sql, event, user, res string, seats []int64) []any {
	p := &pendingHold{in: holdInput{User: user, Event: event, Key: "k", PromoCode: "CODE"}, id: res,
		expiresAt: time.Now().Add(time.Hour), currency: "EUR", promo: sql == writeHoldPromoSQL,
		body: []byte(`{}`), fingerprint: []byte{1, 2, 3}}
	for i, s := range seats {
		p.items = append(p.items, Item{Seat: s, Section: []string{"A", "B"}[i%2], BasePrice: 100, SurgeBps: 10000, Price: 100})
	}
	b := &pgx.Batch{}
	if err := queueHold(b, p); err != nil {
		panic(err)
	}
	return append([]any{b.QueuedQueries[0].SQL}, b.QueuedQueries[0].Arguments...)
}

// writeBatchArgs are the statement and arguments of a batch of holds, one
// per seat.
func writeBatchArgs(event, user string, seats []int64) []any {
	var ps []*pendingHold
	for i, s := range seats {
		ps = append(ps, &pendingHold{in: holdInput{User: fmt.Sprint(user, i), Event: event, Key: "k"}, id: uuid.NewString(),
			expiresAt: time.Now().Add(time.Hour), currency: "EUR", body: []byte(`{}`), fingerprint: []byte{1, 2, 3},
			items: []Item{{Seat: s, Section: []string{"A", "B"}[i%2], BasePrice: 100, SurgeBps: 10000, Price: 100}}})
	}
	b := &pgx.Batch{}
	if err := queueHolds(b, ps); err != nil {
		panic(err)
	}
	return append([]any{b.QueuedQueries[0].SQL}, b.QueuedQueries[0].Arguments...)
}

// The expiry worker still finds due holds through its queue.
func requireWorkerUsesItsQueue(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	custom, generic := explain(t, db, claimExpired, 100)
	for _, p := range []planNode{custom, generic} {
		require.Contains(t, indexesOf(p), "reservations_pending_expiry")
	}
}

func indexesOf(n planNode) []string {
	out := []string{n.IndexName}
	for _, c := range n.Plans {
		out = append(out, indexesOf(c)...)
	}
	return out
}

// A hold looks rows up by key only, however stale or absent the statistics
// are: on a new 200,000-seat event never analyzed (a sale opening minutes
// after its event was created), after 50,000 holds on it, and on an event
// whose statistics were taken before it was sold (the partial index of
// held seats growing under a plan made when it was empty).
func TestHoldQueryPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two 200,000-seat events")
	}
	t.Parallel()
	ctx := context.Background()
	db, err := pgxpool.New(ctx, testenv.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	_, err = store.Migrate(ctx, db, store.Migrations(), testenv.Logger())
	require.NoError(t, err)
	// Nothing analyzes behind the test's back.
	for _, table := range []string{"events", "sections", "seats", "section_occupancy", "reservations",
		"reservation_items", "idempotency_keys", "promotions", "promotion_uses", "outbox"} {
		_, err := db.Exec(ctx, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)")
		require.NoError(t, err)
	}
	b := setupWith(t, db, testenv.Redis(t))

	check := func(stage, event string, seats []int64) {
		t.Helper()
		for name, st := range holdStatements(event, b.uid("plans"), seats) {
			custom, generic := explain(t, db, st[0].(string), st[1:]...)
			require.Empty(t, keyLookupsOnly(custom), "%s: %s (custom plan)", stage, name)
			require.Empty(t, keyLookupsOnly(generic), "%s: %s (generic plan)", stage, name)
		}
	}

	event, seats := b.event(t, "A:200x500@5000,B:200x500@3000")
	require.Len(t, seats, 200_000)
	cart := []int64{seats[100_001], seats[100_002], seats[150_000]}
	check("a new event, never analyzed", event, cart)
	requireWorkerUsesItsQueue(t, db)

	holdInBulk(t, db, event, 50_000)
	check("50,000 holds, never analyzed", event, cart)

	_, err = db.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	later, laterSeats := b.event(t, "A:200x500@5000,B:200x500@3000")
	holdInBulk(t, db, later, 50_000)
	check("50,000 holds after statistics taken before the event existed", later, []int64{laterSeats[60_000], laterSeats[199_999]})

	requireWorkerUsesItsQueue(t, db)

	// And a real hold still works on it.
	status, _, err := b.hold(t, later, "after-bulk", "k", []int64{laterSeats[70_000], laterSeats[70_001]}, "")
	require.NoError(t, err)
	require.Equal(t, 201, status)
	b.requireNoDoubleOwnership(t, later)
}

// holdInBulk writes what n one-seat holds of n users on the first n seats
// of event leave behind: reservations, items, held seats, counters and
// stored answers.
func holdInBulk(t *testing.T, db *pgxpool.Pool, event string, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`CREATE TEMP TABLE bulk ON COMMIT DROP AS
SELECT s.id AS seat, s.section_id AS section, s.base_price AS price, md5($1 || s.id)::uuid AS res, 'bulk-' || $1 || '-' || s.id AS usr
FROM seats s WHERE s.event_id = $1 ORDER BY s.layout_order LIMIT $2`, []any{event, n}},
		{`INSERT INTO reservations (id, event_id, user_id, status, expires_at, total, currency)
SELECT res, $1, usr, 'PENDING_PAYMENT', now() + interval '10 minutes', price, 'EUR' FROM bulk`, []any{event}},
		{`INSERT INTO reservation_items (reservation_id, seat_id, section_id, base_price, surge_bps, discount, price_at_lock, status)
SELECT res, seat, section, price, 10000, 0, price, 'HELD' FROM bulk`, nil},
		{`UPDATE seats s SET status = 'HELD', reservation_id = bulk.res FROM bulk WHERE s.id = bulk.seat`, nil},
		{`UPDATE section_occupancy o SET taken = taken + c.n
FROM (SELECT section, count(*) AS n FROM bulk GROUP BY section) c WHERE o.event_id = $1 AND o.section_id = c.section AND o.shard = 0`, []any{event}},
		{`INSERT INTO idempotency_keys (user_id, operation, key, fingerprint, status_code, response)
SELECT usr, 'hold', 'k', '\x00', 201, '{}' FROM bulk`, nil},
	} {
		_, err := tx.Exec(ctx, st.sql, st.args...)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
}
