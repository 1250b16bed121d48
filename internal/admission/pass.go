package admission

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/store"
)

// claims are the claims of an admission pass.
type claims struct {
	jwt.RegisteredClaims
	// Event is the event the pass admits to.
	Event string `json:"evt"`
}

// Issuer signs passes with the admit plane's private key.
type Issuer struct {
	ring *keyring.Ring
	ttl  time.Duration
}

// NewIssuer returns an issuer whose passes live at most ttl; ring must hold
// a signing key.
func NewIssuer(ring *keyring.Ring, ttl time.Duration) (*Issuer, error) {
	if ring == nil || !ring.CanSign() {
		return nil, errors.New("admission: the pass keyring holds no signing key (set waitingroom.signing_key)")
	}
	return &Issuer{ring: ring, ttl: ttl}, nil
}

// Issue signs a pass for user at event. It expires at the lease's end or
// after the pass lifetime, whichever is first, rounded down to the second
// so it never outlives the lease.
func (i *Issuer) Issue(event, user string, leaseExpiry, now time.Time) (string, time.Time, error) {
	exp := leaseExpiry
	if capped := now.Add(i.ttl); capped.Before(exp) {
		exp = capped
	}
	exp = exp.Truncate(time.Second)
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   user,
			ExpiresAt: jwt.NewNumericDate(exp),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        store.NewToken(),
		},
		Event: event,
	})
	tok.Header["kid"] = i.ring.ActiveID()
	signed, err := tok.SignedString(i.ring.PrivateKey())
	if err != nil {
		return "", time.Time{}, fmt.Errorf("admission: sign pass: %w", err)
	}
	return signed, exp, nil
}

// Checker checks passes with public keys only.
type Checker struct {
	ring   *keyring.Ring
	parser *jwt.Parser
	// verified remembers the passes whose signature was checked, by the
	// SHA-256 of the pass, until they expire: a buyer sends the same pass
	// with every hold attempt, and the Ed25519 check is most of what an
	// admission check costs this process (BenchmarkCheck). Only a pass
	// signed by a key of ring gets in, so it holds real passes only, at
	// most verifiedPasses of them, the least recently used leaving first.
	// The ring never changes, so a pass good once is good until its
	// expiry; the lease behind it is checked on every call by the caller.
	verified *lru.Cache[[sha256.Size]byte, verifiedPass]
	now      func() time.Time
}

// verifiedPasses bounds the passes a Checker remembers: a few MiB.
const verifiedPasses = 1 << 16

// verifiedPass is what a checked pass names, and when it expires.
type verifiedPass struct {
	user, event string
	expires     time.Time
}

// NewChecker accepts passes signed by any key of ring; a nil ring checks
// nothing and answers ErrUnavailable (a process without pass keys).
func NewChecker(ring *keyring.Ring) *Checker { return newChecker(ring, verifiedPasses) }

// newChecker remembers at most remember verified passes (0: none).
func newChecker(ring *keyring.Ring, remember int) *Checker {
	c := &Checker{ring: ring, now: time.Now}
	// EdDSA only: "none", HMAC keyed with a public key and every other
	// algorithm are refused before any key is looked at.
	c.parser = jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return c.now() }))
	if remember > 0 {
		c.verified, _ = lru.New[[sha256.Size]byte, verifiedPass](remember) // errs only on a size < 1
	}
	return c
}

// Check checks everything of a pass but its lease: signed with EdDSA by a
// known key, not expired, naming user and event.
func (c *Checker) Check(pass, event, user string) error {
	if c.ring == nil {
		return fmt.Errorf("%w: this process holds no pass keys", ErrUnavailable)
	}
	if !named(event, user) {
		return errUnnamed
	}
	v, err := c.verify(pass)
	if err != nil {
		return err
	}
	if v.user != user {
		return fmt.Errorf("%w: the pass belongs to another user", ErrNotAdmitted)
	}
	if v.event != event {
		return fmt.Errorf("%w: the pass is for another event", ErrNotAdmitted)
	}
	return nil
}

// verify returns what a good pass names: remembered, or checked (its
// signature, algorithm and expiry) and then remembered.
func (c *Checker) verify(pass string) (verifiedPass, error) {
	var sum [sha256.Size]byte
	if c.verified != nil {
		sum = sha256.Sum256([]byte(pass))
		if v, ok := c.verified.Get(sum); ok {
			if c.now().Before(v.expires) {
				return v, nil
			}
			c.verified.Remove(sum)
		}
	}
	cl := &claims{}
	if _, err := c.parser.ParseWithClaims(pass, cl, c.key); err != nil {
		return verifiedPass{}, fmt.Errorf("%w: %v", ErrNotAdmitted, err)
	}
	v := verifiedPass{user: cl.Subject, event: cl.Event, expires: cl.ExpiresAt.Time}
	if c.verified != nil {
		c.verified.Add(sum, v)
	}
	return v, nil
}

func (c *Checker) key(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		return nil, errors.New("the pass names no key (kid)")
	}
	pub, ok := c.ring.Public(kid)
	if !ok {
		return nil, fmt.Errorf("unknown key %q", kid)
	}
	return ed25519.PublicKey(pub), nil
}

// Verifier checks a pass together with its lease.
type Verifier struct {
	*Checker
	*Leases
}

// NewVerifier checks passes with checker and leases with leases.
func NewVerifier(checker *Checker, leases *Leases) *Verifier {
	return &Verifier{Checker: checker, Leases: leases}
}

// Verify returns nil only when pass is a valid pass of user for event and
// user holds a live lease for event.
func (v *Verifier) Verify(ctx context.Context, pass, event, user string) error {
	if err := v.Check(pass, event, user); err != nil {
		return err
	}
	return v.Live(ctx, event, user)
}

// QueueVerify is Verify with the lease check queued on p, so that a caller
// sends it in the same round trip as its own Redis calls. The pass's
// signature, the costly part, is checked only when the returned func is
// called once p ran, after whatever cheaper refusal the caller checks
// first.
func (v *Verifier) QueueVerify(ctx context.Context, p redis.Pipeliner, pass, event, user string) func() error {
	lease := v.QueueLive(ctx, p, event, user)
	return func() error {
		if err := v.Check(pass, event, user); err != nil {
			return err
		}
		return lease()
	}
}
