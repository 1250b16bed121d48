package presence

import (
	"encoding/json"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/web/wire"
)

// state is a subject's status as this process holds it, with its wire
// form: the JSON object followers get, encoded once per change for all of
// them rather than once per frame.
type state struct {
	st   Status
	wire []byte
	// bare is this state without lastActiveAt, for followers the user
	// keeps from seeing it; built on first use.
	bare atomic.Pointer[state]
}

// withoutLastActive is s as a follower who may not see lastActiveAt gets it.
func (s *state) withoutLastActive() *state {
	if s.st.LastActiveAt == 0 {
		return s
	}
	if b := s.bare.Load(); b != nil {
		return b
	}
	st := s.st
	st.LastActiveAt = 0
	b := newState(&st)
	s.bare.Store(b)
	return b
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
// wire.Envelope's, so these frames read like every other event.
var updatedPrefix = []byte(`{"v":` + strconv.Itoa(wire.ProtocolVersion) + `,"event":"` + EventPresenceUpdated + `","payload":{"users":[`)

// updatedFrame builds one presence:updated from pre-encoded statuses by
// appending bytes: it runs once per frame to each follower, so it avoids
// encoding anything again.
func updatedFrame(states []*state, resync bool, correlationID string) []byte {
	n := len(updatedPrefix) + 64 + len(correlationID)
	for _, s := range states {
		n += len(s.wire) + 1
	}
	b := append(make([]byte, 0, n), updatedPrefix...)
	for i, s := range states {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, s.wire...)
	}
	return closeUpdated(b, resync, correlationID)
}

// closeUpdated ends a presence:updated whose users were appended to
// updatedPrefix.
func closeUpdated(b []byte, resync bool, correlationID string) []byte {
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

// Frame buffers of the push path. Every delivery is one frame to one
// follower; at 20,000 deliveries a second, allocating each made the frames
// the largest share of the garbage and so of the collector's cycles, whose
// mark phases showed in the latency tail. A frame's buffer comes back once
// the socket wrote it (socket.Conn.SetSource's release). A channel rather
// than a sync.Pool: a slice goes in and out without being boxed (which
// would allocate again), and the few hundred kept buffers are a bounded,
// shared cost, not one per connection.
var frameBufs = make(chan []byte, 512)

const (
	frameBufSize = 512     // fits a frame of a few statuses
	frameBufMax  = 4 << 10 // larger ones (snapshots, bursts) are not kept
)

func getFrameBuf() []byte {
	select {
	case b := <-frameBufs:
		return b[:0]
	default:
		return make([]byte, 0, frameBufSize)
	}
}

// putFrameBuf keeps b for a later frame; the caller no longer uses it.
func putFrameBuf(b []byte) {
	if cap(b) > frameBufMax {
		return
	}
	select {
	case frameBufs <- b:
	default:
	}
}
