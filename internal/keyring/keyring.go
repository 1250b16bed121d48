// Package keyring holds Ed25519 signing keys with key ids, so signatures
// (session cookies, admission passes) can be verified with public keys only
// and keys can rotate: sign with the active key, accept every listed one.
package keyring

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/presenced/presenced/internal/devfile"
)

// Ring is a set of Ed25519 keys by id; one of them may sign.
type Ring struct {
	activeID string
	private  ed25519.PrivateKey
	public   map[string]ed25519.PublicKey
	order    []string
}

// Parse builds a ring from config strings. signing is "kid:base64(32-byte
// seed)" and may be empty on verify-only processes; each of verify is
// "kid:base64(32-byte public key)". The signing key's public half is always
// accepted.
func Parse(signing string, verify []string) (*Ring, error) {
	r := &Ring{public: map[string]ed25519.PublicKey{}}
	if signing != "" {
		kid, raw, err := split(signing)
		if err != nil {
			return nil, fmt.Errorf("signing key: %w", err)
		}
		if len(raw) != ed25519.SeedSize {
			return nil, fmt.Errorf("signing key %s: want a %d-byte seed, got %d bytes", kid, ed25519.SeedSize, len(raw))
		}
		r.activeID, r.private = kid, ed25519.NewKeyFromSeed(raw)
		r.add(kid, r.private.Public().(ed25519.PublicKey))
	}
	for _, v := range verify {
		kid, raw, err := split(v)
		if err != nil {
			return nil, fmt.Errorf("verify key: %w", err)
		}
		if len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("verify key %s: want a %d-byte public key, got %d bytes", kid, ed25519.PublicKeySize, len(raw))
		}
		if prev, ok := r.public[kid]; ok && !prev.Equal(ed25519.PublicKey(raw)) {
			return nil, fmt.Errorf("verify key %s: the id names two different keys", kid)
		}
		r.add(kid, raw)
	}
	if len(r.public) == 0 {
		return nil, errors.New("no keys")
	}
	return r, nil
}

func (r *Ring) add(kid string, pub ed25519.PublicKey) {
	if _, ok := r.public[kid]; !ok {
		r.order = append(r.order, kid)
	}
	r.public[kid] = pub
}

func split(s string) (string, []byte, error) {
	kid, b64, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || kid == "" || b64 == "" {
		return "", nil, errors.New(`want "kid:base64"`)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		if raw, err = base64.RawURLEncoding.DecodeString(b64); err != nil {
			return "", nil, fmt.Errorf("key %s: not base64", kid)
		}
	}
	return kid, raw, nil
}

// CanSign tells whether the ring holds a private key.
func (r *Ring) CanSign() bool { return r.private != nil }

// ActiveID is the id of the signing key.
func (r *Ring) ActiveID() string { return r.activeID }

// Sign signs msg with the active key and returns the key id with the
// signature.
func (r *Ring) Sign(msg []byte) (string, []byte, error) {
	if r.private == nil {
		return "", nil, errors.New("keyring: no signing key on this process")
	}
	return r.activeID, ed25519.Sign(r.private, msg), nil
}

// PrivateKey is the active signing key (for JWT libraries), or nil.
func (r *Ring) PrivateKey() ed25519.PrivateKey { return r.private }

// Public returns the public key for kid. A nil ring (a process that holds
// no keys) knows none.
func (r *Ring) Public(kid string) (ed25519.PublicKey, bool) {
	if r == nil {
		return nil, false
	}
	k, ok := r.public[kid]
	return k, ok
}

// Verify checks sig over msg with the key named kid.
func (r *Ring) Verify(kid string, msg, sig []byte) bool {
	k, ok := r.public[kid]
	return ok && ed25519.Verify(k, msg, sig)
}

// JWKS renders the public keys as a JSON Web Key Set (OKP / Ed25519, alg
// EdDSA, use sig), in the ring's order, with github.com/MicahParks/jwkset:
// the library the JWKS clients of our users (keyfunc) parse with.
func (r *Ring) JWKS() (json.RawMessage, error) {
	set := jwkset.NewMemoryStorage()
	ctx := context.Background()
	for _, kid := range r.order {
		jwk, err := jwkset.NewJWKFromKey(r.public[kid], jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgEdDSA, USE: jwkset.UseSig},
		})
		if err != nil {
			return nil, fmt.Errorf("keyring: JWK of %s: %w", kid, err)
		}
		if err := set.KeyWrite(ctx, jwk); err != nil {
			return nil, fmt.Errorf("keyring: JWK of %s: %w", kid, err)
		}
	}
	b, err := set.JSONPublic(ctx)
	if err != nil {
		return nil, fmt.Errorf("keyring: JWKS: %w", err)
	}
	return b, nil
}

// Generate returns a new "kid:base64(seed)" signing key string and its
// "kid:base64(public)" verify string.
func Generate(kid string) (signing, verify string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	enc := base64.StdEncoding.EncodeToString
	return kid + ":" + enc(priv.Seed()), kid + ":" + enc(pub), nil
}

type devFile struct {
	Signing string `json:"signing"`
}

// LoadOrCreateDev returns a development ring stored in dataDir/keys/name.json,
// generating it on first use so restarts keep verifying what was signed.
// Processes started together agree on one key: the file appears whole, and
// one that loses the race to create it reads the winner's.
func LoadOrCreateDev(dataDir, name string) (*Ring, error) {
	path := filepath.Join(dataDir, "keys", name+".json")
	parse := func(data []byte) (*Ring, error) {
		var f devFile
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return Parse(f.Signing, nil)
	}
	if data, err := os.ReadFile(path); err == nil {
		return parse(data)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	signing, _, err := Generate("dev-" + time.Now().UTC().Format("20060102"))
	if err != nil {
		return nil, err
	}
	fresh, _ := json.Marshal(devFile{Signing: signing})
	data, err := devfile.CreateOnce(path, fresh, 0o600)
	if err != nil {
		return nil, err
	}
	return parse(data)
}
