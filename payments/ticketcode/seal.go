// Package ticketcode holds what tickets share between the payments module
// and the venue gate: the sealing of ticket secrets, the rotating QR payload
// and the encrypted gate manifest.
package ticketcode

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Sealer seals small secrets with AES-256-GCM under named keys: new seals
// use the active key, old ones open with any listed key, so keys rotate.
type Sealer struct {
	active string
	aeads  map[string]cipher.AEAD
}

// ParseSealer builds a sealer from "kid:base64(32 bytes)" strings, the
// first active.
func ParseSealer(active string, old []string) (*Sealer, error) {
	s := &Sealer{aeads: map[string]cipher.AEAD{}}
	for i, spec := range append([]string{active}, old...) {
		kid, b64, ok := strings.Cut(strings.TrimSpace(spec), ":")
		if !ok || kid == "" {
			return nil, errors.New(`ticket key: want "kid:base64(32 bytes)"`)
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("ticket key %s: want base64 of 32 bytes", kid)
		}
		aead, err := NewAEAD(raw)
		if err != nil {
			return nil, err
		}
		if _, dup := s.aeads[kid]; dup {
			return nil, fmt.Errorf("ticket key %s is listed twice", kid)
		}
		s.aeads[kid] = aead
		if i == 0 {
			s.active = kid
		}
	}
	return s, nil
}

// NewAEAD is AES-256-GCM over a 32-byte key.
func NewAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, errors.New("want a 32-byte key")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Seal encrypts plain bound to aad (the ticket id): nonce || ciphertext.
func (s *Sealer) Seal(plain, aad []byte) (kid string, sealed []byte) {
	aead := s.aeads[s.active]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return s.active, aead.Seal(nonce, nonce, plain, aad)
}

// Open decrypts what Seal made under kid.
func (s *Sealer) Open(kid string, sealed, aad []byte) ([]byte, error) {
	aead, ok := s.aeads[kid]
	if !ok {
		return nil, fmt.Errorf("ticket key %s is not configured", kid)
	}
	if len(sealed) < aead.NonceSize() {
		return nil, errors.New("sealed secret too short")
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], aad)
	if err != nil {
		return nil, fmt.Errorf("open sealed secret: %w", err)
	}
	return plain, nil
}

// NewKey returns a fresh "kid:base64" key for development.
func NewKey(kid string) string {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		panic(err)
	}
	return kid + ":" + base64.StdEncoding.EncodeToString(raw)
}
