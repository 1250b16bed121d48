package booking

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/internal/validate"
)

// maxSeatsPerEvent bounds one venue.
const maxSeatsPerEvent = 200_000

// EventSpec describes an event to create: its sale window and its venue.
type EventSpec struct {
	ID           string        `json:"id"`
	Name         string        `json:"name"`
	Currency     string        `json:"currency"`
	StartsAt     time.Time     `json:"startsAt"`
	SaleOpensAt  time.Time     `json:"saleOpensAt"`
	SaleClosesAt *time.Time    `json:"saleClosesAt,omitempty"`
	HoldMinutes  int           `json:"holdMinutes"`
	Sections     []SectionSpec `json:"sections"`
}

// SectionSpec is a block of rows × seats at one base price (minor units).
type SectionSpec struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Rows        int    `json:"rows"`
	SeatsPerRow int    `json:"seatsPerRow"`
	BasePrice   int64  `json:"basePrice"`
}

// Validate checks a spec, filling defaults (hold minutes, names).
func (s *EventSpec) Validate() error {
	var errs []string
	if !validEventID(s.ID) {
		errs = append(errs, "id: 1-64 letters, digits, '.', '_' or '-'")
	}
	if err := validate.Text("name", s.Name, validate.MaxNameBytes); err != nil {
		errs = append(errs, err.Error())
	}
	if s.Name == "" {
		s.Name = s.ID
	}
	s.Currency = strings.ToUpper(s.Currency)
	if len(s.Currency) != 3 || strings.Trim(s.Currency, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		errs = append(errs, "currency: an ISO 4217 code such as EUR")
	}
	if s.StartsAt.IsZero() {
		errs = append(errs, "startsAt is required")
	}
	if s.SaleOpensAt.IsZero() {
		s.SaleOpensAt = time.Now().UTC().Truncate(time.Second)
	}
	if s.SaleClosesAt != nil && !s.SaleClosesAt.After(s.SaleOpensAt) {
		errs = append(errs, "saleClosesAt must be after saleOpensAt")
	}
	if s.HoldMinutes == 0 {
		s.HoldMinutes = 10
	}
	if s.HoldMinutes < 1 || s.HoldMinutes > 60 {
		errs = append(errs, "holdMinutes: 1 to 60")
	}
	if len(s.Sections) == 0 {
		errs = append(errs, "at least one section")
	}
	seen := map[string]bool{}
	total := 0
	for i := range s.Sections {
		sec := &s.Sections[i]
		if !sectionIDPattern.Valid(sec.ID) || seen[sec.ID] {
			errs = append(errs, fmt.Sprintf("section %q: ids are 1-16 letters, digits, '_' or '-', unique", sec.ID))
		}
		seen[sec.ID] = true
		if err := validate.Text("section "+sec.ID+" name", sec.Name, validate.MaxNameBytes); err != nil {
			errs = append(errs, err.Error())
		}
		if sec.Name == "" {
			sec.Name = "Section " + sec.ID
		}
		if sec.Rows < 1 || sec.SeatsPerRow < 1 || sec.Rows > 1000 || sec.SeatsPerRow > 1000 {
			errs = append(errs, fmt.Sprintf("section %s: 1-1000 rows of 1-1000 seats", sec.ID))
		}
		if sec.BasePrice < 0 || sec.BasePrice > 1e12 {
			errs = append(errs, fmt.Sprintf("section %s: basePrice out of range", sec.ID))
		}
		total += sec.Rows * sec.SeatsPerRow
	}
	if total > maxSeatsPerEvent {
		errs = append(errs, fmt.Sprintf("%d seats exceed the limit of %d per event", total, maxSeatsPerEvent))
	}
	if len(errs) > 0 {
		return refusal.New(ErrInvalidEvent, "%v: %s", ErrInvalidEvent, strings.Join(errs, "; "))
	}
	return nil
}

// ParseSections reads "A:20x30@4500,B:40x50@3000": section id, rows ×
// seats per row, base price in minor units.
func ParseSections(s string) ([]SectionSpec, error) {
	grids, err := parseGrids(s, "section", "ID:ROWSxSEATS@PRICE, e.g. A:20x30@4500", "no sections")
	if err != nil {
		return nil, err
	}
	out := make([]SectionSpec, len(grids))
	for i, g := range grids {
		out[i] = SectionSpec{ID: g.id, Rows: g.a, SeatsPerRow: g.b, BasePrice: g.price}
	}
	return out, nil
}

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

// EventSummary is what creating an event answers.
type EventSummary struct {
	ID       string `json:"id"`
	Seats    int    `json:"seats"`
	Sections int    `json:"sections"`
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

// PromotionSpec is a capped discount code of one event.
type PromotionSpec struct {
	Code        string     `json:"code"`
	DiscountBps int        `json:"discountBps"`
	MaxUses     int        `json:"maxUses"`
	ValidUntil  *time.Time `json:"validUntil,omitempty"`
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
