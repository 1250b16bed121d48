package booking

import "time"

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
