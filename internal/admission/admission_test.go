package admission

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func signingRing(t testing.TB, kid string) *keyring.Ring {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	ring, err := keyring.Parse(kid+":"+base64.StdEncoding.EncodeToString(priv.Seed()), nil)
	require.NoError(t, err)
	return ring
}

// A lease is live until its expiry, extended only while live, and gone
// once released; on a single Redis and on a Cluster.
func TestLeases(t *testing.T) {
	t.Parallel()
	for name, rdb := range map[string]redis.UniversalClient{"single": testenv.Redis(t), "cluster": testenv.RedisCluster(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ks := store.NewKeyspace(testenv.Prefix(t))
			l := NewLeases(rdb, ks, time.Second)
			require.ErrorIs(t, l.Live(ctx, "ev", "ann"), ErrNotAdmitted, "no lease yet")
			require.ErrorIs(t, l.Extend(ctx, "ev", "ann", time.Minute), ErrNotAdmitted, "a lease is never revived")
			until := time.Now().Add(time.Minute)
			require.NoError(t, rdb.ZAdd(ctx, LeaseKey(ks, "ev"), redis.Z{Score: float64(until.UnixMilli()), Member: "ann"}).Err())
			require.NoError(t, l.Live(ctx, "ev", "ann"))
			require.NoError(t, l.Extend(ctx, "ev", "ann", 10*time.Minute))
			exp, err := l.Expiry(ctx, "ev", "ann")
			require.NoError(t, err)
			require.WithinDuration(t, time.Now().Add(10*time.Minute), exp, 5*time.Second)
			require.NoError(t, l.Release(ctx, "ev", "ann"))
			require.NoError(t, l.Release(ctx, "ev", "ann"), "twice is fine")
			require.ErrorIs(t, l.Live(ctx, "ev", "ann"), ErrNotAdmitted)
			require.ErrorIs(t, l.Live(ctx, "e{v}", "ann"), ErrNotAdmitted, "no event has that id")
			require.ErrorIs(t, l.Extend(ctx, "ev", "ann", 0), ErrNotAdmitted)

			// Queued on a caller's pipeline, with a key of another slot.
			require.NoError(t, store.Load(ctx, rdb, l.Scripts()...))
			require.NoError(t, rdb.ZAdd(ctx, LeaseKey(ks, "ev"), redis.Z{Score: float64(until.UnixMilli()), Member: "bo"}).Err())
			p := rdb.Pipeline()
			bo, ann := l.QueueLive(ctx, p, "ev", "bo"), l.QueueLive(ctx, p, "ev", "ann")
			other := p.Incr(ctx, ks.Entity("x", "y").Key("n"))
			ext := l.QueueExtend(ctx, p, "ev", "bo", time.Hour)
			_, err = p.Exec(ctx)
			require.NoError(t, err)
			require.NoError(t, bo())
			require.ErrorIs(t, ann(), ErrNotAdmitted)
			require.EqualValues(t, 1, other.Val())
			require.NoError(t, ext())
		})
	}
}

// A store that fails is unavailable, never a yes.
func TestLeasesFailClosed(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	l := NewLeases(rdb, store.NewKeyspace("x:"), 200*time.Millisecond)
	require.ErrorIs(t, l.Live(context.Background(), "ev", "ann"), ErrUnavailable)
	require.ErrorIs(t, l.Extend(context.Background(), "ev", "ann", time.Minute), ErrUnavailable)
	require.ErrorIs(t, l.Release(context.Background(), "ev", "ann"), ErrUnavailable)
}

