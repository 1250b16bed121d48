package booking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/admission"
	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/internal/validate"
	"github.com/presenced/presenced/store"
)

// holdsPlane is the booking plane: holds, reservations and event administration.
type holdsPlane struct {
	db        *pgxpool.Pool
	rdb       redis.UniversalClient
	keys      keys
	hints     hints
	scripts   holdScripts
	admission Admission
	leases    *admission.Leases
	readers   *holdReaders
	writers   *holdWriters
	bests     *bestWriters
	holdTimes holdTimes
	cfg       config.Booking
	m         *metrics
	log       *slog.Logger
}

// holdsDeps are what Holds needs.
type holdsDeps struct {
	DB        *pgxpool.Pool
	Redis     redis.UniversalClient
	Keys      store.Keyspace
	Admission Admission
	Leases    *admission.Leases
	Config    config.Booking
	Metrics   *metrics
	Log       *slog.Logger
}

// newHolds builds the booking plane.
func newHolds(d holdsDeps) (*holdsPlane, error) {
	if d.DB == nil || d.Redis == nil || d.Admission == nil || d.Leases == nil || d.Metrics == nil || d.Log == nil {
		return nil, errors.New("booking: holds need a database, redis, an admission checker, the leases, metrics and a logger")
	}
	k := keys{ks: d.Keys}
	h := &holdsPlane{db: d.DB, rdb: d.Redis, keys: k, hints: hints{rdb: d.Redis, ks: d.Keys},
		scripts: newHoldScripts(), admission: d.Admission, leases: d.Leases, cfg: d.Config, m: d.Metrics, log: d.Log}
	h.readers = newHoldReaders(h, d.Config.HoldReaders)
	h.writers = newHoldWriters(h, d.Config.HoldWriters)
	h.bests = newBestWriters(h, d.Config.HoldWriters)
	return h, nil
}

// holdInput is one hold request.
type holdInput struct {
	User      string
	Event     string
	Pass      string
	Key       string // Idempotency-Key
	Seats     []int64
	PromoCode string
}

// holdResult is the answer to a hold: the status and body a retry with the
// same key gets again, byte for byte.
type holdResult struct {
	Status   int
	Body     []byte
	Replayed bool
}

const opHold = "hold"

