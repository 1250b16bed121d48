package booking

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/internal/refusal"
)

// The operator's reads of events: what exists, whether it is on sale, how
// full it is; and the removal of an event nobody holds or bought a seat of.

// Page sizes of GET /v1/admin/events: each event's counts are a scan of its
// seats, so a page stays small.
const (
	eventPageDefault = 50
	eventPageMax     = 200
)

// eventViewQuery reads events with their seat and reservation counts, in id
// order after a cursor ($1, empty for the first page), at most $2 of them, or
// only the event $3 when it is not empty.
const eventViewQuery = `
SELECT e.id, e.name, e.currency, e.starts_at, e.sale_opens_at, e.sale_closes_at, e.hold_minutes, e.created_at,
       s.total, s.available, s.held, s.sold, s.blocked,
       r.pending, r.paid, r.expired, r.cancelled
FROM events e
CROSS JOIN LATERAL (
	SELECT count(*) AS total,
	       count(*) FILTER (WHERE status = 'AVAILABLE') AS available,
	       count(*) FILTER (WHERE status = 'HELD') AS held,
	       count(*) FILTER (WHERE status = 'SOLD') AS sold,
	       count(*) FILTER (WHERE status = 'BLOCKED') AS blocked
	FROM seats WHERE event_id = e.id) s
CROSS JOIN LATERAL (
	SELECT count(*) FILTER (WHERE status = 'PENDING_PAYMENT') AS pending,
	       count(*) FILTER (WHERE status = 'PAID') AS paid,
	       count(*) FILTER (WHERE status = 'EXPIRED') AS expired,
	       count(*) FILTER (WHERE status = 'CANCELLED') AS cancelled
	FROM reservations WHERE event_id = e.id) r
WHERE ($3 = '' AND e.id > $1) OR e.id = $3
ORDER BY e.id
LIMIT $2`

// listEvents answers one page of events after the cursor.
func listEvents(ctx context.Context, db *pgxpool.Pool, after string, limit int, now time.Time) ([]EventView, error) {
	return queryEvents(ctx, db, after, limit, "", now)
}

// loadEvent answers one event, or ErrEventNotFound.
func loadEvent(ctx context.Context, db *pgxpool.Pool, id string, now time.Time) (EventView, error) {
	evs, err := queryEvents(ctx, db, "", 1, id, now)
	if err != nil {
		return EventView{}, err
	}
	if len(evs) == 0 {
		return EventView{}, ErrEventNotFound
	}
	return evs[0], nil
}

