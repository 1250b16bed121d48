package payments

import "time"

// The wire protocol: request headers, bodies and answers of the payment,
// webhook, ticket and sandbox endpoints, the states they show and the error
// codes. Clients and loadgen/payments use these.

// HeaderIdempotencyKey is required on a payment start.
const HeaderIdempotencyKey = "Idempotency-Key"

// Payment states.
const (
	StatusInitializing   = "INITIALIZING"
	StatusPending        = "PENDING"
	StatusSucceeded      = "SUCCEEDED"
	StatusFailed         = "FAILED"
	StatusRefundRequired = "REFUND_REQUIRED"
	StatusRefunded       = "REFUNDED"
)

// PaymentView answers POST /v1/reservations/{id}/payments: what the buyer
// needs for the confirm step.
type PaymentView struct {
	ID           string `json:"id"`
	Reservation  string `json:"reservation"`
	Provider     string `json:"provider"`
	Status       string `json:"status"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	ClientSecret string `json:"clientSecret"`
	// ConfirmURL is where the confirm step happens, when the provider has one.
	ConfirmURL string `json:"confirmUrl,omitempty"`
}

// WebhookAnswer is the body of a 200 to a provider.
type WebhookAnswer struct {
	Outcome string `json:"outcome"`
}

// Webhook outcomes.
const (
	OutcomePaid           = "paid"
	OutcomeRefundRequired = "refund_required"
	OutcomeDuplicate      = "duplicate"
	OutcomeMismatch       = "mismatch"
	OutcomeOrphan         = "orphan"
	OutcomeFailed         = "failed"
	OutcomeRefunded       = "refunded"
	OutcomeIgnored        = "ignored"
)

// TicketView is one ticket of GET /v1/tickets.
type TicketView struct {
	ID          string    `json:"id"`
	Event       string    `json:"event"`
	Reservation string    `json:"reservation"`
	Label       string    `json:"label"`
	CreatedAt   time.Time `json:"createdAt"`
}

// TicketList answers GET /v1/tickets.
type TicketList struct {
	Tickets []TicketView `json:"tickets"`
}

// QRView answers GET /v1/tickets/{id}/qr: the payload to render, good for
// its window and one either side.
type QRView struct {
	Ticket        string    `json:"ticket"`
	Payload       string    `json:"payload"`
	Window        int64     `json:"window"`
	WindowSeconds int       `json:"windowSeconds"`
	RefreshAt     time.Time `json:"refreshAt"`
}

// SandboxConfirm is the body of the sandbox's confirm step.
type SandboxConfirm struct {
	ClientSecret string `json:"clientSecret"`
	// Faults for this intent's webhooks: SandboxConfirmFaults.
	Faults []string `json:"faults,omitempty"`
}

// SandboxConfirmFaults are the faults the confirm step takes: those that
// shape the charge's webhooks. The others of config.SandboxFaults act when
// the intent is created, so only the config sets them.
var SandboxConfirmFaults = []string{"webhook_twice", "webhook_x100", "webhook_out_of_order",
	"webhook_late", "webhook_wrong_amount", "webhook_wrong_currency"}

// SandboxIntentView is an intent as the sandbox shows it.
type SandboxIntentView struct {
	ID       string     `json:"id"`
	Amount   int64      `json:"amount"`
	Currency string     `json:"currency"`
	Status   string     `json:"status"`
	Charged  *time.Time `json:"chargedAt,omitempty"`
}

// Error codes of the payments endpoints (see docs/payments.md).
const (
	CodeReservationExpired    = "reservation_expired"
	CodeReservationCancelled  = "reservation_cancelled"
	CodeReservationPaid       = "reservation_paid"
	CodeFraudDeclined         = "fraud_declined"
	CodeProvidersUnavailable  = "providers_unavailable"
	CodeProviderRefused       = "provider_refused"
	CodeIdempotencyRequired   = "idempotency_key_required"
	CodeBadIdempotencyKey     = "bad_idempotency_key"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
	CodeBadSignature          = "bad_signature"
	CodeWebhookConflict       = "webhook_conflict"
	CodePaymentNotReady       = "payment_not_ready"
	CodeUnknownProvider       = "unknown_provider"
	CodeTicketNotFound        = "ticket_not_found"
	CodeSandboxIntentNotFound = "intent_not_found"
)

// HeaderSignature carries a webhook's signature.
const HeaderSignature = "Stripe-Signature"

// SandboxLedger is what the sandbox charged and refunded.
type SandboxLedger struct {
	Intents int64 `json:"intents"`
	Charges int64 `json:"charges"`
	Refunds int64 `json:"refunds"`
	// DoubleCharges counts reservations charged by more than one intent
	// and not refunded down to one: must be 0.
	DoubleCharges int64 `json:"doubleCharges"`
	Undelivered   int64 `json:"undeliveredWebhooks"`
}