// Hold runs a hold in one PostgreSQL round trip when a writer is free
// (holdAlone: the read, the checks, the prices and the write in one
// statement, which answers a refusal from what it read), and in two when
// it queues for a batch: cheap refusals first (validation, rate,
// admission, seat hints; each looks up the stored answer of the key before
// it refuses), then one pipelined batch of key lookups that
// locks nothing (read), then one batch that writes everything with the
// stored response and commits (write), its constraints refusing whatever
// changed in between. Refusals are booking's kinds (errors.go).
func (h *holdsPlane) Hold(ctx context.Context, in holdInput) (holdResult, error) {
	seats, fp, err := h.check(in)
	if err != nil {
		return holdResult{}, err
	}
	resID := uuid.Must(uuid.NewV7()).String() // time-ordered: inserts stay at the index tail
	// The hints come before PostgreSQL, in the gate's one script call: a
	// buyer who wants a hinted seat is refused without a round trip to
	// it. They are taken for a short claim only, so a process dying before
	// the commit blocks nobody for long; a seat PostgreSQL refuses as held
	// is hinted again for its holder (undo). A retry of the same request
	// is not refused by its own hints (holdClaim): PostgreSQL answers it.
	g, err := h.gates(ctx, in, seats, resID)
	if err != nil {
		if g.hinted {
			h.undo(ctx, in, seats, resID, g, nil)
		}
		// A retry of a committed hold gets its stored answer whatever the
		// gates say now: the lease ends with a cancel or its time, Redis
		// may have restarted empty. Looked up only on a refusal, so the
		// admitted path costs no extra round trip.
		return h.refuseUnlessStored(ctx, in, fp, err)
	}
	if g.taken != 0 {
		// A retry of a committed hold whose seats another buyer hints
		// now (it was cancelled or expired since) gets its stored answer,
		// as past the gates.
		taken := seatsTaken([]int64{g.taken})
		r, err := h.refuseUnlessStored(ctx, in, fp, taken)
		if err == taken {
			h.m.hintRejections.Inc()
		}
		return r, err
	}
	committed := false
	var rehint map[int64]string
	defer func() {
		if !committed {
			h.undo(ctx, in, seats, resID, g, rehint)
		}
	}()

	body, view, alone, err := h.holdAlone(ctx, in, seats, fp, resID)
	if view != nil && view.event != nil {
		h.holdTimes.remember(in.Event, view.event.holdMinutes)
	}
	switch {
	case errors.Is(err, errKeyTaken):
		return h.answerConcurrentRetry(ctx, in, fp)
	case err != nil:
		return holdResult{}, err
	case body != nil:
		committed = true
		h.afterGate(ctx, in, seats, resID, g, view.event)
		return holdResult{Status: http.StatusCreated, Body: body}, nil
	case !alone:
		// Every writer is busy: the hold reads, then queues for a batch.
		if view, err = h.readers.read(ctx, in, seats); err != nil {
			return holdResult{}, err
		}
	}
	replay, err := view.refusal(in, seats, fp)
	if replay != nil {
		h.m.idempotentHits.Inc()
		return *replay, nil
	}
	if err != nil {
		rehint = view.rehints(err)
		return holdResult{}, err
	}
	p, err := h.price(in, fp, resID, view)
	if err != nil {
		return holdResult{}, err
	}
	var ended []*released
	if len(p.reclaim) == 0 {
		err = h.writers.write(ctx, p)
	} else {
		ended, err = h.writeReclaiming(ctx, p)
	}
	if errors.Is(err, errKeyTaken) {
		return h.answerConcurrentRetry(ctx, in, fp)
	}
	if err != nil {
		return holdResult{}, err
	}
	committed = true
	h.afterGate(ctx, in, seats, resID, g, view.event)
	for _, r := range ended {
		// The user's own previous checkout ended: their admission lease
		// now belongs to this hold and stays.
		h.releaseAfter(ctx, r, r.user != in.User)
	}
	return holdResult{Status: http.StatusCreated, Body: p.body}, nil
}

// answerConcurrentRetry answers a request whose key an identical request
// committed while it ran: that one's stored response, or a 422 when the
// key was used for something else.
func (h *holdsPlane) answerConcurrentRetry(ctx context.Context, in holdInput, fp []byte) (holdResult, error) {
	stored, found, err := h.lookupStored(ctx, in)
	switch {
	case err != nil:
		return holdResult{}, storeError("read idempotency key", err)
	case !found:
		// The other request's transaction rolled back after all.
		return holdResult{}, refusal.Busy(time.Second, "a request with this Idempotency-Key is running; retry")
	case string(stored.fingerprint) != string(fp):
		return holdResult{}, ErrKeyReused
	}
	h.m.idempotentHits.Inc()
	r := stored.result
	r.Replayed = true
	return r, nil
}

// afterGate finishes the Redis part of a committed hold: nothing when the
// gate moved the lease to the hold's time (the common case: one script
// call per hold), else the extension after the commit. The hints keep
// their claim time: once it is over, the seats' rows say HELD, and the
// first buyer PostgreSQL refuses one of them hints it again for its
// holder (undo), so later buyers are refused by Redis again.
func (h *holdsPlane) afterGate(ctx context.Context, in holdInput, seats []int64, resID string, g gate, ev *eventRow) {
	holdFor := time.Duration(ev.holdMinutes) * time.Minute
	if g.leaseSet != 0 && g.holdFor == holdFor {
		return
	}
	h.afterCommit(ctx, in, seats, resID, holdFor, ev.now.Add(holdFor))
}

