package payments

import "errors"

// Payments' refusals and failures. Domain code returns these (or a
// refusal.Error of one of these kinds, with a message of its own),
// wrapped with what it was doing; callers tell them apart with errors.Is.
// Only the handlers (refusals in http.go) turn them into a status and an
// error code. A busy store or provider is refusal.ErrBusy.
var (
	ErrReservationPaid      = errors.New("the reservation is already paid")
	ErrReservationCancelled = errors.New("the reservation was cancelled")
	ErrReservationExpired   = errors.New("the hold expired; hold the seats again")
	ErrFraudDeclined        = errors.New("the payment was declined")
	ErrKeyReused            = errors.New("this Idempotency-Key was used for another reservation")
	// ErrProvidersUnavailable: every provider is failing; the hold was
	// released (a refusal.Error of this kind carries the retry-after).
	ErrProvidersUnavailable = errors.New("payments are unavailable; the seats were released, hold them again later")
)

// Errors of the Booking port.
var (
	ErrNoReservation = errors.New("no such reservation")
	ErrNotPending    = errors.New("reservation is not pending")
)

// Errors of ParseWebhook.
var (
	ErrBadSignature = errors.New("webhook signature does not verify")
	ErrMalformed    = errors.New("webhook body is not an event")
)

var (
	// errProviderTimeout marks a provider call that did not answer in
	// time: the provider may have acted, so the caller must retry with the
	// same key.
	errProviderTimeout = errors.New("payment provider did not answer in time")
	// errProviderRefused is a provider's definite "no" (a 4xx): retrying
	// the same request cannot help, and it says nothing about the
	// provider's health.
	errProviderRefused = errors.New("payment provider refused the request")
	// errAllProvidersDown: every provider's breaker is open.
	errAllProvidersDown = errors.New("every payment provider is failing")
	// errNotReady: the payment exists but its intent reference is not
	// saved yet; the provider must retry (503).
	errNotReady        = errors.New("payment reference not saved yet")
	errWebhookConflict = errors.New("webhook event id reused with other content")
)
