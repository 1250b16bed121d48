package booking

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// A batch of best-available holds in one transaction and two statements:
// one reads what each hold needs (its key's stored answer, the event, the
// user's pending checkout, the section's counters) and picks the seats of
// every hold that nothing read refuses, in the batch's order, each pick
// leaving out the picks before it (best_available_pick_many, migration
// 0063); the process prices them (freeze, as for named holds); one more
// writes them all (writeHoldsSQL, the named holds' group commit). The
// picked seats stay locked by the transaction from the pick to the
// commit.
//
// The lookups are scalar subqueries by key, one per hold, as in a named
// hold's read (selectHoldSeats): as joins, the planner may read every
// pending checkout of the sale into a hash to find a batch's few
// (TestHoldQueryPlans).
//
// The prices come from the section counters as the batch read them, as
// for named holds written in a batch: the holds of one batch do not raise
// each other's surge.
//
// Some holds of a batch are not picked for, and run alone after it: a
// second hold of the same user and event, or of the same user and key (it
// would be refused by what the first writes), a user whose own checkout
// is due (ending it is a transaction of its own), and a pick that found
// the fitting runs locked while holding half of one (busy: the alone
// statement reruns it).
const pickManySQL = `
WITH req AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::boolean[], $7::bigint[])
		WITH ORDINALITY AS r(user_id, key, event_id, section_id, quantity, adjacent, max_base, n)),
found AS MATERIALIZED (
	SELECT r.*,
	       (SELECT k FROM idempotency_keys k WHERE k.user_id = r.user_id AND k.operation = $8 AND k.key = r.key) AS k,
	       (SELECT e FROM events e WHERE e.id = r.event_id) AS e,
	       (SELECT p FROM reservations p WHERE p.user_id = r.user_id AND p.event_id = r.event_id AND p.status = 'PENDING_PAYMENT') AS p,
	       (SELECT c.seat_count FROM sections c WHERE c.event_id = r.event_id AND c.id = r.section_id) AS seat_count,
	       (SELECT coalesce(sum(o.taken), 0)::bigint FROM section_occupancy o
	        WHERE o.event_id = r.event_id AND o.section_id = r.section_id) AS taken
	FROM req r),
look AS MATERIALIZED (
	SELECT f.n, f.event_id, f.section_id, f.quantity, f.adjacent, f.max_base,
	       (f.k).fingerprint, (f.k).status_code, (f.k).response,
	       (f.e).currency::text AS currency, (f.e).starts_at, (f.e).hold_minutes, clock_timestamp() AS now,
	       (f.e).sale_opens_at <= clock_timestamp() AND ((f.e).sale_closes_at IS NULL OR (f.e).sale_closes_at > clock_timestamp()) AS open,
	       (f.p).id::text AS pending_id, (f.p).expires_at <= clock_timestamp() AS pending_due, f.seat_count, f.taken
	FROM found f),
pick AS MATERIALIZED (
	SELECT * FROM best_available_pick_many(
		(SELECT array_agg(event_id ORDER BY n) FROM look),
		(SELECT array_agg(CASE WHEN fingerprint IS NULL AND open AND pending_id IS NULL AND seat_count IS NOT NULL
		                  THEN section_id END ORDER BY n) FROM look),
		(SELECT array_agg(quantity ORDER BY n) FROM look),
		(SELECT array_agg(adjacent ORDER BY n) FROM look),
		(SELECT array_agg(max_base ORDER BY n) FROM look)))
SELECT l.n, l.fingerprint, l.status_code, l.response, l.currency, l.starts_at, l.hold_minutes, l.now, l.open,
       l.pending_id, l.pending_due, l.seat_count, l.taken, coalesce(pk.all_busy, false),
       s.id, s.row_num, s.seat_num, s.base_price
FROM look l
LEFT JOIN pick pk ON pk.n = l.n
LEFT JOIN LATERAL unnest(pk.seats) u(id) ON true
LEFT JOIN seats s ON s.id = u.id
ORDER BY l.n, s.id`

