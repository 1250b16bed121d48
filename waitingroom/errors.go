package waitingroom

import "errors"

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
