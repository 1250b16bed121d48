package presence

import (
	"encoding/json"
	"strings"

	"github.com/presenced/presenced/internal/auth"
)

// Automatic statuses; manual ones come from presence.manual_statuses.
const (
	StatusOnline  = "online"
	StatusIdle    = "idle"
	StatusOffline = "offline"
)

// Status is what a follower sees of a user.
type Status struct {
	User   string `json:"user"`
	Status string `json:"status"`
	// Since is when the status last changed (Unix ms); 0 for a user never seen.
	Since int64 `json:"since,omitempty"`
	// LastActiveAt is the last reported interaction (Unix ms), rounded down
	// to presence.last_active_granularity.
	LastActiveAt int64 `json:"lastActiveAt,omitempty"`
	// V grows by one with each change of this user's status.
	V int64 `json:"v"`
	// TS is when the change was published (Unix ms, server clock); it feeds
	// the publish-to-push latency and is not sent to clients.
	TS int64 `json:"ts,omitempty"`
}

// newer tells whether s is a later state than o. Since orders states across
// a Redis restart that resets V; V breaks ties within one millisecond.
func (s *Status) newer(o *Status) bool {
	if o == nil {
		return true
	}
	if s.Since != o.Since {
		return s.Since > o.Since
	}
	return s.V > o.V
}

// sameAs tells whether a follower would see no difference.
func (s *Status) sameAs(o *Status) bool {
	return o != nil && s.Status == o.Status && s.Since == o.Since && s.LastActiveAt == o.LastActiveAt
}

// public is s without the internal publish time.
func (s *Status) public() Status {
	p := *s
	p.TS = 0
	return p
}

func offlineStatus(user string) *Status {
	return &Status{User: user, Status: StatusOffline}
}

// Protocol events.
const (
	evPresenceUpdate      = "presence:update"
	evSubscriptionsSet    = "subscriptions:set"
	evSubscriptionsAdd    = "subscriptions:add"
	evSubscriptionsRemove = "subscriptions:remove"
	evSessionPing         = "session:ping"
	evSessionDisconnect   = "session:disconnect"
	evNotificationsSub    = "notifications:subscribe"

	evPresenceUpdated = "presence:updated"
	evNotification    = "notifications:received"
	evError           = "error"
)

// Error codes of the presence protocol beyond the shared web.Code* ones.
const (
	codeMessageTooLarge   = "message_too_large"
	codeInvalidStatus     = "invalid_status"
	codeInvalidTransition = "invalid_transition"
	codeUnauthorized      = "unauthorized"
)

// Close codes of the presence gateway.
const (
	// closeSessionEnded: the session of this connection is over (expired or
	// disconnected); reconnect to come back online.
	closeSessionEnded = 4009
)

// Client payloads.

type updatePayload struct {
	// Status is a manual status, "online"/"idle" (back to automatic, this
	// device active / inactive), or null (clear the manual status).
	Status json.RawMessage `json:"status"`
	// Active reports whether the user is interacting with this device.
	Active *bool `json:"active"`
}

type subscriptionsPayload struct {
	Users []string `json:"users"`
}

type pingPayload struct {
	// IdleMs is the time since the last interaction on this device.
	IdleMs *int64 `json:"idleMs"`
	Active *bool  `json:"active"`
}

type notifyPayload struct {
	User string `json:"user"`
	On   string `json:"on"`
}

// Server payloads.

type updatedPayload struct {
	Users  []Status `json:"users"`
	Resync bool     `json:"resync,omitempty"`
}

type notificationPayload struct {
	User   string `json:"user"`
	On     string `json:"on"`
	Status Status `json:"status"`
}

type errorPayload struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Users   []string `json:"users,omitempty"`
}

// validUserID is the server's one rule for user ids (auth.ValidUserID),
// applied here to subscription targets and read-API ids as well.
func validUserID(id string) bool { return auth.ValidUserID(id) == nil }

// cleanIDs validates and de-duplicates a list of user ids, keeping order.
func cleanIDs(ids []string) (out []string, bad string, ok bool) {
	seen := make(map[string]struct{}, len(ids))
	out = make([]string, 0, len(ids))
	for _, id := range ids {
		if !validUserID(id) {
			return nil, id, false
		}
		if _, dup := seen[id]; dup {
			continue
		}
		seen[id] = struct{}{}
		out = append(out, id)
	}
	return out, "", true
}

// member names one session in the lifecycle indexes: "<sid>:<user>". The
// session id is hex, so the first colon splits it.
func member(sid, user string) string { return sid + ":" + user }

func splitMember(m string) (sid, user string, ok bool) {
	sid, user, ok = strings.Cut(m, ":")
	return sid, user, ok && sid != "" && validUserID(user)
}