// undo is the Redis part of a hold that took its hints and did not commit,
// in one script call (hold_undo.lua): its hints dropped, the lease put
// back where the gate found it, and the seats of rehint (seat →
// "<holder>:<ms>") hinted for the reservation PostgreSQL said holds them.
func (h *holdsPlane) undo(ctx context.Context, in holdInput, seats []int64, resID string, g gate, rehint map[int64]string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	keys := append([]string{h.hints.leaseKey(in.Event)}, h.hints.hintKeys(in.Event, seats)...)
	args := []any{in.User, resID, g.leaseWas, g.leaseSet}
	for _, s := range seats {
		args = append(args, rehint[s])
	}
	if err := h.scripts.undo.Run(ctx, h.rdb, keys, args...).Err(); err != nil {
		// The hints lapse after their claim time; the lease keeps the
		// hold's time at worst.
		h.m.hintErrors.Inc()
		h.log.Debug("undo a hold's seat hints and lease", "err", err)
	}
}

// afterCommit extends the buyer's admission lease to the hold duration and
// the seat hints to the hold's time, in one script call. A failure leaves
// the hold standing: PostgreSQL owns it.
func (h *holdsPlane) afterCommit(ctx context.Context, in holdInput, seats []int64, resID string, holdFor time.Duration, expiresAt time.Time) {
	ctx, cancel := context.WithTimeout(ctx, h.leases.Timeout())
	defer cancel()
	keys := append([]string{h.hints.leaseKey(in.Event)}, h.hints.hintKeys(in.Event, seats)...)
	res, err := h.scripts.extend.Run(ctx, h.rdb, keys, in.User, holdFor.Milliseconds(), resID,
		max(time.Until(expiresAt).Milliseconds(), 1)).Int64Slice()
	if err != nil || len(res) != 2 {
		// The hints lapse after the claim time; the seat rows still say
		// HELD, so a later buyer is refused by PostgreSQL instead.
		h.m.hintErrors.Inc()
		h.m.leaseExtendFail.Inc()
		h.log.Warn("hold committed but its lease and seat hints were not extended", "err", err)
		return
	}
	if res[0] == 0 {
		// The hold stands: PostgreSQL owns it. The buyer may have to
		// re-verify at payment; count it so an operator sees it.
		h.m.leaseExtendFail.Inc()
		h.log.Warn("hold committed but the admission lease was not live to extend")
	}
}

// gate is what the gates' script call did.
type gate struct {
	taken  int64 // the seat another request hints (0: none)
	hinted bool  // the cart's hints were taken (to undo on a refusal)
	// The lease's expiry before the call and the one it set (0: it set
	// none), in Redis milliseconds, and the hold's time it set it for.
	leaseWas, leaseSet int64
	holdFor            time.Duration
}

// gates are the cheap refusals before any row lock, in one script call
// (hold_gate.lua): the user's rate, the admission lease, and the cart's
// seat hints, each only if the one before let it through, and then the
// lease moved to the hold's time (when this process knows the event's);
// then the pass itself, the costly part, which a rate-limited attempt
// does not pay for.
func (h *holdsPlane) gates(ctx context.Context, in holdInput, seats []int64, resID string) (gate, error) {
	ctx, cancel := context.WithTimeout(ctx, h.leases.Timeout())
	defer cancel()
	keys := []string{h.hints.leaseKey(in.Event), h.hints.rateKey(in.Event, in.User)}
	if in.Pass != "" { // without one only the rate is counted: the hold is refused
		keys = append(keys, h.hints.hintKeys(in.Event, seats)...)
	}
	g := gate{holdFor: time.Duration(h.holdTimes.get(in.Event)) * time.Minute}
	res, err := h.scripts.gate.Run(ctx, h.rdb, keys, in.User, time.Minute.Milliseconds(), h.cfg.HoldsPerMinute,
		resID, holdClaim(in.User, in.Key), max(h.cfg.HintClaimTTL.Milliseconds(), 1), g.holdFor.Milliseconds()).Int64Slice()
	if err != nil || len(res) != 5 {
		h.m.hintErrors.Inc()
		return gate{}, refusal.Busy(time.Second, "rate limiter, admission and seat hints unavailable; retry")
	}
	switch outcome := res[0]; {
	case outcome == 1:
		return gate{}, rateLimited(time.Duration(res[2]) * time.Millisecond)
	case in.Pass == "":
		return gate{}, errNoPass
	case outcome == 2:
		return gate{}, admissionRefusal(fmt.Errorf("%w: no live lease", ErrNotAdmitted))
	case outcome > 2 && outcome-2 <= int64(len(seats)):
		// Another request hints a seat: no hint was taken. The pass is
		// still checked first, so that a bad pass is told 403 as before.
		if err := admissionRefusal(h.admission.CheckPass(in.Pass, in.Event, in.User)); err != nil {
			return gate{}, err
		}
		return gate{taken: seats[outcome-3]}, nil
	case outcome != 0:
		return gate{}, refusal.Busy(time.Second, "seat hints unavailable; retry")
	}
	g.hinted, g.leaseWas, g.leaseSet = true, res[3], res[4]
	return g, admissionRefusal(h.admission.CheckPass(in.Pass, in.Event, in.User))
}

