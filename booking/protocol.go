package booking

import (
	"fmt"
	"strings"
	"time"

	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/internal/validate"
)

// The wire protocol a client sees: request headers, the reservation and
// seat-map bodies, and the states they show. Clients and the load
// generator use these; nothing else in the package is for them.

// Header names of the hold endpoint.
const (
	HeaderAdmissionPass  = "X-Admission-Pass"
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Seat states.
const (
	SeatAvailable = "AVAILABLE"
	SeatHeld      = "HELD"
	SeatSold      = "SOLD"
	SeatBlocked   = "BLOCKED"
)

// Reservation states.
const (
	StatusPending   = "PENDING_PAYMENT"
	StatusPaid      = "PAID"
	StatusExpired   = "EXPIRED"
	StatusCancelled = "CANCELLED"
)

// Reservation kinds: seats of an event, or a stay at a hotel.
const (
	KindSeats = "seats"
	KindStay  = "stay"
)

// Reservation is a hold and its frozen prices, as the API shows it: seats
// of an event (Event, Items) or a stay at a hotel (Hotel, Stay).
type Reservation struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	Event     string    `json:"event,omitempty"`
	Hotel     string    `json:"hotel,omitempty"`
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expiresAt"`
	Total     int64     `json:"total"`
	Currency  string    `json:"currency"`
	PromoCode string    `json:"promoCode,omitempty"`
	Items     []Item    `json:"items,omitempty"`
	Stay      *Stay     `json:"stay,omitempty"`
}

// Item is one seat of a reservation with its price frozen at hold time.
type Item struct {
	Seat      int64  `json:"seat"`
	Section   string `json:"section"`
	Row       int    `json:"row"`
	Number    int    `json:"number"`
	BasePrice int64  `json:"basePrice"`
	SurgeBps  int64  `json:"surgeBps"`
	Discount  int64  `json:"discount"`
	Price     int64  `json:"price"`
	Status    string `json:"status"`
}

// SeatMapView is the JSON seat map.
type SeatMapView struct {
	Event     string        `json:"event"`
	Currency  string        `json:"currency"`
	SeatCount int           `json:"seatCount"`
	Order     string        `json:"order"`
	Sections  []SectionView `json:"sections"`
	Seats     []SeatView    `json:"seats"`
}

// SectionsView is the overview of an event's sections, without seats
// (GET /v1/events/{event}/sections): what a sale page opens on.
type SectionsView struct {
	Event     string        `json:"event"`
	Currency  string        `json:"currency"`
	SeatCount int           `json:"seatCount"`
	Sections  []SectionView `json:"sections"`
}

// SectionView summarises a section with its current price multiplier
// (advisory: the hold freezes the price that counts).
type SectionView struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	BasePrice     int64  `json:"basePrice"`
	MultiplierBps int64  `json:"multiplierBps"`
	SeatCount     int    `json:"seatCount"`
	Available     int    `json:"available"`
}

// SeatView is one seat.
type SeatView struct {
	ID        int64  `json:"id"`
	Section   string `json:"section"`
	Row       int    `json:"row"`
	Number    int    `json:"number"`
	Status    string `json:"status"`
	BasePrice int64  `json:"basePrice"`
}

// StayHoldRequest is the body of POST /v1/hotels/{hotel}/holds: rooms of
// one type from checkIn up to checkOut (dates of the hotel's nights,
// YYYY-MM-DD, checkOut exclusive).
type StayHoldRequest struct {
	RoomType string `json:"roomType"`
	CheckIn  string `json:"checkIn"`
	CheckOut string `json:"checkOut"`
	Rooms    int    `json:"rooms"`
	// Guests defaults to 1; at most rooms × the room type's capacity.
	Guests int `json:"guests,omitempty"`
}

// Stay is what a stay reservation holds, with its prices frozen per night.
// The reservation's total is Rooms × the sum of the nights' prices.
type Stay struct {
	RoomType     string  `json:"roomType"`
	RoomTypeName string  `json:"roomTypeName"`
	CheckIn      string  `json:"checkIn"`
	CheckOut     string  `json:"checkOut"`
	Rooms        int     `json:"rooms"`
	Guests       int     `json:"guests"`
	Nights       []Night `json:"nights"`
}

// Night is one night of a stay: its date and its price per room.
type Night struct {
	Date      string `json:"date"`
	BasePrice int64  `json:"basePrice"`
	Price     int64  `json:"price"`
}

