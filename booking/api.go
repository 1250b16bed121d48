package booking

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/internal/outbox"
)

// The module's in-process API: what the app and other modules may call, and
// the ports booking needs from others. Everything else is booking's own.

// Admission checks a buyer's admission pass: its signature, expiry, user
// and event (the waiting room holds the pass keys; the app hands its check
// over). The lease behind the pass is internal/admission's, which booking
// checks and extends in scripts of its own: a seat hold's start with the
// lease rules (admission.LeaseLua) and keep booking's keys in the lease's
// slot (admission.Slot), so rate, lease and seat hints are one call.
type Admission interface {
	// CheckPass checks the pass itself, not its lease. Errors wrap
	// ErrNotAdmitted or ErrAdmissionUnavailable.
	CheckPass(pass, event, user string) error
}

// ViewerCounts tells how many people look at a hotel right now. The viewers
// module provides it through the app; booking never reads its keys.
type ViewerCounts interface {
	// ViewerCount is hotel's approximate live viewer count; stale means it
	// is the last one known because the counting store is failing.
	ViewerCount(ctx context.Context, hotel string) (count int64, stale bool, err error)
}

// KindInventoryChanged is the outbox event of a section whose seats changed.
const KindInventoryChanged = "inventory.changed"

// InventoryChanged is its payload.
type InventoryChanged struct {
	Event   string `json:"event"`
	Section string `json:"section"`
}

// KindStayInventoryChanged is the outbox event of room nights whose
// availability or price changed.
const KindStayInventoryChanged = "stays.inventory.changed"

// StayInventoryChanged is its payload: the nights From up to To (exclusive)
// of one room type.
type StayInventoryChanged struct {
	Hotel    string `json:"hotel"`
	City     string `json:"city"`
	RoomType string `json:"roomType"`
	From     string `json:"from"`
	To       string `json:"to"`
}

// KindHintsReleased is the outbox event of a reservation that ended: its
// seat hints are released (owner-checked), however the process fared.
const KindHintsReleased = "booking.hints_released"

// HintsReleased is its payload.
type HintsReleased struct {
	Event       string  `json:"event"`
	Reservation string  `json:"reservation"`
	Seats       []int64 `json:"seats"`
}

// RegisterEffects adds booking's derived effects of outbox events to the
// relay: an inventory change drops the cached seat map, then tells live
// viewers; a stay inventory change drops the city's cached searches.
func (m *Module) RegisterEffects(ctx context.Context, h module.Host, r *outbox.Relay) error {
	rdb, err := h.Redis(ctx)
	if err != nil {
		return err
	}
	hb, err := h.Hub(ctx)
	if err != nil {
		return err
	}
	r.HandleBatch(KindInventoryChanged, newInvalidator(rdb, hb, m.keys).Handle)
	r.Handle(KindStayInventoryChanged, newSearchInvalidator(rdb, m.keys).Handle)
	hs := hints{rdb: rdb, ks: m.keys}
	r.Handle(KindHintsReleased, func(ctx context.Context, e outbox.Event) error {
		var p HintsReleased
		if err := json.Unmarshal(e.Payload, &p); err != nil || !validEventID(p.Event) || len(p.Seats) > 1000 {
			return nil // nothing to release; not worth stopping the relay for
		}
		return hs.release(ctx, p.Event, p.Seats, p.Reservation)
	})
	return nil
}

// HotelsSince lists the ids of hotels registered after cursor, oldest
// first, at most limit, and the cursor to pass next time (the viewers'
// registry of hotels, through the app). It needs the directory part.
func (m *Module) HotelsSince(ctx context.Context, cursor int64, limit int) ([]string, int64, error) {
	if m.directory == nil {
		return nil, cursor, errors.New("booking: the hotel directory is not started in this process")
	}
	return hotelsSince(ctx, m.directory, cursor, limit)
}

// HotelCard is what a hotel's page shows before any dates are chosen.
type HotelCard struct {
	ID, Name, City, Currency string
	RoomTypes                []RoomTypeCard // cheapest first
}

// RoomTypeCard is one room type of a HotelCard.
type RoomTypeCard struct {
	ID, Name  string
	Capacity  int
	BasePrice int64 // minor units, per room and night, before rates
}

// Hotel reads the hotel's card (ErrHotelNotFound when there is none). It
// needs the search part, whose read-only login it uses.
func (m *Module) Hotel(ctx context.Context, id string) (HotelCard, error) {
	if m.search == nil {
		return HotelCard{}, errors.New("booking: the hotel search is not started in this process")
	}
	h, err := loadHotel(ctx, m.search.ro, id)
	if err != nil {
		return HotelCard{}, err
	}
	card := HotelCard{ID: id, Name: h.name, City: h.city, Currency: h.currency}
	for _, rt := range h.roomTypes {
		card.RoomTypes = append(card.RoomTypes, RoomTypeCard{ID: rt.id, Name: rt.name, Capacity: rt.capacity, BasePrice: rt.basePrice})
	}
	slices.SortFunc(card.RoomTypes, func(a, b RoomTypeCard) int {
		return cmp.Or(cmp.Compare(a.BasePrice, b.BasePrice), cmp.Compare(a.ID, b.ID))
	})
	return card, nil
}