// lookupStored reads the stored answer of the request's key, if any.
func (h *holdsPlane) lookupStored(ctx context.Context, in holdInput) (storedAnswer, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StatementTimeout)
	defer cancel()
	var st storedAnswer
	err := h.db.QueryRow(ctx, selectStored, in.User, opHold, in.Key).Scan(&st.fingerprint, &st.result.Status, &st.result.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, false, nil
	}
	return st, err == nil, err
}

// refuseUnlessStored answers a refusal met before PostgreSQL (the rate,
// the admission lease, another buyer's hint) of an event or a stay hold
// (they share the key space): an identical request that committed under
// the key gets its stored answer instead, since a retry of a timed-out 201
// must not be told 403, 409 or 429. When PostgreSQL cannot say whether
// one committed, the answer is a 503, never the refusal: the hold may be
// committed, and the buyer would give up seats they own. The key's answer
// is keyed by user, so it tells nobody else anything; a different request
// under the key is not replayed: the refusal stands.
func (h *holdsPlane) refuseUnlessStored(ctx context.Context, in holdInput, fp []byte, refused error) (holdResult, error) {
	st, found, err := h.lookupStored(ctx, in)
	switch {
	case err != nil:
		return holdResult{}, storeError("read idempotency key", err)
	case !found || string(st.fingerprint) != string(fp):
		return holdResult{}, refused
	}
	h.m.idempotentHits.Inc()
	r := st.result
	r.Replayed = true
	return r, nil
}

// checkIdempotencyKey refuses a missing key, and one that is not printable
// text: PostgreSQL refuses invalid UTF-8 and NUL (a 500 otherwise), and a
// key with a newline would forge log lines.
func checkIdempotencyKey(key string) error {
	if key == "" {
		return ErrKeyRequired
	}
	if err := validate.Token("Idempotency-Key", key, validate.MaxIdempotencyKeyBytes); err != nil {
		return refusal.New(ErrBadKey, "%v", err)
	}
	return nil
}

// check validates the request and returns the sorted cart and the request
// fingerprint.
func (h *holdsPlane) check(in holdInput) ([]int64, []byte, error) {
	keyErr := checkIdempotencyKey(in.Key)
	switch {
	case !validEventID(in.Event):
		return nil, nil, ErrEventNotFound
	case keyErr != nil:
		return nil, nil, keyErr
	case len(in.Seats) < 1 || len(in.Seats) > h.cfg.MaxSeatsPerHold:
		return nil, nil, refusal.Invalid("hold 1 to %d seats", h.cfg.MaxSeatsPerHold)
	case in.PromoCode != "" && !promoPattern.Valid(in.PromoCode):
		return nil, nil, ErrInvalidPromoCode
	}
	seats := slices.Clone(in.Seats)
	slices.Sort(seats)
	for i, s := range seats {
		if s <= 0 || (i > 0 && seats[i-1] == s) {
			return nil, nil, refusal.Invalid("seats must be distinct seat ids")
		}
	}
	return seats, fingerprint(in.Event, seats, in.PromoCode), nil
}