// SearchResult is GET /v1/hotels: the hotels of a city with at least one
// room type free on every night of the stay for the guests, cheapest
// first, each with its live viewer count.
type SearchResult struct {
	City     string       `json:"city"`
	CheckIn  string       `json:"checkIn"`
	CheckOut string       `json:"checkOut"`
	Nights   int          `json:"nights"`
	Guests   int          `json:"guests"`
	Rooms    int          `json:"rooms"`
	Hotels   []HotelOffer `json:"hotels"`
}

// HotelOffer is one hotel of a search: its room types that fit, each with
// the rooms free on its fullest night and the price of the whole stay.
type HotelOffer struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Currency string `json:"currency"`
	// LowestTotal is the cheapest stay for the requested rooms.
	LowestTotal int64 `json:"lowestTotal"`
	// Viewers is how many people look at the hotel now (approximate);
	// absent when the count is not available.
	Viewers      *int64          `json:"viewers,omitempty"`
	ViewersStale bool            `json:"viewersStale,omitempty"`
	RoomTypes    []RoomTypeOffer `json:"roomTypes"`
}

// RoomTypeOffer is a room type free on every night of a search.
type RoomTypeOffer struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Capacity int    `json:"capacity"`
	// Available is the fewest rooms free on any night of the stay.
	Available int `json:"available"`
	// Total is the price of the stay for the requested rooms.
	Total int64 `json:"total"`
}

// Sale states of an event, as the admin reads show them.
const (
	// SaleScheduled: the sale has not opened yet.
	SaleScheduled = "scheduled"
	// SaleOnSale: open, with seats available.
	SaleOnSale = "on_sale"
	// SaleSoldOut: open, but no seat is available (some may come back when
	// holds expire).
	SaleSoldOut = "sold_out"
	// SaleClosed: past saleClosesAt.
	SaleClosed = "closed"
	// SaleEnded: the event has started.
	SaleEnded = "ended"
)

// EventView is an event as the admin API shows it: its settings, where its
// sale stands, and its seat and reservation counts.
type EventView struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Currency     string            `json:"currency"`
	StartsAt     time.Time         `json:"startsAt"`
	SaleOpensAt  time.Time         `json:"saleOpensAt"`
	SaleClosesAt *time.Time        `json:"saleClosesAt"`
	HoldMinutes  int               `json:"holdMinutes"`
	CreatedAt    time.Time         `json:"createdAt"`
	Sale         string            `json:"sale"`
	Seats        SeatCounts        `json:"seats"`
	Reservations ReservationCounts `json:"reservations"`
}

// SeatCounts are an event's seats by state.
type SeatCounts struct {
	Total     int64 `json:"total"`
	Available int64 `json:"available"`
	Held      int64 `json:"held"`
	Sold      int64 `json:"sold"`
	Blocked   int64 `json:"blocked"`
}

// ReservationCounts are an event's reservations by status.
type ReservationCounts struct {
	Pending   int64 `json:"pending"`
	Paid      int64 `json:"paid"`
	Expired   int64 `json:"expired"`
	Cancelled int64 `json:"cancelled"`
}

// EventList answers GET /v1/admin/events: events in id order; Next, when
// set, is the cursor (?after=) of the next page.
type EventList struct {
	Events []EventView `json:"events"`
	Next   string      `json:"next,omitempty"`
}

// The administration API's bodies (events, promotions, hotels, a live
// pause), which the CLI and the in-process API take as well.

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

// EventSummary is what creating an event answers.
type EventSummary struct {
	ID       string `json:"id"`
	Seats    int    `json:"seats"`
	Sections int    `json:"sections"`
}

// PromotionSpec is a capped discount code of one event.
type PromotionSpec struct {
	Code        string     `json:"code"`
	DiscountBps int        `json:"discountBps"`
	MaxUses     int        `json:"maxUses"`
	ValidUntil  *time.Time `json:"validUntil,omitempty"`
}

// HotelSpec describes a hotel to create: where it is, its room types, and
// how many nights of inventory to open from today (its local date).
type HotelSpec struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	City     string `json:"city"`
	Timezone string `json:"timezone"`
	Currency string `json:"currency"`
	// HoldMinutes a stay is held before it expires (default 10).
	HoldMinutes int `json:"holdMinutes"`
	// WaitingRoom: holds need a pass of the waiting room named like the
	// hotel (a flash deal).
	WaitingRoom bool           `json:"waitingRoom"`
	OpenNights  int            `json:"openNights"`
	RoomTypes   []RoomTypeSpec `json:"roomTypes"`
	// Rates override the base price on some nights.
	Rates []RateSpec `json:"rates,omitempty"`
}

