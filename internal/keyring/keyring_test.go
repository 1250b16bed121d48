package keyring

import (
	"sync"
	"testing"

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
	require.Len(t, during.JWKS()["keys"], 2)

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
