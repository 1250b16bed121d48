package ticketcode

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func secret(t testing.TB) []byte {
	t.Helper()
	s := make([]byte, 32)
	_, err := rand.Read(s)
	require.NoError(t, err)
	return s
}

// A code is valid in its window and one either side (±15 s of drift),
// refused at +45 s, and refused with another ticket's secret.
func TestQRWindows(t *testing.T) {
	t.Parallel()
	s, other := secret(t), secret(t)
	id := uuid.NewString()
	now := time.Unix(1_800_000_000, 0) // a window boundary: 1.8e9 / 15 is whole
	p := Payload(s, id, Window(now))
	verify := func(payload string, at time.Time, key []byte) error {
		tk, w, sig, err := ParsePayload(payload)
		if err != nil {
			return err
		}
		require.Equal(t, id, tk)
		return Verify(key, tk, w, sig, at)
	}
	require.NoError(t, verify(p, now, s), "now")
	require.NoError(t, verify(p, now.Add(14*time.Second), s), "later in its window")
	require.NoError(t, verify(p, now.Add(15*time.Second), s), "+15 s: the next window")
	require.NoError(t, verify(p, now.Add(-15*time.Second), s), "-15 s: a scanner clock behind")
	require.ErrorIs(t, verify(p, now.Add(45*time.Second), s), ErrStale, "+45 s")
	require.ErrorIs(t, verify(p, now.Add(-30*time.Second), s), ErrStale, "-30 s")
	require.ErrorIs(t, verify(p, now, other), ErrForged, "another ticket's secret")
	forgedOther := Payload(other, id, Window(now))
	require.ErrorIs(t, verify(forgedOther, now, s), ErrForged, "signed with another secret")
}

func TestParsePayloadRefusesJunk(t *testing.T) {
	t.Parallel()
	id := uuid.NewString()
	good := Payload(secret(t), id, 5)
	for _, bad := range []string{"", "a.b.c", id + ".5", id + ".-5." + strings.Repeat("0", 64),
		id + ".05." + strings.Repeat("0", 64), strings.ToUpper(id) + ".5." + strings.Repeat("0", 64),
		good + ".x", id + ".5." + strings.Repeat("g", 64), strings.Repeat("x", 200)} {
		_, _, _, err := ParsePayload(bad)
		require.ErrorIs(t, err, ErrBadPayload, bad)
	}
}

func TestManifestRoundTripAndExpiry(t *testing.T) {
	t.Parallel()
	key, other := secret(t), secret(t)
	now := time.Now()
	m := Manifest{Event: "ev", IssuedAt: now, ExpiresAt: now.Add(time.Hour),
		Tickets: []ManifestTicket{{ID: uuid.NewString(), Label: "A 1", Secret: secret(t)}}}
	data, err := SealManifest(m, key)
	require.NoError(t, err)
	got, err := OpenManifest(data, key, now)
	require.NoError(t, err)
	require.Equal(t, m.Tickets, got.Tickets)
	_, err = OpenManifest(data, other, now)
	require.ErrorIs(t, err, ErrBadManifest, "another key")
	_, err = OpenManifest(data, key, now.Add(2*time.Hour))
	require.ErrorIs(t, err, ErrManifestExpired)
	flipped := bytes.Clone(data)
	flipped[len(flipped)-1] ^= 1
	_, err = OpenManifest(flipped, key, now)
	require.ErrorIs(t, err, ErrBadManifest, "tampered")
}

func TestSealer(t *testing.T) {
	t.Parallel()
	old := NewKey("k1")
	s1, err := ParseSealer(old, nil)
	require.NoError(t, err)
	kid, sealed := s1.Seal([]byte("secret"), []byte("ticket-1"))
	require.Equal(t, "k1", kid)
	s2, err := ParseSealer(NewKey("k2"), []string{old})
	require.NoError(t, err)
	plain, err := s2.Open(kid, sealed, []byte("ticket-1"))
	require.NoError(t, err, "an old key still opens old tickets")
	require.Equal(t, "secret", string(plain))
	_, err = s2.Open(kid, sealed, []byte("ticket-2"))
	require.Error(t, err, "a secret is bound to its ticket")
	_, err = ParseSealer("k1:short", nil)
	require.Error(t, err)
}

func FuzzQRPayload(f *testing.F) {
	s := make([]byte, 32)
	f.Add(Payload(s, "5b0e6a52-0d5e-4a47-bb4e-9f0f1b1f3a10", 120000000))
	f.Add("x.1.00")
	f.Add("..")
	f.Fuzz(func(t *testing.T, p string) {
		id, w, sig, err := ParsePayload(p)
		if err != nil {
			return
		}
		if Payload(s, id, w)[:len(id)+1] != id+"." || len(sig) != 32 {
			t.Fatalf("accepted a malformed payload %q", p)
		}
		_ = Verify(s, id, w, sig, time.Now())
	})
}

// FuzzManifest feeds arbitrary sealed plaintexts (so the JSON decoder and
// checks are reached) and arbitrary files to the decoder.
func FuzzManifest(f *testing.F) {
	key := make([]byte, 32)
	f.Add([]byte(`{"event":"e","issuedAt":"2026-01-01T00:00:00Z","expiresAt":"2999-01-01T00:00:00Z","tickets":[]}`), []byte("PDM1"))
	f.Add([]byte(`{"event":"e","expiresAt":"2999-01-01T00:00:00Z","tickets":[{"id":"x","secret":"AAAA"}]}`), []byte{})
	f.Add([]byte(`null`), []byte("PDM1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, plain, raw []byte) {
		sealed, err := sealPlain(plain, key)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := OpenManifest(sealed, key, time.Now()); err == nil {
			if m.Event == "" || !time.Now().Before(m.ExpiresAt) {
				t.Fatalf("accepted a manifest without event or expired: %+v", m)
			}
		}
		_, _ = OpenManifest(raw, key, time.Now())
	})
}
