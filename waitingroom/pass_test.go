package waitingroom

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/admission"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// A pass is good only with the right signature, algorithm, claims AND a
// live lease; every other case is refused with ErrNotAdmitted.
func TestPassRefusals(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, nil)
		ctx := context.Background()
		b.openRoom(t, "ev", Settings{})
		b.openRoom(t, "other", Settings{})
		b.join(t, "ev", "alice")
		b.join(t, "ev", "bob")
		b.join(t, "other", "alice")
		b.tick(t, "ev")
		b.tick(t, "other")
		exp, err := b.line.LeaseExpiry(ctx, "ev", "alice")
		require.NoError(t, err)
		require.False(t, exp.IsZero())

		// The booking plane holds only the public key.
		_, verify, _ := strings.Cut(publicString(t, b.ring, "k1"), "|")
		ring, err := keyring.Parse("", []string{verify})
		require.NoError(t, err)
		v := admission.NewVerifier(admission.NewChecker(ring), admission.NewLeases(rdb, b.keys, time.Second))
		issuer := b.mod.issuer

		good, passExp, err := issuer.Issue("ev", "alice", exp, time.Now())
		require.NoError(t, err)
		require.False(t, passExp.After(exp), "a pass never outlives its lease")
		require.NoError(t, v.Verify(ctx, good, "ev", "alice"))

		claims := func(mutate func(*passClaims)) *passClaims {
			c := &passClaims{RegisteredClaims: jwt.RegisteredClaims{
				Subject: "alice", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Minute)), ID: "j1",
			}, Event: "ev"}
			if mutate != nil {
				mutate(c)
			}
			return c
		}
		sign := func(method jwt.SigningMethod, key any, kid string, c *passClaims) string {
			tok := jwt.NewWithClaims(method, c)
			if kid != "" {
				tok.Header["kid"] = kid
			}
			s, err := tok.SignedString(key)
			require.NoError(t, err)
			return s
		}
		other := newRing(t, "k1") // same kid, another key
		pub, _ := b.ring.Public("k1")
		ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		expired, _, err := issuer.Issue("ev", "alice", time.Now().Add(-2*time.Second), time.Now().Add(-time.Minute))
		require.NoError(t, err)

		refused := map[string]string{
			"expired":           expired,
			"no exp":            sign(jwt.SigningMethodEdDSA, b.ring.PrivateKey(), "k1", claims(func(c *passClaims) { c.ExpiresAt = nil })),
			"bad signature":     sign(jwt.SigningMethodEdDSA, other.PrivateKey(), "k1", claims(nil)),
			"tampered":          tamper(t, good),
			"unknown kid":       sign(jwt.SigningMethodEdDSA, b.ring.PrivateKey(), "k9", claims(nil)),
			"no kid":            sign(jwt.SigningMethodEdDSA, b.ring.PrivateKey(), "", claims(nil)),
			"alg none":          sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "k1", claims(nil)),
			"HS256, public key": sign(jwt.SigningMethodHS256, []byte(pub), "k1", claims(nil)),
			"ES256":             sign(jwt.SigningMethodES256, ecKey, "k1", claims(nil)),
			"garbage":           "not.a.jwt",
			"empty":             "",
		}
		for name, pass := range refused {
			err := v.Verify(ctx, pass, "ev", "alice")
			require.ErrorIs(t, err, ErrNotAdmitted, name)
			require.NotErrorIs(t, err, ErrUnavailable, name)
		}
		require.ErrorIs(t, v.Verify(ctx, good, "other", "alice"), ErrNotAdmitted, "wrong event")
		require.ErrorIs(t, v.Verify(ctx, good, "ev", "bob"), ErrNotAdmitted, "wrong user")
		bobPass := sign(jwt.SigningMethodEdDSA, b.ring.PrivateKey(), "k1", claims(func(c *passClaims) { c.Subject = "bob" }))
		require.NoError(t, v.Verify(ctx, bobPass, "ev", "bob"))

		// A valid signature with no lease is refused.
		carol := sign(jwt.SigningMethodEdDSA, b.ring.PrivateKey(), "k1", claims(func(c *passClaims) { c.Subject = "carol" }))
		require.ErrorIs(t, v.Verify(ctx, carol, "ev", "carol"), ErrNotAdmitted, "never admitted")

		// Extend moves the live lease; a revoked lease refuses the pass and
		// cannot be extended back to life.
		require.NoError(t, v.Extend(ctx, "ev", "alice", 10*time.Minute))
		exp2, err := b.line.LeaseExpiry(ctx, "ev", "alice")
		require.NoError(t, err)
		require.WithinDuration(t, time.Now().Add(10*time.Minute), exp2, 5*time.Second)
		require.NoError(t, v.Extend(ctx, "ev", "alice", 30*time.Second), "shortening is allowed")
		require.NoError(t, v.Release(ctx, "ev", "alice"))
		require.NoError(t, v.Release(ctx, "ev", "alice"), "release is idempotent")
		require.ErrorIs(t, v.Verify(ctx, good, "ev", "alice"), ErrNotAdmitted, "revoked lease")
		require.ErrorIs(t, v.Extend(ctx, "ev", "alice", time.Minute), ErrNotAdmitted)
		require.ErrorIs(t, v.Extend(ctx, "ev", "carol", time.Minute), ErrNotAdmitted)
		require.ErrorIs(t, v.Extend(ctx, "ev", "bob", 0), ErrNotAdmitted)
		require.ErrorIs(t, v.Extend(ctx, "e{v}", "bob", time.Minute), ErrNotAdmitted)
		require.ErrorIs(t, v.Verify(ctx, good, "", "alice"), ErrNotAdmitted)
		require.NoError(t, v.Release(ctx, "e{v}", "bob"))

		// An expired lease is not extended either.
		b.join(t, "ev", "dave")
		b.tick(t, "ev")
		k := keysOf(b.keys, "ev")
		require.NoError(t, rdb.ZAddXX(ctx, k.leases, redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: "dave"}).Err())
		require.ErrorIs(t, v.Extend(ctx, "ev", "dave", time.Minute), ErrNotAdmitted)
	})
}

