package presence

import "errors"

// Presence's refusals. The store and the subscription logic return these;
// only the handlers (http.go, gateway_http.go) and the socket's error
// frames (requests.go) turn them into a status or a frame's error code.

// Errors of session operations.
var (
	// errNoSession: the session is gone (expired or disconnected); only a new
	// connection brings the user back.
	errNoSession       = errors.New("presence: session ended")
	errTooManySessions = errors.New("presence: too many sessions")
)

// limitError is a subscription change refused by a limit.
type limitError struct {
	msg   string
	users []string
}

func (e *limitError) Error() string { return e.msg }
