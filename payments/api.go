package payments

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/presenced/presenced/store"
)

// The module's in-process API: the ports payments needs (booking's
// checkouts, a payment provider, a fraud check, a sender of buyer
// notifications), the outbox event kinds it owns, and what the CLI calls
// (checks, manifests).

// Booking is the checkout port: how payments settles a reservation inside
// its own transaction, never through booking's tables. Every terminal
// transition locks the reservation row first, so a payment, an expiry and a
// cancel can never both win. The app adapts the booking module to it.
type Booking interface {
	// LockCheckout locks reservation id in tx and returns it
	// (ErrNoReservation when absent).
	LockCheckout(ctx context.Context, tx pgx.Tx, id string) (Checkout, error)
	// MarkPaid sells a locked checkout that is pending and not due;
	// anything else is ErrNotPending and changes nothing.
	MarkPaid(ctx context.Context, tx pgx.Tx, id string) error
	// ReleaseCheckout ends a pending checkout early; afterCommit frees what
	// lives outside PostgreSQL once tx commits.
	ReleaseCheckout(ctx context.Context, tx pgx.Tx, id string) (afterCommit func(context.Context), err error)
	// Lines lists what a paid checkout sold: one ticket each.
	Lines(ctx context.Context, tx pgx.Tx, id string) ([]Line, error)
	// DoubleOwnedSeats counts seats with two live owners (must be 0).
	DoubleOwnedSeats(ctx context.Context, tx pgx.Tx) (int, error)
}

// Checkout is a reservation as payments sees it.
type Checkout struct {
	ID string
	// Event is what its tickets admit to, as booking names it (an event,
	// or a hotel for a stay): tickets and gate manifests are kept by it.
	Event     string
	User      string
	State     CheckoutState
	Total     int64
	Currency  string
	ExpiresAt time.Time
	// Due: the hold's time is up, whether or not it was expired yet.
	Due bool
}

// CheckoutState is where a checkout stands.
type CheckoutState string

const (
	CheckoutPending   CheckoutState = "pending"
	CheckoutPaid      CheckoutState = "paid"
	CheckoutExpired   CheckoutState = "expired"
	CheckoutCancelled CheckoutState = "cancelled"
)

// Line is one thing a checkout sold: a stable id unique across checkouts
// (one ticket per line is a constraint) and a label for the ticket.
type Line struct {
	ID    string
	Label string
}

// Outbox event kinds payments writes.
const (
	// KindPaymentInitialized: a payment row exists; its intent may not yet.
	KindPaymentInitialized = "payment.initialized"
	// KindOrderPaid: a verified webhook sold a reservation; fulfillment
	// issues its tickets.
	KindOrderPaid = "order.paid"
	// KindRefundRequired: money was taken for something we will not sell.
	KindRefundRequired = "refund.required"
	// KindPaymentRefunded: the provider returned the money.
	KindPaymentRefunded = "payment.refunded"
)

// FulfillmentStream is the Redis stream the outbox relay appends
// KindOrderPaid events to besides the event stream (the app routes them
// there): fulfillment reads only its own events, not one of every hold,
// cancel and inventory change of every module.
func FulfillmentStream(keys store.Keyspace) string { return keys.Global("outbox").Key("order.paid") }

// OrderPaid is the payload of KindOrderPaid.
type OrderPaid struct {
	Reservation string `json:"reservation"`
	Payment     string `json:"payment"`
	Event       string `json:"event"`
	User        string `json:"user"`
}

// RefundRequired is the payload of KindRefundRequired.
type RefundRequired struct {
	Reservation string `json:"reservation"`
	Payment     string `json:"payment"`
	Reason      string `json:"reason"`
}

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

// FraudChecker scores a payment before it is charged (seed 003: block,
// review or accept, within 200 ms).
type FraudChecker interface {
	Check(ctx context.Context, in FraudInput) (Verdict, error)
}

// FraudInput is what a check sees of a payment.
type FraudInput struct {
	User     string
	Event    string
	Amount   int64
	Currency string
}

// Verdict of a fraud check.
type Verdict string

const (
	VerdictAccept Verdict = "accept"
	VerdictReview Verdict = "review"
	VerdictBlock  Verdict = "block"
)

// Sender tells a buyer their tickets are ready. Sends are retried, so a
// receiver may see one twice; tickets never wait for it.
type Sender interface {
	Send(ctx context.Context, n Notification) error
}

// Notification is one paid order's message.
type Notification struct {
	User        string       `json:"user"`
	Event       string       `json:"event"`
	Reservation string       `json:"reservation"`
	Tickets     []TicketView `json:"tickets"`
}

// What the CLI calls: `presenced check` and `presenced manifest export`.
// They need the admin part (StartAdmin).

// Check reads every correctness monitor, each a count that must be 0, in
// one read-only transaction.
func (m *Module) Check(ctx context.Context) ([]CheckResult, error) {
	db, err := m.adminPool()
	if err != nil {
		return nil, err
	}
	return check(ctx, db, m.booking)
}

// ExportManifest seals the paid tickets of event into a gate manifest,
// encrypted with key (payments.manifest_key) and valid for ttl, and says
// how many tickets it holds.
func (m *Module) ExportManifest(ctx context.Context, event string, key []byte, ttl time.Duration) ([]byte, int, error) {
	db, err := m.adminPool()
	if err != nil {
		return nil, 0, err
	}
	return m.exportManifest(ctx, db, event, key, ttl)
}

func (m *Module) adminPool() (*pgxpool.Pool, error) {
	if m.admin == nil {
		return nil, errors.New("payments: the admin part is not started in this process")
	}
	return m.admin, nil
}

// CheckResult is one monitor's reading.
type CheckResult struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
	What  string `json:"what"`
}
