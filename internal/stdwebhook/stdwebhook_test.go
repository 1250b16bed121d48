package stdwebhook

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// The scheme's published example: this secret, id, timestamp and body
// sign to this signature, so any receiver library agrees with us.
func TestSignsLikeTheSpecification(t *testing.T) {
	s, err := NewSigner("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	req, _ := http.NewRequest(http.MethodPost, "http://receiver/hook", nil)
	body := []byte(`{"test": 2432232314}`)
	require.NoError(t, s.Sign(req, "msg_p5jXN8AQM9LWM0D4loKWxJek", body, time.Unix(1614265330, 0)))
	require.Equal(t, "msg_p5jXN8AQM9LWM0D4loKWxJek", req.Header.Get("webhook-id"))
	require.Equal(t, "1614265330", req.Header.Get("webhook-timestamp"))
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", req.Header.Get("webhook-signature"))
}

// A receiver verifies with the Standard Webhooks library, whichever form
// the sender's secret has.
func TestReceiversVerifyWithTheLibrary(t *testing.T) {
	for _, secret := range []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "a-legacy-raw-secret-0123"} {
		s, err := NewSigner(secret)
		require.NoError(t, err)
		body := []byte(`{"events":[]}`)
		req, _ := http.NewRequest(http.MethodPost, "http://receiver/hook", bytes.NewReader(body))
		require.NoError(t, s.Sign(req, "presence-0-1-1", body, time.Now()))
		wh, err := standardwebhooks.NewWebhook(ReceiverSecret(secret))
		require.NoError(t, err)
		require.NoError(t, wh.Verify(body, req.Header), secret)
		require.Error(t, wh.Verify([]byte(`{"events":[1]}`), req.Header), "another body does not verify")
	}
}

func TestSecretsTooShortOrMalformedAreRefused(t *testing.T) {
	for _, bad := range []string{"short", "whsec_c2hvcnQ=", "whsec_not base64!"} {
		_, err := NewSigner(bad)
		require.Error(t, err, bad)
	}
}
