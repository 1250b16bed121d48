package wire

import (
	"encoding/json"
	"time"
)

// ProtocolVersion is the "v" of every WebSocket envelope.
const ProtocolVersion = 1

// Envelope frames every message of presenced's WebSocket protocols:
//
//	{"v":1,"event":"presence:update","payload":{...},"id":"c1","ts":1700000000000,"correlationId":"c1"}
//
// Clients set id on requests they want answered; the server echoes it as
// correlationId on the reply or error.
type Envelope struct {
	V             int             `json:"v"`
	Event         string          `json:"event"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	ID            string          `json:"id,omitempty"`
	TS            int64           `json:"ts,omitempty"` // Unix milliseconds
	CorrelationID string          `json:"correlationId,omitempty"`
}

// Error codes shared by the WebSocket protocols; modules add their own.
const (
	CodeBadJSON            = "bad_json"
	CodeUnsupportedVersion = "unsupported_version"
	CodeUnknownEvent       = "unknown_event"
	CodeBadPayload         = "bad_payload"
	CodeRateLimited        = "rate_limited"
	CodeForbidden          = "forbidden"
	CodeLimitExceeded      = "limit_exceeded"
	CodeUnavailable        = "unavailable"
)

// ProtocolError is a client mistake answered with an error event; the
// connection survives it.
type ProtocolError struct {
	Code    string
	Message string
}

func (e *ProtocolError) Error() string { return e.Code + ": " + e.Message }

// ParseEnvelope decodes and checks a client frame. The returned envelope
// keeps the id even when the frame is refused, so the error can name it.
func ParseEnvelope(msg []byte) (Envelope, *ProtocolError) {
	var env Envelope
	if err := StrictJSON(msg, &env); err != nil {
		// Read what can be read, so the error can still name the id.
		var loose Envelope
		if LooseJSON(msg, &loose) == nil && len(loose.ID) <= 64 {
			env = Envelope{ID: loose.ID}
		}
		return env, &ProtocolError{Code: CodeBadJSON, Message: "the frame is not one JSON envelope: " + err.Error()}
	}
	if len(env.ID) > 64 {
		// Checked first: no refusal echoes an oversized id back.
		return Envelope{}, &ProtocolError{Code: CodeBadPayload, Message: "id is longer than 64 characters"}
	}
	if env.V != ProtocolVersion {
		return env, &ProtocolError{Code: CodeUnsupportedVersion, Message: "v must be 1"}
	}
	if env.Event == "" {
		return env, &ProtocolError{Code: CodeBadPayload, Message: "event is required"}
	}
	return env, nil
}

// DecodePayload strictly decodes an envelope's payload into v (StrictJSON):
// unknown or miscased fields are refused so a typo is an error, not a
// silent no-op.
func DecodePayload(env Envelope, v any) *ProtocolError {
	if len(env.Payload) == 0 {
		return &ProtocolError{Code: CodeBadPayload, Message: env.Event + ": payload is required"}
	}
	if err := StrictJSON(env.Payload, v); err != nil {
		return &ProtocolError{Code: CodeBadPayload, Message: env.Event + ": " + err.Error()}
	}
	return nil
}

// EventFrame encodes a server event.
func EventFrame(event string, payload any, correlationID string) []byte {
	p, err := json.Marshal(payload)
	if err != nil {
		p = []byte("null")
	}
	b, _ := json.Marshal(Envelope{
		V: ProtocolVersion, Event: event, Payload: p,
		TS: time.Now().UnixMilli(), CorrelationID: correlationID,
	})
	return b
}

// ErrorFrame encodes an "error" event carrying code and message, answering
// the request whose id is correlationID.
func ErrorFrame(code, message, correlationID string) []byte {
	return EventFrame("error", map[string]string{"code": code, "message": message}, correlationID)
}