// Keys rotate: a pass signed with the previous key verifies while that key
// is listed; the JWKS publishes both.
func TestPassKeyRotation(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	oldSigning, oldVerify, err := keyring.Generate("2025-01")
	require.NoError(t, err)
	newSigning, _, err := keyring.Generate("2025-02")
	require.NoError(t, err)
	oldRing, err := keyring.Parse(oldSigning, nil)
	require.NoError(t, err)
	rotated, err := keyring.Parse(newSigning, []string{oldVerify})
	require.NoError(t, err)

	b := newBundle(t, rdb, testenv.Prefix(t), rotated, nil)
	b.openRoom(t, "ev", Settings{})
	b.join(t, "ev", "u")
	b.tick(t, "ev")
	exp, err := b.line.LeaseExpiry(context.Background(), "ev", "u")
	require.NoError(t, err)
	oldIssuer, err := admission.NewIssuer(oldRing, time.Minute)
	require.NoError(t, err)
	oldPass, _, err := oldIssuer.Issue("ev", "u", exp, time.Now())
	require.NoError(t, err)
	newPass, _, err := b.mod.issuer.Issue("ev", "u", exp, time.Now())
	require.NoError(t, err)
	v := b.mod.verifier
	require.NoError(t, v.Verify(context.Background(), oldPass, "ev", "u"))
	require.NoError(t, v.Verify(context.Background(), newPass, "ev", "u"))
	set, err := rotated.JWKS()
	require.NoError(t, err)
	var keys struct {
		Keys []map[string]string `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(set, &keys))
	require.Len(t, keys.Keys, 2)

	// After the old key is dropped its passes stop verifying.
	current, err := keyring.Parse(newSigning, nil)
	require.NoError(t, err)
	v2 := admission.NewVerifier(admission.NewChecker(current), admission.NewLeases(rdb, b.keys, time.Second))
	require.ErrorIs(t, v2.Verify(context.Background(), oldPass, "ev", "u"), ErrNotAdmitted)
	require.NoError(t, v2.Verify(context.Background(), newPass, "ev", "u"))
}

// publicString renders "kid:base64(pub)" of ring's key kid, after a "|".
func publicString(t testing.TB, r *keyring.Ring, kid string) string {
	t.Helper()
	pub, ok := r.Public(kid)
	require.True(t, ok)
	return "|" + kid + ":" + base64.StdEncoding.EncodeToString(pub)
}

// tamper changes the payload of a token but keeps its signature.
func tamper(t testing.TB, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	require.Len(t, parts, 3)
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	changed := strings.Replace(string(raw), `"sub":"alice"`, `"sub":"alicf"`, 1)
	require.NotEqual(t, string(raw), changed)
	changed = strings.Replace(changed, `"sub":"alicf"`, `"sub":"alice","x":1`, 1)
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(changed))
	return strings.Join(parts, ".")
}

// admitAlice opens room "ev", admits alice through the line and returns
// her pass and her lease's expiry.
func (b *bundle) admitAlice(t *testing.T) (pass string, exp time.Time) {
	t.Helper()
	b.openRoom(t, "ev", Settings{})
	b.join(t, "ev", "alice")
	b.tick(t, "ev")
	exp, err := b.line.LeaseExpiry(context.Background(), "ev", "alice")
	require.NoError(t, err)
	require.False(t, exp.IsZero())
	pass, _, err = b.mod.issuer.Issue("ev", "alice", exp, time.Now())
	require.NoError(t, err)
	return pass, exp
}

// The queued checks booking sends with its own Redis calls answer as
// Verify and Extend do, in one pipeline with keys of other hash tags (one
// round trip per node of a Cluster).
func TestQueuedChecksAnswerAsVerify(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, nil)
		ctx := context.Background()
		good, exp := b.admitAlice(t)
		carol, _, err := b.mod.issuer.Issue("ev", "carol", exp, time.Now()) // signed, never admitted
		require.NoError(t, err)
		v := b.mod.verifier
		// A pipeline's caller loads the scripts after a NOSCRIPT.
		require.NoError(t, store.Load(ctx, rdb, v.Scripts()...))

		var alice, noLease, tampered, extended, notExtended func() error
		var foreign *redis.IntCmd
		p := rdb.Pipeline()
		alice = v.QueueVerify(ctx, p, good, "ev", "alice")
		noLease = v.QueueVerify(ctx, p, carol, "ev", "carol")
		tampered = v.QueueVerify(ctx, p, tamper(t, good), "ev", "alice")
		foreign = p.Incr(ctx, b.keys.Entity("user", "alice").Key("n"))
		extended = v.QueueExtend(ctx, p, "ev", "alice", 10*time.Minute)
		notExtended = v.QueueExtend(ctx, p, "ev", "carol", time.Minute)
		require.Equal(t, 6, p.Len())
		_, err = p.Exec(ctx)
		require.NoError(t, err)

		require.NoError(t, alice())
		require.ErrorIs(t, noLease(), ErrNotAdmitted)
		require.ErrorIs(t, tampered(), ErrNotAdmitted)
		require.Equal(t, int64(1), foreign.Val())
		require.NoError(t, extended())
		require.ErrorIs(t, notExtended(), ErrNotAdmitted)
		exp2, err := b.line.LeaseExpiry(ctx, "ev", "alice")
		require.NoError(t, err)
		require.WithinDuration(t, time.Now().Add(10*time.Minute), exp2, 5*time.Second)

		// A Redis that fails answers unavailable: the caller fails closed.
		p = rdb.Pipeline()
		down := v.QueueVerify(ctx, p, good, "ev", "alice")
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, _ = p.Exec(cancelled)
		require.ErrorIs(t, down(), ErrUnavailable)
	})
}

// A caller's script that starts with LeaseLua and keeps its own keys in
// LeaseSlot (booking's hold) reads and extends the leases the line grants,
// on a single Redis and on a Cluster; CheckPass checks the pass alone.
func TestLeaseLuaInACallersScript(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, nil)
		ctx := context.Background()
		good, exp := b.admitAlice(t)
		require.NoError(t, b.mod.CheckPass(good, "ev", "alice"))
		require.ErrorIs(t, b.mod.CheckPass(tamper(t, good), "ev", "alice"), ErrNotAdmitted)
		require.ErrorIs(t, b.mod.CheckPass(good, "ev", "bob"), ErrNotAdmitted)

		caller := store.NewScript("caller", admission.LeaseLua()+`
local now = lease_now()
local live = lease_live(KEYS[1], ARGV[1], now)
redis.call('INCR', KEYS[2])
return {live, lease_extend(KEYS[1], ARGV[1], now, ARGV[2])}`)
		keys := []string{admission.LeaseKey(b.keys, "ev"), admission.Slot(b.keys, "ev").Key("booking", "n")}
		got, err := caller.Run(ctx, rdb, keys, "alice", 600_000).Int64Slice()
		require.NoError(t, err)
		require.Equal(t, exp.UnixMilli(), got[0], "the lease the line granted")
		require.Positive(t, got[1])
		exp2, err := b.line.LeaseExpiry(ctx, "ev", "alice")
		require.NoError(t, err)
		require.WithinDuration(t, time.Now().Add(10*time.Minute), exp2, 5*time.Second, "extended as Extend would")
		got, err = caller.Run(ctx, rdb, keys, "carol", 600_000).Int64Slice()
		require.NoError(t, err)
		require.Equal(t, []int64{0, 0}, got, "no lease, none made")
	})
}

// passClaims are a pass's claims as the wire carries them, for tests that
// forge passes: internal/admission's own type is its own.
type passClaims struct {
	jwt.RegisteredClaims
	Event string `json:"evt"`
}