// RoomTypeSpec is a kind of room: how many guests it sleeps, how many
// rooms of it there are, and its base price per night (minor units).
type RoomTypeSpec struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Capacity  int    `json:"capacity"`
	Rooms     int    `json:"rooms"`
	BasePrice int64  `json:"basePrice"`
}

// RateSpec is a calendar price: the price per room of every night from
// From up to To (exclusive) of one room type.
type RateSpec struct {
	RoomType string `json:"roomType"`
	From     string `json:"from"`
	To       string `json:"to"`
	Price    int64  `json:"price"`
}

// Validate checks a spec, filling defaults (name, hold minutes, open
// nights, room type names) and normalising city and currency.
func (s *HotelSpec) Validate() error {
	var errs []string
	if !validEventID(s.ID) {
		errs = append(errs, "id: 1-64 letters, digits, '.', '_' or '-'")
	}
	if s.Name == "" {
		s.Name = s.ID
	}
	if !validText(s.Name, 200) {
		errs = append(errs, "name: 1-200 printable characters")
	}
	s.City = strings.ToLower(s.City)
	if !cityPattern.MatchString(s.City) {
		errs = append(errs, "city: 1-64 lowercase letters, digits or '-' (a slug such as lisbon)")
	}
	if s.Timezone == "" || s.Timezone == "Local" || len(s.Timezone) > 64 {
		errs = append(errs, "timezone: an IANA time zone such as Europe/Lisbon")
	} else if _, err := time.LoadLocation(s.Timezone); err != nil {
		errs = append(errs, "timezone: an IANA time zone such as Europe/Lisbon")
	}
	s.Currency = strings.ToUpper(s.Currency)
	if len(s.Currency) != 3 || strings.Trim(s.Currency, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		errs = append(errs, "currency: an ISO 4217 code such as EUR")
	}
	if s.HoldMinutes == 0 {
		s.HoldMinutes = 10
	}
	if s.HoldMinutes < 1 || s.HoldMinutes > 60 {
		errs = append(errs, "holdMinutes: 1 to 60")
	}
	if s.OpenNights == 0 {
		s.OpenNights = defaultOpenNights
	}
	if s.OpenNights < 1 || s.OpenNights > maxOpenNights {
		errs = append(errs, fmt.Sprintf("openNights: 1 to %d", maxOpenNights))
	}
	if len(s.RoomTypes) == 0 || len(s.RoomTypes) > maxRoomTypes {
		errs = append(errs, fmt.Sprintf("1 to %d room types", maxRoomTypes))
	}
	seen := map[string]bool{}
	for i := range s.RoomTypes {
		rt := &s.RoomTypes[i]
		if !roomTypePattern.MatchString(rt.ID) || seen[rt.ID] {
			errs = append(errs, fmt.Sprintf("room type %q: ids are 1-32 letters, digits, '_' or '-', unique", rt.ID))
		}
		seen[rt.ID] = true
		if rt.Name == "" {
			rt.Name = rt.ID
		}
		if !validText(rt.Name, 100) {
			errs = append(errs, fmt.Sprintf("room type %s: name of 1-100 printable characters", rt.ID))
		}
		if rt.Capacity < 1 || rt.Capacity > maxRoomCapacity {
			errs = append(errs, fmt.Sprintf("room type %s: capacity 1 to %d guests", rt.ID, maxRoomCapacity))
		}
		if rt.Rooms < 1 || rt.Rooms > maxRoomsPerType {
			errs = append(errs, fmt.Sprintf("room type %s: 1 to %d rooms", rt.ID, maxRoomsPerType))
		}
		if rt.BasePrice < 0 || rt.BasePrice > maxPrice {
			errs = append(errs, fmt.Sprintf("room type %s: basePrice out of range", rt.ID))
		}
	}
	for _, r := range s.Rates {
		if err := r.validate(seen); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return refusal.New(ErrInvalidHotel, "%v: %s", ErrInvalidHotel, strings.Join(errs, "; "))
	}
	return nil
}

// HotelSummary is what creating a hotel answers.
type HotelSummary struct {
	ID        string `json:"id"`
	City      string `json:"city"`
	RoomTypes int    `json:"roomTypes"`
	Rooms     int    `json:"rooms"`
	// FirstNight and LastNight bound the inventory opened.
	FirstNight string `json:"firstNight"`
	LastNight  string `json:"lastNight"`
}

// LivePause is the body of PUT /v1/admin/events/{event}/live and the answer
// of both its methods.
type LivePause struct {
	Paused *bool `json:"paused"`
	// PollMs is how often paused viewers should fetch the seat map.
	PollMs int `json:"pollMs,omitempty"`
}