// runBestMany runs a batch of best-available holds without promotion
// codes. It leaves each answer in its call, or marks alone[i] a hold to
// run alone; an error means the transaction wrote nothing.
func (h *holdsPlane) runBestMany(ctx context.Context, cs []*bestCall) (alone []bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*(h.cfg.StatementTimeout+h.cfg.LockTimeout))
	defer cancel()
	alone = sameBuyerTwice(cs)
	tx, err := h.db.Begin(ctx)
	if err != nil {
		return nil, writeError(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	start := time.Now()
	views, err := h.pickMany(ctx, tx, cs, alone)
	if err != nil {
		return nil, err
	}
	var ps []*pendingHold
	written := make([]*pendingHold, len(cs))
	for i, c := range cs {
		if alone[i] {
			continue
		}
		v := views[i]
		if v.busy || (v.pendingID != "" && v.pendingDue) {
			alone[i] = true
			continue
		}
		// A refused hold is written nothing: its answer is the view's
		// (bestAnswer), given after the commit.
		if p, _ := h.pricedBest(c, v); p != nil {
			written[i] = p
			ps = append(ps, p)
		}
	}
	if len(ps) > 0 {
		b := &pgx.Batch{}
		if err := queueHolds(b, ps); err != nil {
			return nil, err
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, writeError(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, writeError(err)
	}
	took := time.Since(start).Seconds()
	for i, c := range cs {
		if alone[i] {
			continue
		}
		c.view = views[i]
		if written[i] != nil {
			c.body = written[i].body
			h.m.lockWait.Observe(took)
		}
	}
	return alone, nil
}

// sameBuyerTwice marks the holds of a batch whose user already has a hold
// earlier in it for the same event or under the same key.
func sameBuyerTwice(cs []*bestCall) []bool {
	type userOf struct{ user, event, key string }
	seen := map[userOf]bool{}
	twice := make([]bool, len(cs))
	for i, c := range cs {
		ev, key := userOf{user: c.in.User, event: c.in.Event}, userOf{user: c.in.User, key: c.in.Key}
		twice[i] = seen[ev] || seen[key]
		seen[ev], seen[key] = true, true
	}
	return twice
}

// pickMany sends the timeouts and pickManySQL for the holds not marked
// alone, and returns what it read of each (nil for those marked).
func (h *holdsPlane) pickMany(ctx context.Context, tx pgx.Tx, cs []*bestCall, alone []bool) ([]*bestView, error) {
	var users, keys, events, sections []string
	var quantities []int32
	var adjacent []bool
	var maxes []*int64
	var index []int // the hold of each row number, from 1
	for i, c := range cs {
		if alone[i] {
			continue
		}
		users, keys, events, sections = append(users, c.in.User), append(keys, c.in.Key), append(events, c.in.Event), append(sections, c.best.Section)
		quantities, adjacent = append(quantities, int32(c.best.Quantity)), append(adjacent, c.best.Adjacent)
		var maxPrice *int64
		if c.best.MaxPrice > 0 {
			maxPrice = &c.best.MaxPrice
		}
		maxes, index = append(maxes, maxPrice), append(index, i)
	}
	b := &pgx.Batch{}
	b.Queue(setHoldTimeouts, itoa(min(h.cfg.LockTimeout, bestBatchLockTimeout).Milliseconds()), itoa(h.cfg.StatementTimeout.Milliseconds()))
	b.Queue(pickManySQL, users, keys, events, sections, quantities, adjacent, maxes, opHold)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return nil, writeError(err)
	}
	rows, err := res.Query()
	if err != nil {
		return nil, writeError(err)
	}
	views := make([]*bestView, len(cs))
	for rows.Next() {
		r, err := scanPicked(rows)
		if err != nil {
			rows.Close()
			return nil, writeError(err)
		}
		i := index[r.n-1]
		if views[i] == nil {
			views[i] = r.view()
		}
		if r.seat != nil {
			views[i].addPicked(*r.seat, cs[i].best.Section, *r.row, *r.num, *r.basePrice, *r.seatCount, *r.taken)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, writeError(err)
	}
	return views, res.Close()
}

// pickedRow is a row of pickManySQL: what it read for a hold (the event,
// the pending checkout and the key's answer in aloneRow's fields), and
// one of its picked seats, if any.
type pickedRow struct {
	n                int
	read             aloneRow
	seatCount, taken *int64
	busy             *bool
	seat, basePrice  *int64
	row, num         *int
}

func scanPicked(rows pgx.Rows) (pickedRow, error) {
	var r pickedRow
	a := &r.read
	err := rows.Scan(&r.n, &a.storedFP, &a.storedStatus, &a.storedBody, &a.currency, &a.startsAt, &a.holdMinutes, &a.now,
		&a.open, &a.pendingID, &a.pendingDue, &r.seatCount, &r.taken, &r.busy, &r.seat, &r.row, &r.num, &r.basePrice)
	return r, err
}

// view is what the row read of its hold, as bestAloneSQL's row would say
// it (scanBest), without the seats.
func (r pickedRow) view() *bestView {
	v := &bestView{busy: r.busy != nil && *r.busy}
	r.read.fill(&v.holdView)
	v.setSection(r.seatCount, r.taken)
	return v
}
