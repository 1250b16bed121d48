package booking

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"

	"github.com/jackc/pgx/v5"
)

// A best-available hold in one round trip: the pick (best_available_seats,
// SKIP LOCKED, the documented order) and the named hold alone's reads,
// prices and writes (holdAloneSQL's shared parts) in one statement, one
// implicit transaction. It was two round trips in an explicit transaction
// that kept the picked seats locked while the process priced them.
//
// The pick runs first, before any write (the verdict needs its seats), and
// only when nothing read refuses the hold before its seats (a stored
// answer of the key, the event closed or missing, a pending checkout of
// the user, no such section): a replay locks nothing. The seats it returns
// are locked by this transaction and were AVAILABLE when locked (the
// function reads them under the lock, in a newer snapshot than the
// statement's), so the verdict does not read their status again: what
// the statement reads of them is what never changes (row, number, base
// price). The seats' update still meets seat_held_only_when_available,
// and every other write its constraint, as a named hold's.
//
// When the verdict refuses, nothing is written, the locks go with the
// statement, and the statement returns what it read, from which
// bestRefusal answers without another round trip. Parameters: $1–$7 and
// $9–$11 as in holdAloneSQL, $8 the section, $12 the quantity, $13
// adjacent, $14 maxPrice (null: none; the pick's cap on base prices and
// the verdict's on each seat's price before a discount).
const bestAloneSQL = aloneEvent + `sec AS (
	SELECT c.seat_count, (SELECT coalesce(sum(o.taken), 0)::bigint FROM section_occupancy o
	        WHERE o.event_id = $7 AND o.section_id = $8) AS taken
	FROM sections c WHERE c.event_id = $7 AND c.id = $8),
pick AS MATERIALIZED (
	SELECT p.picked, p.busy FROM best_available_seats($7, $8, $12::int, $13::boolean, $14::bigint, '{}'::bigint[]) p
	WHERE NOT EXISTS (SELECT FROM stored) AND coalesce((SELECT open AND pending_id IS NULL FROM ev), false)
	  AND EXISTS (SELECT FROM sec)),
seat AS (
	SELECT s.id, s.section_id, s.row_num, s.seat_num, s.base_price, sec.seat_count AS section_seats, sec.taken AS section_taken
	FROM pick CROSS JOIN LATERAL unnest(pick.picked) u(id) JOIN seats s ON s.id = u.id CROSS JOIN sec),
` + alonePrices + `verdict AS (
	SELECT NOT EXISTS (SELECT FROM stored)
	   AND coalesce((SELECT open AND pending_id IS NULL FROM ev), false)
	   AND (SELECT count(*) FROM seat) = $12::int
	   AND ($9::text IS NULL OR coalesce((SELECT NOT expired AND used < max_uses FROM promo), false))
	   AND coalesce((SELECT bool_and(gross <= 9223372036854775807) AND sum(price) <= 9223372036854775807 FROM priced), false)
	   AND ($14::bigint IS NULL OR coalesce((SELECT bool_and(gross <= $14::bigint) FROM priced), false))
	   AS ok),
` + aloneAnswer + `held AS (
	UPDATE seats s SET status = 'HELD', reservation_id = $6::uuid, version = s.version + 1
	FROM seat WHERE s.id = seat.id AND (SELECT ok FROM verdict) RETURNING 1),
` + aloneRest + `
SELECT ` + aloneColumns + `       sec.seat_count, sec.taken, pk.busy,
       CASE WHEN NOT v.ok THEN (SELECT json_agg(json_build_object('id', id, 'section', section_id,
           'row', row_num, 'num', seat_num, 'basePrice', base_price) ORDER BY id) FROM seat) END
FROM verdict v
LEFT JOIN ev ON true
LEFT JOIN stored st ON true
LEFT JOIN promo p ON true
LEFT JOIN sec ON true
LEFT JOIN pick pk ON true`

// runBest sends the timeouts and bestAloneSQL in one pipelined batch. It
// returns the 201's body when the statement wrote the hold, or what it
// read when it did not.
func (h *holdsPlane) runBest(ctx context.Context, c *bestCall) error {
	ctx, cancel := context.WithTimeout(ctx, 2*(h.cfg.StatementTimeout+h.cfg.LockTimeout))
	defer cancel()
	return h.runStatement(ctx, func(row pgx.Row) (err error) {
		c.body, c.view, err = scanBest(row, c.best.Section)
		return err
	}, bestAloneSQL, c.args(int32(rand.IntN(occupancyShards)))...)
}

// args are bestAloneSQL's parameters for c, its section counter on shard.
func (c *bestCall) args(shard int32) []any {
	var promo *string
	if c.in.PromoCode != "" {
		promo = &c.in.PromoCode
	}
	var maxPrice *int64
	if c.best.MaxPrice > 0 {
		maxPrice = &c.best.MaxPrice
	}
	return []any{c.in.User, opHold, c.in.Key, c.fp, http.StatusCreated, c.resID, c.in.Event, c.best.Section, promo,
		shard, KindInventoryChanged, int32(c.best.Quantity), c.best.Adjacent, maxPrice}
}

// bestSeat is a picked seat as bestAloneSQL returns it when it wrote
// nothing.
type bestSeat struct {
	ID        int64  `json:"id"`
	Section   string `json:"section"`
	Row       int    `json:"row"`
	Num       int    `json:"num"`
	BasePrice int64  `json:"basePrice"`
}

// scanBest reads bestAloneSQL's row: the body when it wrote, else the view.
func scanBest(row pgx.Row, section string) ([]byte, *bestView, error) {
	var r aloneRow
	var seatCount, taken *int64
	var busy *bool
	var seatsJSON []byte
	if err := row.Scan(r.dest(&seatCount, &taken, &busy, &seatsJSON)...); err != nil {
		return nil, nil, err
	}
	v := &bestView{}
	r.fill(&v.holdView)
	if r.ok {
		return r.body, v, nil
	}
	v.setSection(seatCount, taken)
	v.busy = busy != nil && *busy
	var seats []bestSeat
	if len(seatsJSON) > 0 {
		if err := json.Unmarshal(seatsJSON, &seats); err != nil {
			return nil, nil, err
		}
	}
	for _, s := range seats {
		v.addPicked(s.ID, section, s.Row, s.Num, s.BasePrice, *seatCount, *taken)
	}
	return nil, v, nil
}
