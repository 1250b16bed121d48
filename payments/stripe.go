package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

// stripeProvider is the Stripe adapter on stripe-go. Signatures are checked
// by stripe-go's webhook package, not by ours.
type stripeProvider struct {
	client    *stripe.Client
	secrets   []string
	tolerance time.Duration
}

var _ Provider = (*stripeProvider)(nil)

type stripeConfig struct {
	SecretKey      string
	APIURL         string // empty: Stripe's
	WebhookSecrets []string
	Tolerance      time.Duration
	Timeout        time.Duration
}

func newStripeProvider(c stripeConfig) *stripeProvider {
	bc := &stripe.BackendConfig{
		HTTPClient:        &http.Client{Timeout: c.Timeout},
		MaxNetworkRetries: stripe.Int64(0), // retries are ours, with our key
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelError},
	}
	if c.APIURL != "" {
		bc.URL = stripe.String(c.APIURL)
	}
	backends := &stripe.Backends{
		API:         stripe.GetBackendWithConfig(stripe.APIBackend, bc),
		Connect:     stripe.GetBackendWithConfig(stripe.ConnectBackend, bc),
		Uploads:     stripe.GetBackendWithConfig(stripe.UploadsBackend, bc),
		MeterEvents: stripe.GetBackendWithConfig(stripe.MeterEventsBackend, bc),
	}
	return &stripeProvider{
		client:    stripe.NewClient(c.SecretKey, stripe.WithBackends(backends)),
		secrets:   c.WebhookSecrets,
		tolerance: c.Tolerance,
	}
}

func (p *stripeProvider) Name() string { return "stripe" }

func (p *stripeProvider) CreateIntent(ctx context.Context, req IntentRequest) (Intent, error) {
	params := &stripe.PaymentIntentCreateParams{
		Amount:   stripe.Int64(req.Amount),
		Currency: stripe.String(strings.ToLower(req.Currency)),
		AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled: stripe.Bool(true),
		},
		Metadata: map[string]string{metaPayment: req.PaymentID, metaReservation: req.Reservation},
	}
	params.SetIdempotencyKey(req.PaymentID)
	pi, err := p.client.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		return Intent{}, stripeError("create payment intent", err)
	}
	return Intent{Ref: pi.ID, ClientSecret: pi.ClientSecret}, nil
}

func (p *stripeProvider) Refund(ctx context.Context, key, ref string, amount int64) (string, error) {
	params := &stripe.RefundCreateParams{PaymentIntent: stripe.String(ref)}
	if amount > 0 {
		params.Amount = stripe.Int64(amount)
	}
	params.SetIdempotencyKey(key)
	r, err := p.client.V1Refunds.Create(ctx, params)
	if err != nil {
		return "", stripeError("refund", err)
	}
	return r.ID, nil
}

// ParseWebhook verifies with each configured endpoint secret in turn (a
// rotation has two) through stripe-go, then reads the event's object.
func (p *stripeProvider) ParseWebhook(body []byte, header http.Header, _ time.Time) (WebhookEvent, error) {
	sig := header.Get(HeaderSignature)
	var lastErr error
	for _, s := range p.secrets {
		e, err := webhook.ConstructEventWithOptions(body, sig, s, webhook.ConstructEventOptions{
			Tolerance: p.tolerance, IgnoreAPIVersionMismatch: true,
		})
		if err == nil {
			return decodeObject(e.ID, string(e.Type), e.Data.Raw)
		}
		lastErr = err
		if !isSignatureError(err) {
			return WebhookEvent{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	return WebhookEvent{}, fmt.Errorf("%w: %v", ErrBadSignature, lastErr)
}

func isSignatureError(err error) bool {
	for _, e := range []error{webhook.ErrInvalidHeader, webhook.ErrNoValidSignature, webhook.ErrNotSigned, webhook.ErrTooOld} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func stripeError(what string, err error) error {
	var se *stripe.Error
	if errors.As(err, &se) && se.HTTPStatusCode >= 400 && se.HTTPStatusCode < 500 && se.HTTPStatusCode != 429 {
		return fmt.Errorf("stripe %s: %w: %v", what, errProviderRefused, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
		return fmt.Errorf("stripe %s: %w: %v", what, errProviderTimeout, err)
	}
	return fmt.Errorf("stripe %s: %w", what, err)
}
