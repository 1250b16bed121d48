package viewers

import "errors"

// The viewers' refusals. Domain code returns these (or a refusal of the
// shared kinds: refusal.ErrInvalid for a malformed hotel id,
// refusal.ErrBusy while the registry or a store cannot answer); only the
// handlers (http.go) and the socket's frames (live.go) turn them into a
// status or a frame's error code.
var (
	// ErrHotelNotFound: no such hotel is registered.
	ErrHotelNotFound = errors.New("no such hotel")
)
