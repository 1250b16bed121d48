package waitingroom

// The wire protocol a client sees: WebSocket events and error codes, and
// the admin API's view of a room. Clients and the load generator use these;
// Settings, Stats and the modes belong to it too.

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
