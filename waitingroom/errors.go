package waitingroom

import (
	"errors"

	"github.com/presenced/presenced/internal/admission"
)

// The waiting room's refusals. The line and the settings store return
// these; only the handlers (http.go, *_http.go) turn them into a status
// and an error code, or into a socket's error frame.

// errNoRoom: the event has no waiting room (none was configured).
var errNoRoom = errors.New("waitingroom: no waiting room for this event")

// invalidSettingsError is a change refused by validation; nothing was
// stored.
type invalidSettingsError struct{ Err error }

func (e *invalidSettingsError) Error() string { return e.Err.Error() }
func (e *invalidSettingsError) Unwrap() error { return e.Err }

// The two ways a pass check fails (internal/admission's). Every error of
// Verify, Extend and Release wraps one of them.
var (
	// ErrNotAdmitted: the pass is not good for this user and event, or
	// there is no live lease behind it.
	ErrNotAdmitted = admission.ErrNotAdmitted
	// ErrUnavailable: the lease store failed; the caller must refuse (fail
	// closed) and may retry.
	ErrUnavailable = admission.ErrUnavailable
)
