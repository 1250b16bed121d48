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

// Reservation is a hold and its frozen prices, as the API shows it.
type Reservation struct {
	ID        string    `json:"id"`
	Event     string    `json:"event"`
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expiresAt"`
	Total     int64     `json:"total"`
	Currency  string    `json:"currency"`
	PromoCode string    `json:"promoCode,omitempty"`
	Items     []Item    `json:"items"`
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
