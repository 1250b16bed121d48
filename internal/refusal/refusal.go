// Package refusal is what a domain module's refusals share, with no
// transport in it: a refusal of one of the module's kinds told in a
// message of its own, input that cannot be accepted as sent, and a store
// or dependency too busy to answer now. The module declares its kinds as
// sentinels (its errors.go); its handlers alone map them to a status and
// an error code.
package refusal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Shared kinds, which every module's handlers answer alike.
var (
	// ErrInvalid is input that cannot be accepted as sent.
	ErrInvalid = errors.New("invalid input")
	// ErrBusy is a store or dependency that cannot answer now: the caller
	// may retry, after RetryAfter when it is set.
	ErrBusy = errors.New("busy, retry")
)

// Error is a refusal of Kind told to the client as Msg. errors.Is sees
// Kind, so a caller tells refusals apart by kind, never by message.
type Error struct {
	Kind error
	Msg  string
	// RetryAfter is when the client may come back (0: not said).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Kind }

// New is a refusal of kind with a message of its own.
func New(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Invalid refuses input that cannot be accepted as sent.
func Invalid(format string, args ...any) *Error {
	return New(ErrInvalid, format, args...)
}

// Busy says a store or dependency cannot answer now: retry after about
// after, jittered so that clients told to come back do not return in one
// wave.
func Busy(after time.Duration, format string, args ...any) *Error {
	e := New(ErrBusy, format, args...)
	e.RetryAfter = Jitter(after)
	return e
}

// Jitter returns a duration uniformly within [d/2, 3d/2).
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(rand.Int64N(int64(d)))
}

// Message is what the client is told of err, a refusal of kind: the
// message of the refusal err carries, else kind's own text.
func Message(err, kind error) string {
	var r *Error
	if errors.As(err, &r) && errors.Is(r, kind) {
		return r.Msg
	}
	return kind.Error()
}

// RetryAfter is the retry-after err carries (0: none).
func RetryAfter(err error) time.Duration {
	var r *Error
	if errors.As(err, &r) {
		return r.RetryAfter
	}
	return 0
}
