package booking

import (
	"errors"
	"fmt"
	"strings"

	"github.com/presenced/presenced/internal/admission"
)

// Booking's refusals. Domain code returns these (or a refusal.Error of one
// of these kinds, with a message of its own), wrapped with what it was
// doing; callers tell them apart with errors.Is and errors.As. Only the
// handlers (httpError in http.go) turn them into a status and an error
// code. Input refused as sent is refusal.ErrInvalid, a busy store or
// dependency refusal.ErrBusy.
var (
	ErrEventNotFound      = errors.New("no such event")
	ErrSectionNotFound    = errors.New("no such section in this event")
	ErrHotelNotFound      = errors.New("no such hotel")
	ErrNoReservation      = errors.New("no such reservation")
	ErrNotPending         = errors.New("reservation is not pending")
	ErrNotCancellable     = errors.New("the reservation cannot be cancelled")
	ErrEventExists        = errors.New("event already exists")
	ErrHotelExists        = errors.New("hotel already exists")
	ErrEventInUse         = errors.New("event has live reservations or payments")
	ErrSaleClosed         = errors.New("the sale of this event is not open")
	ErrPendingCheckout    = errors.New("a checkout is already in progress")
	ErrSeatsUnavailable   = errors.New("a seat of the cart was taken")
	ErrNoSeatsAvailable   = errors.New("no seats of the section fit the request")
	ErrSeatsBeingHeld     = errors.New("another buyer is holding a seat of the cart right now")
	ErrUnknownSeats       = errors.New("seats that are not seats of this event")
	ErrUnknownRoomType    = errors.New("not a room type of this hotel")
	ErrRoomsUnavailable   = errors.New("not enough rooms free on every night")
	ErrDatesUnavailable   = errors.New("the dates cannot be booked")
	ErrTooManyGuests      = errors.New("too many guests for the rooms")
	ErrInvalidPromoCode   = errors.New("no such promotion code")
	ErrPromotionExhausted = errors.New("this promotion has no uses left")
	ErrPromotionUsed      = errors.New("you already used this promotion code")
	ErrPriceError         = errors.New("the price cannot be computed")
	ErrRateLimited        = errors.New("too many hold attempts; retry later")
	ErrKeyRequired        = errors.New("an Idempotency-Key header is required")
	ErrBadKey             = errors.New("the Idempotency-Key is not valid")
	ErrKeyReused          = errors.New("this Idempotency-Key was used with a different request")
	ErrInvalidEvent       = errors.New("invalid event")
	ErrInvalidPromotion   = errors.New("invalid promotion")
	ErrInvalidHotel       = errors.New("invalid hotel")
	ErrInvalidRates       = errors.New("invalid rates")
	ErrPromotionExists    = fmt.Errorf("promotion already exists: %w", ErrEventExists)
	errKeyTaken           = errors.New("idempotency key taken by a concurrent request")
)

// ErrNotAdmitted and ErrAdmissionUnavailable are the admission check's
// (internal/admission's).
var (
	ErrNotAdmitted          = admission.ErrNotAdmitted
	ErrAdmissionUnavailable = admission.ErrUnavailable
)

// SeatsTakenError refuses a hold some of whose seats another buyer holds
// or bought.
type SeatsTakenError struct{ Seats []int64 }

func (e *SeatsTakenError) Error() string { return fmt.Sprintf("seats %v are not available", e.Seats) }
func (e *SeatsTakenError) Unwrap() error { return ErrSeatsUnavailable }

// NoSeatsError refuses a best-available hold that no free seats of the
// section fit: Free seats of the section are neither held nor sold (too
// few, not adjacent, or over the buyer's maxPrice: OverMaxPrice).
type NoSeatsError struct {
	Section      string
	Free         int64
	OverMaxPrice bool
}

func (e *NoSeatsError) Error() string {
	if e.OverMaxPrice {
		return fmt.Sprintf("the best seats of section %s cost more than maxPrice now", e.Section)
	}
	return fmt.Sprintf("no free seats of section %s fit the request (%d free)", e.Section, e.Free)
}
func (e *NoSeatsError) Unwrap() error { return ErrNoSeatsAvailable }

// UnknownSeatsError refuses a hold naming seats the event does not have.
type UnknownSeatsError struct{ Seats []int64 }

func (e *UnknownSeatsError) Error() string {
	return fmt.Sprintf("seats %v are not seats of this event", e.Seats)
}
func (e *UnknownSeatsError) Unwrap() error { return ErrUnknownSeats }

// PendingCheckoutError refuses a hold of a buyer whose checkout
// Reservation is still running (at an event or a hotel: Where).
type PendingCheckoutError struct {
	Reservation string
	Where       string // "for this event" or "at this hotel"
}

func (e *PendingCheckoutError) Error() string {
	return "you already have a checkout in progress " + e.Where
}
func (e *PendingCheckoutError) Unwrap() error { return ErrPendingCheckout }

// Where a pending checkout is.
const (
	forThisEvent = "for this event"
	atThisHotel  = "at this hotel"
)

// RoomsFullError refuses a stay whose room type is full on Nights.
type RoomsFullError struct {
	RoomType string
	Nights   []string
}

func (e *RoomsFullError) Error() string {
	return fmt.Sprintf("not enough %s rooms free on %s", e.RoomType, strings.Join(e.Nights, ", "))
}
func (e *RoomsFullError) Unwrap() error { return ErrRoomsUnavailable }
