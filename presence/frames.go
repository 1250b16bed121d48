package presence

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/presenced/presenced/web"
)

// state is a subject's status as this process holds it, with its wire
// form: the JSON object followers get, encoded once per change for all of
// them rather than once per frame.
type state struct {
	st   Status
	wire []byte
}

func newState(st *Status) *state {
	wire, err := json.Marshal(st.public())
	if err != nil {
		// A Status always encodes; keep the frame valid regardless.
		wire = []byte(`{}`)
	}
	return &state{st: *st, wire: wire}
}

// offlineState is the state of a user never seen.
func offlineState(user string) *state { return newState(offlineStatus(user)) }

// updatedPrefix opens every presence:updated frame; the field order is
// web.Envelope's, so these frames read like every other event.
var updatedPrefix = []byte(`{"v":` + strconv.Itoa(web.ProtocolVersion) + `,"event":"` + EventPresenceUpdated + `","payload":{"users":[`)

// updatedFrame builds one presence:updated from pre-encoded statuses by
// appending bytes: it runs once per frame to each follower, so it avoids
// encoding anything again.
func updatedFrame(states []*state, resync bool, correlationID string) []byte {
	n := len(updatedPrefix) + 64 + len(correlationID)
	for _, s := range states {
		n += len(s.wire) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, updatedPrefix...)
	for i, s := range states {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, s.wire...)
	}
	b = append(b, ']')
	if resync {
		b = append(b, `,"resync":true`...)
	}
	b = append(b, `},"ts":`...)
	b = strconv.AppendInt(b, time.Now().UnixMilli(), 10)
	if correlationID != "" {
		// Client-chosen: encoded as JSON, not trusted as bytes.
		id, _ := json.Marshal(correlationID)
		b = append(b, `,"correlationId":`...)
		b = append(b, id...)
	}
	return append(b, '}')
}
