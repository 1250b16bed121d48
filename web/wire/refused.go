package wire

import (
	"errors"
	"net/http"

	"github.com/presenced/presenced/internal/refusal"
)

// Refusal is how a module's handlers answer one kind of domain refusal:
// Kind is the module's sentinel, Status and Code its answer, Message the
// message when the refusal brings none of its own ("": Kind's text).
type Refusal struct {
	Kind    error
	Status  int
	Code    string
	Message string
}

// shared are the kinds of internal/refusal, answered alike by every module.
var shared = []Refusal{
	{Kind: refusal.ErrInvalid, Status: http.StatusBadRequest, Code: "bad_request"},
	{Kind: refusal.ErrBusy, Status: http.StatusServiceUnavailable, Code: "unavailable"},
}

// Refused answers err as the first entry of table whose Kind it is
// (errors.Is), then as the shared kinds: invalid input 400 bad_request, a
// busy store or dependency 503 unavailable. The message is the refusal's
// own (refusal.Error), else the entry's Message, else the kind's text; a retry-after it carries
// becomes Retry-After. An error of no kind there is returned as it is: an
// answer already made (*Error), or an unexpected failure that ErrorHandler
// answers 503 (a store out of reach) or 500.
func Refused(err error, table []Refusal) error {
	if err == nil {
		return nil
	}
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return err
	}
	for _, r := range table {
		if errors.Is(err, r.Kind) {
			return r.Answer(err)
		}
	}
	for _, r := range shared {
		if errors.Is(err, r.Kind) {
			return r.Answer(err)
		}
	}
	return err
}

// Answer is r's answer to err, a refusal of r.Kind.
func (r Refusal) Answer(err error) *Error {
	msg := r.Message
	var own *refusal.Error
	if msg == "" || errors.As(err, &own) && errors.Is(own, r.Kind) {
		msg = refusal.Message(err, r.Kind)
	}
	return &Error{Status: r.Status, Code: r.Code, Message: msg, RetryAfter: refusal.RetryAfter(err)}
}