// Administration: what `presenced event create`, `presenced hotel create`
// and `presenced demo` call. They need the admin part (StartAdmin).

// CreateEvent writes an event, its sections and every seat, and opens its
// sale. An event of the same id is ErrEventExists.
func (m *Module) CreateEvent(ctx context.Context, spec EventSpec) (EventSummary, error) {
	db, err := m.adminPool()
	if err != nil {
		return EventSummary{}, err
	}
	return createEvent(ctx, db, spec)
}

// CreatePromotion adds a promotion code to event.
func (m *Module) CreatePromotion(ctx context.Context, event string, p PromotionSpec) error {
	db, err := m.adminPool()
	if err != nil {
		return err
	}
	return createPromotion(ctx, db, event, p)
}

// CreateHotel writes a hotel, its room types and their nights open for
// sale. A hotel of the same id is ErrHotelExists.
func (m *Module) CreateHotel(ctx context.Context, spec HotelSpec) (HotelSummary, error) {
	db, err := m.adminPool()
	if err != nil {
		return HotelSummary{}, err
	}
	return createHotel(ctx, db, spec)
}

func (m *Module) adminPool() (*pgxpool.Pool, error) {
	if m.admin == nil {
		return nil, errors.New("booking: the admin part is not started in this process")
	}
	return m.admin, nil
}

// The checkout port: what payments calls, inside its own transaction, to
// settle a reservation. Every terminal transition locks the reservation row
// first, so a payment, an expiry and a cancel can never both win.

// Checkout is a reservation as payments sees it: seats of an event or a
// stay at a hotel (Kind).
type Checkout struct {
	ID        string
	Kind      string // KindSeats or KindStay
	Event     string // seats only
	Hotel     string // stays only
	User      string
	Status    string
	Total     int64
	Currency  string
	ExpiresAt time.Time
	// Due: the hold's time is up, whether or not the expiry worker has run.
	Due bool
}

// Admits is what a ticket of this checkout lets its holder into: the event
// of a seat checkout, the hotel of a stay. A hotel is prefixed so that it
// never shares a name with an event: tickets, manifests and gates are kept
// per subject, and a hotel named like an event must not open its doors.
func (c Checkout) Admits() string {
	if c.Kind == KindStay {
		return "hotel:" + c.Hotel
	}
	return c.Event
}

// Line is one thing a paid checkout sold, as payments issues a ticket or a
// voucher for it: a seat, or one room of a stay. ID is stable and unique
// across every reservation; Label is what a person reads on the ticket.
type Line struct {
	ID    string
	Label string
}

// LockCheckout locks reservation id in tx and returns it.
func (m *Module) LockCheckout(ctx context.Context, tx pgx.Tx, id string) (Checkout, error) {
	return lockCheckout(ctx, tx, id)
}

// MarkPaid sells a checkout locked in tx: PENDING_PAYMENT and not due →
// PAID, its items and seats SOLD (or its room nights moved from held to
// sold), with inventory events. Anything else is ErrNotPending and changes
// nothing.
func (m *Module) MarkPaid(ctx context.Context, tx pgx.Tx, id string) error {
	return markPaid(ctx, tx, id)
}

// ReleaseCheckout ends a pending checkout before its time (payments cannot
// take money: the seats or nights go back rather than stay locked). afterCommit frees
// the seat hints and the buyer's admission lease; call it once tx commits.
func (m *Module) ReleaseCheckout(ctx context.Context, tx pgx.Tx, id string) (afterCommit func(context.Context), err error) {
	r, err := endReservation(ctx, tx, id, StatusCancelled, false, "")
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) {
		if m.holds != nil {
			m.holds.releaseAfter(ctx, r, true)
		}
	}, nil
}

// Lines lists what paid checkout id sold, in a stable order, read in tx: a
// line per sold seat, or a line per room of a stay. A checkout that is not
// PAID has no lines (ErrNotPending).
func (m *Module) Lines(ctx context.Context, tx pgx.Tx, id string) ([]Line, error) {
	return checkoutLines(ctx, tx, id)
}

// DoubleOwnedSeats counts seats with more than one live owner, which the
// schema makes impossible: a correctness monitor that must read 0.
func (m *Module) DoubleOwnedSeats(ctx context.Context, tx pgx.Tx) (int, error) {
	return doubleOwnedSeats(ctx, tx)
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

// ParseRoomTypes reads "std:30x2@9000,suite:5x4@25000": room type id,
// rooms × guests per room, base price per night in minor units.
func ParseRoomTypes(s string) ([]RoomTypeSpec, error) {
	grids, err := parseGrids(s, "room type", "ID:ROOMSxGUESTS@PRICE, e.g. std:30x2@9000", "no room types")
	if err != nil {
		return nil, err
	}
	out := make([]RoomTypeSpec, len(grids))
	for i, g := range grids {
		out[i] = RoomTypeSpec{ID: g.id, Rooms: g.a, Capacity: g.b, BasePrice: g.price}
	}
	return out, nil
}
