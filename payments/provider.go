package payments

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Provider is a payment service provider: it creates intents, refunds them
// and signs the webhooks that are the only word on whether money moved.
// The sandbox and the Stripe adapter implement it.
type Provider interface {
	// Name is the provider's name in URLs, rows and metrics.
	Name() string
	// CreateIntent creates (or, for the same PaymentID, returns again) the
	// intent of one payment: PaymentID is the provider's idempotency key.
	CreateIntent(ctx context.Context, req IntentRequest) (Intent, error)
	// Refund returns the money of an intent; key makes a retry harmless.
	Refund(ctx context.Context, key, ref string, amount int64) (string, error)
	// ParseWebhook verifies a delivery's signature and timestamp on the raw
	// body, then decodes it. Errors wrap ErrBadSignature or ErrMalformed.
	ParseWebhook(body []byte, header http.Header, now time.Time) (WebhookEvent, error)
}

// IntentRequest asks for the intent of one payment.
type IntentRequest struct {
	PaymentID   string
	Reservation string
	Amount      int64
	Currency    string // ISO 4217, upper case
}

// Intent is what the buyer needs for the confirm step.
type Intent struct {
	Ref          string
	ClientSecret string
	// ConfirmURL is where the buyer confirms (hosted checkout, 3-D Secure);
	// empty when the client confirms with the secret itself.
	ConfirmURL string
}

// EventKind is what a webhook event means for us.
type EventKind int

const (
	// EventOther is recorded and otherwise ignored.
	EventOther EventKind = iota
	// EventSucceeded: the money was taken.
	EventSucceeded
	// EventFailed: the intent failed; nothing was taken.
	EventFailed
	// EventRefunded: the money went back.
	EventRefunded
)

// WebhookEvent is a verified provider event.
type WebhookEvent struct {
	ID   string
	Type string
	Kind EventKind
	// PaymentID is our id from the intent's metadata ("" when absent).
	PaymentID string
	Ref       string
	Amount    int64
	Currency  string // upper case
}

// Errors of ParseWebhook.
var (
	ErrBadSignature = errors.New("webhook signature does not verify")
	ErrMalformed    = errors.New("webhook body is not an event")
)

// errProviderTimeout marks a provider call that did not answer in time:
// the provider may have acted, so the caller must retry with the same key.
var errProviderTimeout = errors.New("payment provider did not answer in time")
