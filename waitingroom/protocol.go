package waitingroom

import "time"

// The wire protocol a client sees: the answers of join and status, the
// WebSocket events and error codes, and the admin API's view of a room
// (with Settings and Stats). Clients and the load generator use these.

// WebSocket events and error codes of the waiting room.
const (
	EventPosition = "queue:position" // server: your place in line
	EventAdmitted = "queue:admitted" // server: your pass; the socket closes
	EventPing     = "queue:ping"     // client: refresh my heartbeat, tell my place

	CodeNoRoom    = "no_waiting_room"
	CodeNotInLine = "not_in_line"
)

// RoomView is the admin's view of one waiting room.
type RoomView struct {
	Event    string   `json:"event"`
	Settings Settings `json:"settings"`
	Stats    Stats    `json:"stats"`
}

// Modes of admission order.
const (
	// ModeFIFO admits in join order.
	ModeFIFO = "fifo"
	// ModeLottery shuffles everyone who joined before the open time once, at
	// opening; later joiners queue first in, first out behind them.
	ModeLottery = "lottery"
)

// States of a place in line, as join and status answer them.
const (
	StateQueued   = "queued"
	StateAdmitted = "admitted"
	StateAbsent   = "absent"
)

// Answers of join, status and the socket.

// QueuedAnswer is the place of someone in line.
type QueuedAnswer struct {
	State string `json:"state"` // "queued"
	// Position is 1 for the head of the line; null while a lottery has not
	// been drawn.
	Position   *int64 `json:"position"`
	AheadOfYou *int64 `json:"aheadOfYou"`
	// EtaSeconds estimates the wait from the measured admission rate; null
	// when there is no basis (paused, no capacity).
	EtaSeconds    *int64     `json:"etaSeconds"`
	EtaIsEstimate bool       `json:"etaIsEstimate"`
	Paused        bool       `json:"paused,omitempty"`
	OpensAt       *time.Time `json:"opensAt,omitempty"`
	// Lottery is "pending" for an entry whose order is drawn at opening.
	Lottery string `json:"lottery,omitempty"`
}

// AdmittedAnswer carries the pass of someone admitted.
type AdmittedAnswer struct {
	State     string    `json:"state"` // "admitted"
	Pass      string    `json:"pass"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// RoomList answers GET /v1/admin/waitingrooms: rooms in event order; Next,
// when set, is the cursor (?after=) of the next page.
type RoomList struct {
	Rooms []RoomView `json:"rooms"`
	Next  string     `json:"next,omitempty"`
}

// Settings of one event's waiting room, changeable at run time; the next
// tick uses whatever is stored when it runs.
type Settings struct {
	// Capacity is how many people may hold a checkout lease at once.
	Capacity int `json:"capacity"`
	// Batch caps admissions per tick, so freed capacity is not released as
	// one thundering herd.
	Batch int `json:"batch"`
	// LeaseSeconds is the checkout window an admission grants.
	LeaseSeconds int `json:"leaseSeconds"`
	// HeartbeatTimeoutSeconds: an entry silent this long is abandoned.
	HeartbeatTimeoutSeconds int `json:"heartbeatTimeoutSeconds"`
	// OpenAt: nobody is admitted before it; nil means open now.
	OpenAt *time.Time `json:"openAt"`
	Mode   string     `json:"mode"`
	// Paused holds the line: people keep their places, nobody is admitted.
	Paused bool `json:"paused"`
}

// Stats are the live figures of one waiting room.
type Stats struct {
	Queued             int      `json:"queued"`
	Active             int      `json:"active"`
	Capacity           int      `json:"capacity"`
	AdmittedPerMinute  int      `json:"admittedPerMinute"`
	AbandonedPerMinute int      `json:"abandonedPerMinute"`
	OldestWaitSeconds  *float64 `json:"oldestWaitSeconds"`
	// AdmissionRate is the measured admissions per second behind the
	// estimates (over waitingroom.eta_window).
	AdmissionRate float64    `json:"admissionRatePerSecond"`
	LotteryDrawn  bool       `json:"lotteryDrawn"`
	LastTick      *time.Time `json:"lastTick"`
	// MemoryBytes is Redis's estimate of the line's memory (one sorted
	// set: places and heartbeats), when the server answers MEMORY USAGE.
	MemoryBytes *int64 `json:"memoryBytes,omitempty"`
}
