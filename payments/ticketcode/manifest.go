package ticketcode

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// A gate manifest is the paid tickets of one event with their QR secrets,
// sealed with AES-256-GCM under the manifest key and valid until ExpiresAt:
//
//	"PDM1" || nonce (12) || AES-GCM(key, nonce, JSON(Manifest), aad "PDM1")
//
// A gate loads it into its own ledger before doors open and needs nothing
// else from presenced.

// Manifest is the content of a manifest.
type Manifest struct {
	Event     string           `json:"event"`
	IssuedAt  time.Time        `json:"issuedAt"`
	ExpiresAt time.Time        `json:"expiresAt"`
	Tickets   []ManifestTicket `json:"tickets"`
}

// ManifestTicket is one admissible ticket.
type ManifestTicket struct {
	ID     string `json:"id"`
	Label  string `json:"label"`
	Secret []byte `json:"secret"`
}

var manifestMagic = []byte("PDM1")

// maxManifest bounds a manifest file: a 200,000-seat venue is ~30 MB.
const maxManifest = 64 << 20

// Errors of OpenManifest.
var (
	ErrBadManifest     = errors.New("not a manifest sealed with this key")
	ErrManifestExpired = errors.New("manifest expired")
)

// SealManifest encrypts m under key (32 bytes).
func SealManifest(m Manifest, key []byte) ([]byte, error) {
	plain, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return sealPlain(plain, key)
}

func sealPlain(plain, key []byte) ([]byte, error) {
	aead, err := NewAEAD(key)
	if err != nil {
		return nil, fmt.Errorf("manifest key: %w", err)
	}
	out := make([]byte, 0, len(manifestMagic)+aead.NonceSize()+len(plain)+aead.Overhead())
	out = append(out, manifestMagic...)
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out = append(out, nonce...)
	return aead.Seal(out, nonce, plain, manifestMagic), nil
}

// OpenManifest decrypts and checks a manifest: sealed with key, well
// formed, and not expired at now.
func OpenManifest(data, key []byte, now time.Time) (Manifest, error) {
	aead, err := NewAEAD(key)
	if err != nil {
		return Manifest{}, fmt.Errorf("manifest key: %w", err)
	}
	head := len(manifestMagic) + aead.NonceSize()
	if len(data) < head+aead.Overhead() || len(data) > maxManifest || !bytes.Equal(data[:len(manifestMagic)], manifestMagic) {
		return Manifest{}, ErrBadManifest
	}
	plain, err := aead.Open(nil, data[len(manifestMagic):head], data[head:], manifestMagic)
	if err != nil {
		return Manifest{}, ErrBadManifest
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if m.Event == "" || m.ExpiresAt.IsZero() {
		return Manifest{}, fmt.Errorf("%w: no event or expiry", ErrBadManifest)
	}
	for _, t := range m.Tickets {
		if _, _, _, err := ParsePayload(Payload(t.Secret, t.ID, 0)); err != nil || len(t.Secret) < 16 {
			return Manifest{}, fmt.Errorf("%w: ticket %q", ErrBadManifest, t.ID)
		}
	}
	if !now.Before(m.ExpiresAt) {
		return Manifest{}, ErrManifestExpired
	}
	return m, nil
}