// A pass is good only for its user and event, signed by a known key with
// EdDSA, before it expires; a verifier with public keys only checks it.
func TestPasses(t *testing.T) {
	t.Parallel()
	ring := signingRing(t, "k1")
	issuer, err := NewIssuer(ring, time.Minute)
	require.NoError(t, err)
	now := time.Now()
	pass, exp, err := issuer.Issue("ev", "ann", now.Add(30*time.Second), now)
	require.NoError(t, err)
	require.False(t, exp.After(now.Add(30*time.Second)), "never outlives its lease")

	pub, ok := ring.Public("k1")
	require.True(t, ok)
	public, err := keyring.Parse("", []string{"k1:" + base64.StdEncoding.EncodeToString(pub)})
	require.NoError(t, err)
	c := NewChecker(public)
	require.NoError(t, c.Check(pass, "ev", "ann"))
	require.ErrorIs(t, c.Check(pass, "ev", "bo"), ErrNotAdmitted)
	require.ErrorIs(t, c.Check(pass, "other", "ann"), ErrNotAdmitted)
	require.ErrorIs(t, c.Check(pass+"x", "ev", "ann"), ErrNotAdmitted)
	stranger, err := NewIssuer(signingRing(t, "k1"), time.Minute)
	require.NoError(t, err)
	forged, _, err := stranger.Issue("ev", "ann", now.Add(time.Minute), now)
	require.NoError(t, err)
	require.ErrorIs(t, c.Check(forged, "ev", "ann"), ErrNotAdmitted, "another key under a known id")
	old, _, err := issuer.Issue("ev", "ann", now.Add(-time.Second), now.Add(-time.Minute))
	require.NoError(t, err)
	require.ErrorIs(t, c.Check(old, "ev", "ann"), ErrNotAdmitted, "expired")
	require.ErrorIs(t, NewChecker(nil).Check(pass, "ev", "ann"), ErrUnavailable, "no pass keys in this process")
	_, err = NewIssuer(public, time.Minute)
	require.Error(t, err, "public keys cannot sign")
}

// A checked pass is remembered by its hash until it expires: checked again
// it is not parsed or verified (here the ring that signed it is gone and
// it still passes), yet it still names only its user and event, a forged
// pass with the same claims is checked on its own, an expired one is
// refused, and the checker remembers at most its bound.
func TestVerifiedPassesAreRememberedUntilTheyExpire(t *testing.T) {
	t.Parallel()
	ring := signingRing(t, "k1")
	issuer, err := NewIssuer(ring, time.Hour)
	require.NoError(t, err)
	now := time.Now()
	pass, exp, err := issuer.Issue("ev", "ann", now.Add(time.Minute), now)
	require.NoError(t, err)

	c := newChecker(ring, 2)
	require.NoError(t, c.Check(pass, "ev", "ann"))
	c.ring = signingRing(t, "other") // the pass's key is unknown from now on
	require.NoError(t, c.Check(pass, "ev", "ann"), "remembered")
	require.ErrorIs(t, c.Check(pass, "ev", "bo"), ErrNotAdmitted, "still one user's")
	require.ErrorIs(t, c.Check(pass, "ev2", "ann"), ErrNotAdmitted, "still one event's")
	stranger, err := NewIssuer(signingRing(t, "k1"), time.Hour)
	require.NoError(t, err)
	forged, _, err := stranger.Issue("ev", "ann", now.Add(time.Minute), now)
	require.NoError(t, err)
	require.ErrorIs(t, c.Check(forged, "ev", "ann"), ErrNotAdmitted)

	c.now = func() time.Time { return exp }
	require.ErrorIs(t, c.Check(pass, "ev", "ann"), ErrNotAdmitted, "expired")
	require.Zero(t, c.verified.Len(), "an expired pass is forgotten")

	c = newChecker(ring, 2)
	for _, user := range []string{"a", "b", "c"} {
		p, _, err := issuer.Issue("ev", user, now.Add(time.Minute), now)
		require.NoError(t, err)
		require.NoError(t, c.Check(p, "ev", user))
	}
	require.Equal(t, 2, c.verified.Len(), "bounded")
}

// What an admission check costs this process per hold: the signature
// checked on every call (as before passes were remembered), and a
// remembered pass. go test -bench Check ./internal/admission/
func BenchmarkCheck(b *testing.B) {
	ring := signingRing(b, "k1")
	issuer, err := NewIssuer(ring, time.Hour)
	require.NoError(b, err)
	now := time.Now()
	pass, _, err := issuer.Issue("ev", "ann", now.Add(time.Hour), now)
	require.NoError(b, err)
	for name, remember := range map[string]int{"signature": 0, "remembered": verifiedPasses} {
		b.Run(name, func(b *testing.B) {
			c := newChecker(ring, remember)
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Check(pass, "ev", "ann"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