func queryEvents(ctx context.Context, db *pgxpool.Pool, after string, limit int, only string, now time.Time) ([]EventView, error) {
	rows, err := db.Query(ctx, eventViewQuery, after, limit, only)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	out := []EventView{}
	for rows.Next() {
		var v EventView
		if err := rows.Scan(&v.ID, &v.Name, &v.Currency, &v.StartsAt, &v.SaleOpensAt, &v.SaleClosesAt, &v.HoldMinutes, &v.CreatedAt,
			&v.Seats.Total, &v.Seats.Available, &v.Seats.Held, &v.Seats.Sold, &v.Seats.Blocked,
			&v.Reservations.Pending, &v.Reservations.Paid, &v.Reservations.Expired, &v.Reservations.Cancelled); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		v.Sale = saleState(v, now)
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

// saleState names where an event's sale stands at now.
func saleState(v EventView, now time.Time) string {
	switch {
	case !now.Before(v.StartsAt):
		return SaleEnded
	case v.SaleClosesAt != nil && !now.Before(*v.SaleClosesAt):
		return SaleClosed
	case now.Before(v.SaleOpensAt):
		return SaleScheduled
	case v.Seats.Available == 0:
		return SaleSoldOut
	}
	return SaleOnSale
}

// deleteEvent removes an event whose reservations all ended without money
// changing hands, with its sections, seats, promotions and those ended
// reservations, in one transaction. The event row is locked first: a hold
// racing the delete either commits before (and the delete refuses) or
// waits and then fails its foreign key on the vanished event.
func deleteEvent(ctx context.Context, db *pgxpool.Pool, id string) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM events WHERE id = $1 FOR UPDATE`, id).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrEventNotFound
		}
		if err != nil {
			return fmt.Errorf("delete event %s: %w", id, err)
		}
		var inUse bool
		if err := tx.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM reservations WHERE event_id = $1 AND status IN ('PENDING_PAYMENT', 'PAID'))
    OR EXISTS (SELECT 1 FROM payments p JOIN reservations r ON r.id = p.reservation_id WHERE r.event_id = $1)`,
			id).Scan(&inUse); err != nil {
			return fmt.Errorf("delete event %s: %w", id, err)
		}
		if inUse {
			return ErrEventInUse
		}
		if err := invalidateSections(ctx, tx, id); err != nil {
			return fmt.Errorf("delete event %s: %w", id, err)
		}
		for _, q := range []string{
			`DELETE FROM promotion_uses WHERE event_id = $1`,
			`DELETE FROM reservation_items WHERE reservation_id IN (SELECT id FROM reservations WHERE event_id = $1)`,
			`DELETE FROM reservations WHERE event_id = $1`,
			// Sections, seats, occupancy and promotions go with the event
			// (ON DELETE CASCADE).
			`DELETE FROM events WHERE id = $1`,
		} {
			if _, err := tx.Exec(ctx, q, id); err != nil {
				return fmt.Errorf("delete event %s: %w", id, err)
			}
		}
		return nil
	})
}

// invalidateSections tells every cache and live viewer of the event's
// sections that they changed, as a hold does: a deleted event's map must
// not outlive it in a snapshot.
func invalidateSections(ctx context.Context, tx pgx.Tx, event string) error {
	rows, err := tx.Query(ctx, `SELECT id FROM sections WHERE event_id = $1`, event)
	if err != nil {
		return err
	}
	sections, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, sec := range sections {
		if err := outbox.Add(ctx, tx, KindInventoryChanged, event, InventoryChanged{Event: event, Section: sec}); err != nil {
			return err
		}
	}
	return nil
}

// GET /v1/admin/events?after=&limit=
func (h *holdsPlane) listEvents(c echo.Context) error {
	limit := eventPageDefault
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > eventPageMax {
			return refusal.Invalid("limit must be an integer within 1..%d", eventPageMax)
		}
		limit = n
	}
	after := c.QueryParam("after")
	if after != "" && !validEventID(after) {
		return refusal.Invalid("after must be an event id")
	}
	evs, err := listEvents(c.Request().Context(), h.db, after, limit, nowFunc())
	if err != nil {
		return storeError("list events", err)
	}
	page := EventList{Events: evs}
	if len(evs) == limit {
		page.Next = evs[len(evs)-1].ID
	}
	return c.JSON(http.StatusOK, page)
}

// GET /v1/admin/events/:event
func (h *holdsPlane) getEvent(c echo.Context) error {
	// An id no event can have (PostgreSQL would refuse a NUL) names none.
	if !validEventID(c.Param("event")) {
		return ErrEventNotFound
	}
	v, err := loadEvent(c.Request().Context(), h.db, c.Param("event"), nowFunc())
	if err != nil {
		return storeError("read event", err)
	}
	return c.JSON(http.StatusOK, v)
}

// DELETE /v1/admin/events/:event
func (h *holdsPlane) deleteEvent(c echo.Context) error {
	id := c.Param("event")
	if !validEventID(id) {
		return ErrEventNotFound
	}
	if err := deleteEvent(c.Request().Context(), h.db, id); err != nil {
		return storeError("delete event", err)
	}
	h.log.Info("booking: event deleted", "event", id)
	return c.NoContent(http.StatusNoContent)
}
