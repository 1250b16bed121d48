package viewers

import "time"

// The wire protocol a client sees: the bodies of the count endpoint, the
// SSE events and the WebSocket frames. Clients and the load generator use
// these types; nothing else in the package is for them.

// Count is a hotel's viewer count as the count endpoint answers it and as
// live streams push it.
type Count struct {
	Hotel string    `json:"hotel"`
	Count int64     `json:"count"`
	Stale bool      `json:"stale"`
	AsOf  time.Time `json:"asOf"`
}
