package payments

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/presenced/presenced/internal/validate"
	"github.com/presenced/presenced/web/wire"
)

// Provider events travel in Stripe's event shape, whichever provider sends
// them: the sandbox emits it and both adapters read it with decodeObject.

// stripeEvent is the envelope of a Stripe event.
type stripeEvent struct {
	ID              string `json:"id"`
	Object          string `json:"object"`
	APIVersion      string `json:"api_version"`
	Created         int64  `json:"created"`
	Type            string `json:"type"`
	Livemode        bool   `json:"livemode"`
	PendingWebhooks int    `json:"pending_webhooks"`
	Data            struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// stripeObject is what we read of a payment intent or a charge.
type stripeObject struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	Status        string            `json:"status"`
	PaymentIntent string            `json:"payment_intent,omitempty"`
	ClientSecret  string            `json:"client_secret,omitempty"`
	Metadata      map[string]string `json:"metadata"`
}

// Metadata keys we set on every intent.
const (
	metaPayment     = "payment_id"
	metaReservation = "reservation_id"
)

// decodeEnvelope reads a Stripe-shaped event from a verified body.
func decodeEnvelope(body []byte) (WebhookEvent, error) {
	var e stripeEvent
	if err := wire.LooseJSON(body, &e); err != nil {
		return WebhookEvent{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if e.Object != "event" {
		return WebhookEvent{}, fmt.Errorf("%w: object is %q, not event", ErrMalformed, e.Object)
	}
	return decodeObject(e.ID, e.Type, e.Data.Object)
}

// decodeObject maps an event's id, type and data object to a WebhookEvent,
// refusing anything that could not have come from a provider.
func decodeObject(id, typ string, raw json.RawMessage) (WebhookEvent, error) {
	if !cleanToken(id, 255) || !cleanToken(typ, 100) {
		return WebhookEvent{}, fmt.Errorf("%w: event id or type missing or not printable", ErrMalformed)
	}
	ev := WebhookEvent{ID: id, Type: typ, Kind: kindOf(typ)}
	if ev.Kind == EventOther {
		return ev, nil // recorded; its object is not ours to read
	}
	var o stripeObject
	if err := wire.LooseJSON(raw, &o); err != nil {
		return WebhookEvent{}, fmt.Errorf("%w: data.object: %v", ErrMalformed, err)
	}
	ev.Ref = o.ID
	if o.Object == "charge" {
		ev.Ref = o.PaymentIntent
	}
	if !cleanToken(ev.Ref, 255) {
		return WebhookEvent{}, fmt.Errorf("%w: no payment intent reference", ErrMalformed)
	}
	if o.Amount < 0 || len(o.Currency) != 3 {
		return WebhookEvent{}, fmt.Errorf("%w: amount or currency", ErrMalformed)
	}
	ev.Amount, ev.Currency = o.Amount, strings.ToUpper(o.Currency)
	if p := o.Metadata[metaPayment]; p != "" {
		if _, err := uuid.Parse(p); err == nil {
			ev.PaymentID = strings.ToLower(p)
		}
	}
	return ev, nil
}

func kindOf(typ string) EventKind {
	switch typ {
	case "payment_intent.succeeded", "charge.succeeded":
		return EventSucceeded
	case "payment_intent.payment_failed", "charge.failed":
		return EventFailed
	case "charge.refunded":
		return EventRefunded
	}
	return EventOther
}

// cleanToken: 1..max bytes of valid UTF-8 without spaces or control
// characters.
func cleanToken(s string, maxBytes int) bool {
	return validate.Token("token", s, maxBytes) == nil
}
