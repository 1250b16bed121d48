// Package stdwebhook signs the webhooks presenced sends (presence status
// changes, ticket notifications) with the Standard Webhooks scheme
// (standardwebhooks.com), so a receiver verifies them with that project's
// library in its own language instead of code written for us:
//
//	webhook-id:        the message id, the same on every retry (dedupe by it)
//	webhook-timestamp: Unix seconds of this attempt
//	webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">
//
// The key is the secret's bytes after the "whsec_" prefix, base64-decoded.
// A secret without the prefix (one configured before the scheme changed)
// keys the HMAC with its own bytes; its receivers verify with
// "whsec_" + base64(secret).
package stdwebhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Header names of the scheme.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// SecretPrefix starts a secret in the scheme's own form.
const SecretPrefix = "whsec_"

// MinKeyBytes is the shortest key accepted: 128 bits.
const MinKeyBytes = 16

// Signer signs webhook requests with one secret.
type Signer struct {
	wh *standardwebhooks.Webhook
}

// ParseSecret checks a configured secret and returns its key bytes.
func ParseSecret(secret string) ([]byte, error) {
	key := []byte(secret)
	if rest, ok := strings.CutPrefix(secret, SecretPrefix); ok {
		var err error
		if key, err = base64.StdEncoding.DecodeString(rest); err != nil {
			return nil, errors.New(`a "whsec_" secret is whsec_ followed by standard base64`)
		}
	}
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("the key needs at least %d bytes", MinKeyBytes)
	}
	return key, nil
}

// NewSigner returns a signer for secret ("whsec_<base64 key>", or a legacy
// raw secret used as the key).
func NewSigner(secret string) (*Signer, error) {
	key, err := ParseSecret(secret)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	wh, err := standardwebhooks.NewWebhookRaw(key)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	return &Signer{wh: wh}, nil
}

// Sign sets the scheme's headers on req for body, sent now as message id.
func (s *Signer) Sign(req *http.Request, id string, body []byte, now time.Time) error {
	sig, err := s.wh.Sign(id, now, body)
	if err != nil {
		return fmt.Errorf("sign webhook: %w", err)
	}
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)
	return nil
}

// ReceiverSecret is the secret a receiver configures for a signer of
// secret: the secret itself in the whsec_ form, else its whsec_ form.
func ReceiverSecret(secret string) string {
	if strings.HasPrefix(secret, SecretPrefix) {
		return secret
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString([]byte(secret))
}
