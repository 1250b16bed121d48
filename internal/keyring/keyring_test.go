package keyring

import (
	"crypto/ed25519"
	"encoding/json"
	"sync"
	"testing"

	"github.com/MicahParks/jwkset"
	"github.com/stretchr/testify/require"
)

func TestRotation(t *testing.T) {
	t.Parallel()
	oldSign, oldVerify, err := Generate("k1")
	require.NoError(t, err)
	newSign, _, err := Generate("k2")
	require.NoError(t, err)

	before, err := Parse(oldSign, nil)
	require.NoError(t, err)
	kid, sig, err := before.Sign([]byte("msg"))
	require.NoError(t, err)
	require.Equal(t, "k1", kid)

	// During rotation: sign with k2, still accept k1.
	during, err := Parse(newSign, []string{oldVerify})
	require.NoError(t, err)
	require.True(t, during.Verify("k1", []byte("msg"), sig))
	require.False(t, during.Verify("k1", []byte("other"), sig))
	kid2, sig2, _ := during.Sign([]byte("msg"))
	require.Equal(t, "k2", kid2)
	require.True(t, during.Verify("k2", []byte("msg"), sig2))
	require.False(t, during.Verify("k9", []byte("msg"), sig2), "unknown kid")
	set, err := during.JWKS()
	require.NoError(t, err)
	var jwks struct {
		Keys []map[string]string `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(set, &jwks))
	require.Len(t, jwks.Keys, 2)

	verifyOnly, err := Parse("", []string{oldVerify})
	require.NoError(t, err)
	require.False(t, verifyOnly.CanSign())
	require.True(t, verifyOnly.Verify("k1", []byte("msg"), sig))
	_, _, err = verifyOnly.Sign([]byte("x"))
	require.Error(t, err)
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"nokid", "k:!!!", "k:AAAA"} {
		_, err := Parse(bad, nil)
		require.Error(t, err, bad)
	}
	_, err := Parse("", nil)
	require.Error(t, err)
}

func TestDevRingPersists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := LoadOrCreateDev(dir, "pass")
	require.NoError(t, err)
	b, err := LoadOrCreateDev(dir, "pass")
	require.NoError(t, err)
	kid, sig, _ := a.Sign([]byte("x"))
	require.True(t, b.Verify(kid, []byte("x"), sig))
}

// Processes started together on one data folder agree on one key.
func TestDevRingIsCreatedOnceUnderARace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	rings := make([]*Ring, 8)
	errs := make([]error, len(rings))
	for i := range rings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rings[i], errs[i] = LoadOrCreateDev(dir, "race")
		}()
	}
	wg.Wait()
	for i := range rings {
		require.NoError(t, errs[i])
		require.Equal(t, rings[0].PrivateKey(), rings[i].PrivateKey())
	}
}

// The JWKS is what a JWKS client (keyfunc, on jwkset) reads back: every
// public key under its kid, verifying what the ring signs.
func TestJWKSRoundTrips(t *testing.T) {
	t.Parallel()
	signing, _, err := Generate("k7")
	require.NoError(t, err)
	r, err := Parse(signing, nil)
	require.NoError(t, err)
	set, err := r.JWKS()
	require.NoError(t, err)
	var parsed jwkset.JWKSMarshal
	require.NoError(t, json.Unmarshal(set, &parsed))
	require.Len(t, parsed.Keys, 1)
	jwk, err := jwkset.NewJWKFromMarshal(parsed.Keys[0], jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
	require.NoError(t, err)
	require.Equal(t, "k7", jwk.Marshal().KID)
	require.Equal(t, jwkset.AlgEdDSA, jwk.Marshal().ALG)
	pub, ok := jwk.Key().(ed25519.PublicKey)
	require.True(t, ok)
	kid, sig, err := r.Sign([]byte("msg"))
	require.NoError(t, err)
	require.Equal(t, "k7", kid)
	require.True(t, ed25519.Verify(pub, []byte("msg"), sig))
}
