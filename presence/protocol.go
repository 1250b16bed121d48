package presence

import (
	"encoding/json"

	"github.com/presenced/presenced/config"
)

// The wire protocol a client sees over /v1/presence/ws and the read API:
// events, payloads, error and close codes. Clients and the load generator
// use these; nothing else in the package is for them.

// Automatic statuses; manual ones come from presence.manual_statuses.
const (
	StatusOnline  = "online"
	StatusIdle    = "idle"
	StatusOffline = "offline"
	// StatusInvisible is set like a manual status (presence:update) but is
	// a privacy mode: followers see the user offline until it is cleared.
	StatusInvisible = config.StatusInvisible
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
	// Invisible is set only in a user's own view of themself (and in the
	// true view an API key asks for): followers see an invisible user
	// offline, with nothing telling it apart from one really gone.
	Invisible bool `json:"invisible,omitempty"`
}

// Who may see a user's status, and their lastActiveAt, as the user chose:
// everyone the policy allows (the default), only the users on the user's
// own contact list, or nobody.
const (
	VisibleEveryone = "everyone"
	VisibleContacts = "contacts"
	VisibleNobody   = "nobody"
)

// Protocol events.
const (
	EventPresenceUpdate         = "presence:update"
	EventSubscriptionsSet       = "subscriptions:set"
	EventSubscriptionsAdd       = "subscriptions:add"
	EventSubscriptionsRemove    = "subscriptions:remove"
	EventSessionPing            = "session:ping"
	EventSessionDisconnect      = "session:disconnect"
	EventNotificationsSubscribe = "notifications:subscribe"
	EventPrivacySet             = "privacy:set"

	EventPresenceUpdated      = "presence:updated"
	EventNotificationReceived = "notifications:received"
	EventPrivacyUpdated       = "privacy:updated"
	EventError                = "error"
)

// Error codes of the presence protocol beyond the shared web.Code* ones.
const (
	CodeMessageTooLarge   = "message_too_large"
	CodeInvalidStatus     = "invalid_status"
	CodeInvalidTransition = "invalid_transition"
	CodeUnauthorized      = "unauthorized"
)

// Close codes of the presence gateway.
const (
	// CloseSessionEnded: the session of this connection is over (expired or
	// disconnected); reconnect to come back online.
	CloseSessionEnded = 4009
)

// Client payloads.

type UpdatePayload struct {
	// Status is a manual status, "online"/"idle" (back to automatic, this
	// device active / inactive), or null (clear the manual status).
	Status json.RawMessage `json:"status"`
	// Active reports whether the user is interacting with this device.
	Active *bool `json:"active"`
}

type SubscriptionsPayload struct {
	Users []string `json:"users"`
}

type PingPayload struct {
	// IdleMs is the time since the last interaction on this device.
	IdleMs *int64 `json:"idleMs"`
	Active *bool  `json:"active"`
}

// VisibilityPayload says who may see the user's status and lastActiveAt
// (Visible*). In privacy:set an empty field is left as it is; privacy:updated
// carries both.
type VisibilityPayload struct {
	Status       string `json:"status,omitempty"`
	LastActiveAt string `json:"lastActiveAt,omitempty"`
}

type NotifyPayload struct {
	User string `json:"user"`
	On   string `json:"on"`
}

// Server payloads.

type UpdatedPayload struct {
	Users  []Status `json:"users"`
	Resync bool     `json:"resync,omitempty"`
	// Self marks the user's own true status, sent to their sessions after
	// a change made on another of them (or by an administrator).
	Self bool `json:"self,omitempty"`
}

type NotificationPayload struct {
	User   string `json:"user"`
	On     string `json:"on"`
	Status Status `json:"status"`
}

type ErrorPayload struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Users   []string `json:"users,omitempty"`
}

// AuditRecord is one change a person made to a user's presence: a manual
// status, invisible, or who may see the user.
type AuditRecord struct {
	ID   int64  `json:"id,omitempty"`
	User string `json:"user"`
	// Actor is "user:<id>" (the user, from a session: Device is its id) or
	// "admin:api-key" (the server API).
	Actor  string `json:"actor"`
	Device string `json:"device,omitempty"`
	// Kind is status, invisible or visibility; Old and New its values.
	Kind      string `json:"kind"`
	Old       string `json:"old"`
	New       string `json:"new"`
	At        int64  `json:"at"` // Unix ms
	RequestID string `json:"requestId,omitempty"`
}

// AuditPage is one page of GET /v1/presence/audit/{user}, newest first.
type AuditPage struct {
	User    string        `json:"user"`
	Records []AuditRecord `json:"records"`
	// Next is the before= of the next (older) page; absent on the last.
	Next string `json:"next,omitempty"`
}

// Webhooks.

// WebhookBody is the JSON body of one webhook delivery. Deliveries are
// signed with the Standard Webhooks scheme (internal/stdwebhook): headers
// webhook-id (the same on every retry of a batch), webhook-timestamp and
// webhook-signature, keyed with presence.webhook.secret.
type WebhookBody struct {
	Events []Status `json:"events"`
	// Audit holds the audit records of the batch, when there are any.
	Audit []AuditRecord `json:"audit,omitempty"`
}
