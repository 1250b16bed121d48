package booking

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/presenced/presenced/internal/refusal"
)

// maxSeatsPerEvent bounds one venue.
const maxSeatsPerEvent = 200_000

// grid is one "ID:AxB@PRICE" item of a command-line list (sections, room
// types).
type grid struct {
	id    string
	a, b  int
	price int64
}

// parseGrids reads a comma-separated list of grids; noun and want name the
// item and its form in errors, none is the error of an empty list.
func parseGrids(s, noun, want, none string) ([]grid, error) {
	var out []grid
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, rest, ok := strings.Cut(part, ":")
		dims, price, ok2 := strings.Cut(rest, "@")
		x, y, ok3 := strings.Cut(dims, "x")
		a, err1 := strconv.Atoi(x)
		b, err2 := strconv.Atoi(y)
		p, err3 := strconv.ParseInt(price, 10, 64)
		if !ok || !ok2 || !ok3 || err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("%s %q: want %s", noun, part, want)
		}
		out = append(out, grid{id: id, a: a, b: b, price: p})
	}
	if len(out) == 0 {
		return nil, errors.New(none)
	}
	return out, nil
}

// createEvent writes the event, its sections and every seat in layout order
// (section, row, number) in one transaction.
func createEvent(ctx context.Context, pool *pgxpool.Pool, spec EventSpec) (EventSummary, error) {
	if err := spec.Validate(); err != nil {
		return EventSummary{}, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return EventSummary{}, fmt.Errorf("create event: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `
INSERT INTO events (id, name, currency, starts_at, sale_opens_at, sale_closes_at, hold_minutes)
VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		spec.ID, spec.Name, spec.Currency, spec.StartsAt, spec.SaleOpensAt, spec.SaleClosesAt, spec.HoldMinutes)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return EventSummary{}, ErrEventExists
	}
	if err != nil {
		return EventSummary{}, fmt.Errorf("create event: %w", err)
	}
	var rows [][]any
	order := 0
	for pos, sec := range spec.Sections {
		if _, err := tx.Exec(ctx, `
INSERT INTO sections (event_id, id, name, position, base_price, seat_count) VALUES ($1, $2, $3, $4, $5, $6)`,
			spec.ID, sec.ID, sec.Name, pos, sec.BasePrice, sec.Rows*sec.SeatsPerRow); err != nil {
			return EventSummary{}, fmt.Errorf("create section %s: %w", sec.ID, err)
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO section_occupancy (event_id, section_id, shard) SELECT $1, $2, g FROM generate_series(0, $3 - 1) g`,
			spec.ID, sec.ID, occupancyShards); err != nil {
			return EventSummary{}, fmt.Errorf("create section %s: %w", sec.ID, err)
		}
		for r := 1; r <= sec.Rows; r++ {
			for n := 1; n <= sec.SeatsPerRow; n++ {
				rows = append(rows, []any{spec.ID, sec.ID, r, n, order, sec.BasePrice})
				order++
			}
		}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"seats"},
		[]string{"event_id", "section_id", "row_num", "seat_num", "layout_order", "base_price"},
		pgx.CopyFromRows(rows)); err != nil {
		return EventSummary{}, fmt.Errorf("create seats: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return EventSummary{}, fmt.Errorf("create event: %w", err)
	}
	return EventSummary{ID: spec.ID, Seats: order, Sections: len(spec.Sections)}, nil
}

// createPromotion adds a promotion code to an event.
func createPromotion(ctx context.Context, pool *pgxpool.Pool, event string, p PromotionSpec) error {
	if !validEventID(event) {
		return ErrEventNotFound // no event can have this id; PostgreSQL would refuse it
	}
	if !promoPattern.Valid(p.Code) || p.DiscountBps < 1 || p.DiscountBps > 10_000 || p.MaxUses < 0 || p.MaxUses > math.MaxInt32 {
		return refusal.New(ErrInvalidPromotion, "%v: code 1-32 letters, digits, '_' or '-'; discountBps 1-10000; maxUses 0-%d",
			ErrInvalidPromotion, math.MaxInt32)
	}
	_, err := pool.Exec(ctx, `
INSERT INTO promotions (event_id, code, discount_bps, max_uses, valid_until) VALUES ($1, $2, $3, $4, $5)`,
		event, p.Code, p.DiscountBps, p.MaxUses, p.ValidUntil)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return fmt.Errorf("promotion %s: %w", p.Code, ErrPromotionExists)
		case "23503":
			return ErrEventNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("create promotion: %w", err)
	}
	return nil
}
