package waitingroom

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/store"
)

// The two ways a pass check fails. Every error of Verify, Extend and
// Release wraps one of them.
var (
	// ErrNotAdmitted: the pass is not good for this user and event (bad
	// signature, wrong algorithm, expired, wrong event or user), or there is
	// no live lease behind it.
	ErrNotAdmitted = errors.New("waitingroom: not admitted")
	// ErrUnavailable: the lease store failed; the caller must refuse (fail
	// closed) and may retry.
	ErrUnavailable = errors.New("waitingroom: lease store unavailable")
)

// passClaims are the claims of an admission pass.
type passClaims struct {
	jwt.RegisteredClaims
	// Event is the event the pass admits to.
	Event string `json:"evt"`
}

// passIssuer signs passes with the admit plane's private key.
type passIssuer struct {
	ring *keyring.Ring
	ttl  time.Duration
}

// newPassIssuer returns an issuer whose passes live at most ttl; ring must hold
// a signing key.
func newPassIssuer(ring *keyring.Ring, ttl time.Duration) (*passIssuer, error) {
	if ring == nil || !ring.CanSign() {
		return nil, errors.New("waitingroom: the pass keyring holds no signing key (set waitingroom.signing_key)")
	}
	return &passIssuer{ring: ring, ttl: ttl}, nil
}

// Issue signs a pass for user at event. It expires at the lease's end or
// after the pass lifetime, whichever is first, rounded down to the second
// so it never outlives the lease.
func (i *passIssuer) Issue(event, user string, leaseExpiry, now time.Time) (string, time.Time, error) {
	exp := leaseExpiry
	if capped := now.Add(i.ttl); capped.Before(exp) {
		exp = capped
	}
	exp = exp.Truncate(time.Second)
	claims := passClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   user,
			ExpiresAt: jwt.NewNumericDate(exp),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        store.NewToken(),
		},
		Event: event,
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = i.ring.ActiveID()
	signed, err := tok.SignedString(i.ring.PrivateKey())
	if err != nil {
		return "", time.Time{}, fmt.Errorf("waitingroom: sign pass: %w", err)
	}
	return signed, exp, nil
}

// passVerifier checks admission passes against the live server-side lease. It
// needs only public keys; the booking plane uses it to admit a checkout,
// then extends the lease to the hold's duration and releases it when the
// checkout ends.
type passVerifier struct {
	line    *lineStore
	ring    *keyring.Ring
	timeout time.Duration
	parser  *jwt.Parser
}

// newVerifier returns a verifier over the waiting rooms of line accepting
// passes signed by any key of ring. timeout bounds each Redis call (0: only
// the caller's context).
func newVerifier(line *lineStore, ring *keyring.Ring, timeout time.Duration) *passVerifier {
	return &passVerifier{
		line:    line,
		ring:    ring,
		timeout: timeout,
		// EdDSA only: "none", HMAC keyed with a public key and every other
		// algorithm are refused before any key is looked at.
		parser: jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}), jwt.WithExpirationRequired()),
	}
}

// Verify returns nil only when pass is signed by a known key with EdDSA,
// names user and event, has not expired, and user holds a live lease for
// event. Errors wrap ErrNotAdmitted or ErrUnavailable.
func (v *passVerifier) Verify(ctx context.Context, pass, event, user string) error {
	if err := v.checkPass(pass, event, user); err != nil {
		return err
	}
	ctx, cancel := v.bound(ctx)
	defer cancel()
	return leaseLive(v.line.LeaseExpiry(ctx, event, user))
}

// QueueVerify is Verify with the lease check queued on p, so that a
// caller sends it in the same round trip as its own Redis calls. The lease
// is named by event and user alone, so it is queued before the pass is
// looked at; the pass's signature, the costly part, is checked only when
// the returned func is called once p has run, after whatever cheaper
// refusal (a rate limit) the caller checks first.
func (v *passVerifier) QueueVerify(ctx context.Context, p redis.Pipeliner, pass, event, user string) func() error {
	if event == "" || user == "" || !validEvent(event) {
		return func() error { return fmt.Errorf("%w: no such event or user", ErrNotAdmitted) }
	}
	expiry := v.line.queueLeaseExpiry(ctx, p, event, user)
	return func() error {
		if err := v.checkPass(pass, event, user); err != nil {
			return err
		}
		return leaseLive(expiry())
	}
}

// checkPass checks everything of a pass but its lease.
func (v *passVerifier) checkPass(pass, event, user string) error {
	if v.ring == nil {
		return fmt.Errorf("%w: this process holds no pass keys", ErrUnavailable)
	}
	if event == "" || user == "" || !validEvent(event) {
		return fmt.Errorf("%w: no such event or user", ErrNotAdmitted)
	}
	claims := &passClaims{}
	if _, err := v.parser.ParseWithClaims(pass, claims, v.key); err != nil {
		return fmt.Errorf("%w: %v", ErrNotAdmitted, err)
	}
	if claims.Subject != user {
		return fmt.Errorf("%w: the pass belongs to another user", ErrNotAdmitted)
	}
	if claims.Event != event {
		return fmt.Errorf("%w: the pass is for another event", ErrNotAdmitted)
	}
	return nil
}

func leaseLive(exp time.Time, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if exp.IsZero() {
		return fmt.Errorf("%w: no live lease", ErrNotAdmitted)
	}
	return nil
}

func (v *passVerifier) key(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		return nil, errors.New("the pass names no key (kid)")
	}
	pub, ok := v.ring.Public(kid)
	if !ok {
		return nil, fmt.Errorf("unknown key %q", kid)
	}
	return ed25519.PublicKey(pub), nil
}

// Extend sets the lease of (event, user) to expire d from now, if a live
// lease exists (ErrNotAdmitted otherwise).
func (v *passVerifier) Extend(ctx context.Context, event, user string, d time.Duration) error {
	if err := checkExtend(event, user, d); err != nil {
		return err
	}
	ctx, cancel := v.bound(ctx)
	defer cancel()
	return extended(v.line.ExtendLease(ctx, event, user, d))
}

// QueueExtend is Extend queued on p; the returned func answers once p ran.
func (v *passVerifier) QueueExtend(ctx context.Context, p redis.Pipeliner, event, user string, d time.Duration) func() error {
	if err := checkExtend(event, user, d); err != nil {
		return func() error { return err }
	}
	ok := v.line.queueExtendLease(ctx, p, event, user, d)
	return func() error { return extended(ok()) }
}

func checkExtend(event, user string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: cannot extend a lease by %s", ErrNotAdmitted, d)
	}
	if user == "" || !validEvent(event) {
		return fmt.Errorf("%w: no such event or user", ErrNotAdmitted)
	}
	return nil
}

func extended(ok bool, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if !ok {
		return fmt.Errorf("%w: no live lease to extend", ErrNotAdmitted)
	}
	return nil
}

// Release ends the lease of (event, user), freeing its capacity for the
// next tick; releasing a lease that is gone is not an error.
func (v *passVerifier) Release(ctx context.Context, event, user string) error {
	if user == "" || !validEvent(event) {
		return nil // nothing can be held there
	}
	ctx, cancel := v.bound(ctx)
	defer cancel()
	if err := v.line.ReleaseLease(ctx, event, user); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

func (v *passVerifier) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if v.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, v.timeout)
}
