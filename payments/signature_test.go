package payments

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

func testEvent(t *testing.T, typ string) []byte {
	t.Helper()
	obj := stripeObject{ID: "pi_1", Object: "payment_intent", Amount: 1200, Currency: "eur", Status: "succeeded",
		Metadata: map[string]string{metaPayment: "3f1c1a52-5a7e-4c1f-9d1e-5b7a2f1c0d11"}}
	return sandboxEvent(typ, obj, time.Now()).body
}

// The sandbox's signatures verify with stripe-go's own ConstructEvent, and
// stripe-go's test signatures verify with ours: one scheme, two
// implementations that agree.
func TestSignaturesAgreeWithStripeGo(t *testing.T) {
	t.Parallel()
	body := testEvent(t, "payment_intent.succeeded")
	now := time.Now()
	header := signHeader([]string{"whsec_test_secret_one"}, now, body)
	e, err := webhook.ConstructEvent(body, header, "whsec_test_secret_one")
	require.NoError(t, err, "stripe-go verifies the sandbox's signature and event shape")
	require.Equal(t, stripe.EventType("payment_intent.succeeded"), e.Type)
	_, err = webhook.ConstructEvent(body, header, "whsec_other_secret")
	require.Error(t, err)

	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_test_secret_one", Timestamp: now})
	require.NoError(t, verifySignature(signed.Header, body, []string{"whsec_test_secret_one"}, 5*time.Minute, now),
		"ours verifies stripe-go's signature")

	p := &stripeProvider{secrets: []string{"whsec_test_secret_one"}, tolerance: 5 * time.Minute}
	ev, err := p.ParseWebhook(body, http.Header{HeaderSignature: {header}}, now)
	require.NoError(t, err)
	require.Equal(t, EventSucceeded, ev.Kind)
	require.Equal(t, int64(1200), ev.Amount)
	require.Equal(t, "EUR", ev.Currency)
	require.Equal(t, "pi_1", ev.Ref)
}

func TestSignatureVerification(t *testing.T) {
	t.Parallel()
	body := testEvent(t, "payment_intent.succeeded")
	now := time.Now()
	secrets := []string{"whsec_current_secret_x"}
	ok := signHeader(secrets, now, body)
	require.NoError(t, verifySignature(ok, body, secrets, 300*time.Second, now))

	// A rotation: the provider signs with the old and the new secret; a
	// receiver that knows either accepts.
	rotated := signHeader([]string{"whsec_new_secret_xxxx", "whsec_current_secret_x"}, now, body)
	require.NoError(t, verifySignature(rotated, body, secrets, 300*time.Second, now))
	require.NoError(t, verifySignature(rotated, body, []string{"whsec_new_secret_xxxx"}, 300*time.Second, now))

	for name, c := range map[string]struct {
		header string
		body   []byte
	}{
		"wrong secret":     {signHeader([]string{"whsec_attacker_secret"}, now, body), body},
		"stale":            {signHeader(secrets, now.Add(-301*time.Second), body), body},
		"future":           {signHeader(secrets, now.Add(301*time.Second), body), body},
		"tampered body":    {ok, append([]byte(nil), strings.Replace(string(body), "1200", "1", 1)...)},
		"no header":        {"", body},
		"no v1":            {"t=" + strings.Split(strings.TrimPrefix(ok, "t="), ",")[0], body},
		"junk":             {"garbage", body},
		"v0 only":          {strings.Replace(ok, "v1=", "v0=", 1), body},
		"two timestamps":   {ok + ",t=1", body},
		"short signature":  {"t=1,v1=abcd", body},
		"oversized header": {ok + strings.Repeat(",v1="+strings.Repeat("0", 64), 20), body},
	} {
		err := verifySignature(c.header, c.body, secrets, 300*time.Second, now)
		require.ErrorIs(t, err, ErrBadSignature, name)
	}
}

func TestDecodeEvents(t *testing.T) {
	t.Parallel()
	ev, err := decodeEnvelope(testEvent(t, "payment_intent.succeeded"))
	require.NoError(t, err)
	require.Equal(t, "3f1c1a52-5a7e-4c1f-9d1e-5b7a2f1c0d11", ev.PaymentID)
	charge, _ := json.Marshal(stripeObject{ID: "ch_1", Object: "charge", Amount: 5, Currency: "usd", PaymentIntent: "pi_9"})
	ev, err = decodeObject("evt_1", "charge.succeeded", charge)
	require.NoError(t, err)
	require.Equal(t, "pi_9", ev.Ref, "a charge names its intent")
	ev, err = decodeObject("evt_2", "customer.created", []byte(`{"whatever":1}`))
	require.NoError(t, err)
	require.Equal(t, EventOther, ev.Kind)
	for _, bad := range []string{`{}`, `[]`, `{"object":"event","id":"","type":"x"}`,
		`{"object":"event","id":"e 1","type":"payment_intent.succeeded","data":{"object":{"id":"pi"}}}`,
		`{"object":"event","id":"e1","type":"payment_intent.succeeded","data":{"object":{"id":"pi","amount":-1,"currency":"eur"}}}`,
		`{"object":"event","id":"e1","type":"payment_intent.succeeded","data":{"object":{"id":"","amount":1,"currency":"eur"}}}`} {
		_, err := decodeEnvelope([]byte(bad))
		require.ErrorIs(t, err, ErrMalformed, bad)
	}
}

// FuzzSignatureHeader: the parser never panics, and whatever it accepts has
// a timestamp and 32-byte v1 signatures.
func FuzzSignatureHeader(f *testing.F) {
	f.Add("t=1700000000,v1=" + strings.Repeat("ab", 32))
	f.Add("t=1700000000,v1=" + strings.Repeat("ab", 32) + ",v0=00,v1=" + strings.Repeat("cd", 32))
	f.Add("t=,v1=")
	f.Add("v1=zz,t=-1")
	f.Fuzz(func(t *testing.T, h string) {
		got, err := parseSignatureHeader(h)
		if err != nil {
			return
		}
		if got.timestamp.IsZero() || len(got.v1) == 0 {
			t.Fatalf("accepted %q without timestamp or signature", h)
		}
		for _, s := range got.v1 {
			if len(s) != 32 {
				t.Fatalf("accepted a %d-byte signature", len(s))
			}
		}
		_ = verifySignature(h, []byte("{}"), []string{"secret"}, time.Minute, time.Now())
	})
}
