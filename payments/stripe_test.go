package payments

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	"github.com/presenced/presenced/internal/testenv"
)

// The Stripe adapter against stripe-mock, Stripe's official API mock: an
// intent is created with our payment id as the idempotency key and our
// metadata, and a refund goes through.
func TestStripeAdapterAgainstStripeMock(t *testing.T) {
	t.Parallel()
	p := newStripeProvider(stripeConfig{SecretKey: "sk_test_123", APIURL: testenv.StripeMockURL(t),
		WebhookSecrets: []string{"whsec_x"}, Tolerance: 5 * time.Minute, Timeout: 10 * time.Second})
	ctx := context.Background()
	in, err := p.CreateIntent(ctx, IntentRequest{PaymentID: uuid.NewString(), Reservation: uuid.NewString(), Amount: 4500, Currency: "EUR"})
	require.NoError(t, err)
	require.Regexp(t, `^pi_`, in.Ref)
	require.NotEmpty(t, in.ClientSecret)
	ref, err := p.Refund(ctx, "refund:"+uuid.NewString(), in.Ref, 0)
	require.NoError(t, err)
	require.Regexp(t, `^re_`, ref)
}

// A 4xx from Stripe is a refusal (the breaker does not count it as an
// outage); a 5xx or a timeout is a failure.
func TestStripeErrorClasses(t *testing.T) {
	t.Parallel()
	require.ErrorIs(t, stripeError("x", &stripe.Error{HTTPStatusCode: 402, Msg: "card declined"}), errProviderRefused)
	require.NotErrorIs(t, stripeError("x", &stripe.Error{HTTPStatusCode: 500}), errProviderRefused)
	require.NotErrorIs(t, stripeError("x", &stripe.Error{HTTPStatusCode: 429}), errProviderRefused)
	require.ErrorIs(t, stripeError("x", context.DeadlineExceeded), errProviderTimeout)
}