// rateLimit counts an attempt of user and refuses one over the rate: the
// gate of a stay hold, which looks up its hotel before it knows whether
// it needs an admission pass.
func (h *holdsPlane) rateLimit(ctx context.Context, user string) error {
	return h.rateRefusal(rateScript.Run(ctx, h.rdb, []string{h.keys.holdRate(user)}, time.Minute.Milliseconds()))
}

// verifyAdmission checks the pass and lease on its own (a stay's flash
// deal).
func (h *holdsPlane) verifyAdmission(ctx context.Context, in holdInput) error {
	if in.Pass == "" {
		return errNoPass
	}
	if err := h.leases.Live(ctx, in.Event, in.User); err != nil {
		return admissionRefusal(err)
	}
	return admissionRefusal(h.admission.CheckPass(in.Pass, in.Event, in.User))
}

// extendLease keeps user's lease alive for d (a stay's flash deal).
func (h *holdsPlane) extendLease(ctx context.Context, event, user string, d time.Duration) error {
	return h.leases.Extend(ctx, event, user, d)
}

// rateRefusal reads the answer of rate.lua: the attempts in the window
// and the window's remaining milliseconds.
func (h *holdsPlane) rateRefusal(rate *redis.Cmd) error {
	res, err := rate.Int64Slice()
	if err != nil || len(res) != 2 {
		return refusal.Busy(time.Second, "rate limiter unavailable; retry")
	}
	if res[0] > int64(h.cfg.HoldsPerMinute) {
		return rateLimited(time.Duration(res[1]) * time.Millisecond)
	}
	return nil
}

// rateLimited refuses an attempt over the rate until the window ends
// (wait), a second at least.
func rateLimited(wait time.Duration) error {
	return &refusal.Error{Kind: ErrRateLimited, Msg: ErrRateLimited.Error(), RetryAfter: max(wait, time.Second)}
}

// errNoPass refuses a hold that brings no admission pass.
var errNoPass = refusal.New(ErrNotAdmitted, "an X-Admission-Pass from the waiting room is required")

func admissionRefusal(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotAdmitted):
		return refusal.New(ErrNotAdmitted, "the admission pass is not valid for this event and user, or its lease ended")
	default:
		// Fail closed: nobody is let in by an error.
		return refusal.Busy(2*time.Second, "admission check unavailable; retry")
	}
}

// releaseAfter does the cleanup of an ended reservation once its
// transaction is over: owner-checked hint release and, for reservations
// that really ended, the buyer's admission lease.
func (h *holdsPlane) releaseAfter(ctx context.Context, r *released, endLease bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := h.hints.release(ctx, r.event, r.seats, r.id); err != nil {
		h.log.Debug("release seat hints", "err", err) // they expire on their own
	}
	if endLease && r.user != "" {
		if err := h.leases.Release(ctx, r.event, r.user); err != nil {
			h.log.Debug("release admission lease", "err", err)
		}
	}
}

// holdTimes remembers each event's hold time, as its holds read it, so
// that the gate can move the lease to it before the hold commits. An event
// keeps its hold time; one deleted and created again with another is
// caught after the commit (afterGate compares).
type holdTimes struct {
	mu      sync.Mutex
	minutes map[string]int
}

// maxHoldTimes bounds the events remembered: past it they are forgotten
// at once, and the next hold of each pays a second script call.
const maxHoldTimes = 4096

func (t *holdTimes) get(event string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.minutes[event]
}

func (t *holdTimes) remember(event string, minutes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.minutes[event] == minutes {
		return
	}
	if t.minutes == nil || len(t.minutes) >= maxHoldTimes {
		t.minutes = map[string]int{}
	}
	t.minutes[event] = minutes
}
