package gate

import "errors"

// A scan's refusals. Scan returns these (or a refusal.Error of one of
// these kinds, with a message of its own); only the handlers (http.go)
// turn them into a status and an error code.
var (
	// ErrInvalidCode: not a ticket code, not a ticket of this venue, or
	// a code whose window has passed.
	ErrInvalidCode = errors.New("invalid ticket code")
	// ErrAlreadyUsed: the ticket was admitted once already.
	ErrAlreadyUsed = errors.New("this ticket was already used")
	// ErrLedgerUnavailable: the entry ledger cannot be written, so
	// nobody enters (fail closed).
	ErrLedgerUnavailable = errors.New("the entry ledger cannot be written; entry refused")
)
