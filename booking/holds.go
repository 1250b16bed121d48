package booking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/validate"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web"
)

// holdsPlane is the booking plane: holds, reservations and event administration.
type holdsPlane struct {
	db        *pgxpool.Pool
	rdb       redis.UniversalClient
	keys      keys
	hints     hints
	admission Admission
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
	Config    config.Booking
	Metrics   *metrics
	Log       *slog.Logger
}

// newHolds builds the booking plane.
func newHolds(d holdsDeps) (*holdsPlane, error) {
	if d.DB == nil || d.Redis == nil || d.Admission == nil || d.Metrics == nil || d.Log == nil {
		return nil, errors.New("booking: holds need a database, redis, an admission checker, metrics and a logger")
	}
	k := keys{ks: d.Keys}
	return &holdsPlane{db: d.DB, rdb: d.Redis, keys: k, hints: hints{rdb: d.Redis, keys: k},
		admission: d.Admission, cfg: d.Config, m: d.Metrics, log: d.Log}, nil
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

// Hold runs a hold: cheap refusals first (rate, admission, idempotency,
// pending checkout, seat hints), then seat rows locked in id order, prices
// frozen, and everything written with the stored response in one READ
// COMMITTED transaction. Client errors are *web.Error.
func (h *holdsPlane) Hold(ctx context.Context, in holdInput) (holdResult, error) {
	seats, fp, err := h.check(in)
	if err != nil {
		return holdResult{}, err
	}
	if err := h.gates(ctx, in); err != nil {
		// A retry of a committed hold gets its stored answer whatever the
		// gates say now: the lease ends with a cancel or its time, Redis
		// may have restarted empty, and a buyer retrying a timed-out 201
		// must not be told 403 or 429. Looked up only on a refusal, so the
		// admitted path costs no extra round trip.
		if stored, ok := h.storedResponse(ctx, in, fp); ok {
			h.m.idempotentHits.Inc()
			return stored, nil
		}
		return holdResult{}, err
	}
	resID := uuid.Must(uuid.NewV7()).String() // time-ordered: inserts stay at the index tail
	tx, err := h.db.Begin(ctx)
	if err != nil {
		return holdResult{}, storeError("begin hold", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	ev, stored, err := h.prepare(ctx, tx, in, seats, fp)
	if err != nil || stored != nil {
		if stored != nil {
			h.m.idempotentHits.Inc()
			return *stored, nil
		}
		return holdResult{}, err
	}
	var ended []*released
	if ev.pendingID != "" {
		// The user's previous checkout is over but not yet reclaimed.
		r, err := endReservation(ctx, tx, ev.pendingID, StatusExpired, true, "")
		if err != nil {
			return holdResult{}, storeError("expire previous checkout", err)
		}
		ended = append(ended, r)
	}
	holdFor := time.Duration(ev.holdMinutes) * time.Minute
	expiresAt := ev.now.Add(holdFor)
	// Hinted for a short claim only; the hints get the hold's time once it
	// commits, so a process dying before the commit blocks nobody for long.
	taken, err := h.hints.take(ctx, in.Event, seats, resID, min(h.cfg.HintClaimTTL, time.Until(expiresAt)))
	if err != nil {
		h.m.hintErrors.Inc()
		return holdResult{}, web.Unavailable(time.Second, "seat hints unavailable; retry")
	}
	committed := false
	defer func() {
		if !committed {
			h.releaseAfter(ctx, &released{id: resID, event: in.Event, seats: seats}, false)
		}
	}()
	if taken != 0 {
		h.m.hintRejections.Inc()
		return holdResult{}, seatsTaken([]int64{taken})
	}
	more, err := h.reclaimExpired(ctx, tx, ev.expiredHolds)
	if err != nil {
		return holdResult{}, err
	}
	ended = append(ended, more...)
	locked, occupancy, err := h.lockSeats(ctx, tx, in.Event, seats)
	if err != nil {
		return holdResult{}, err
	}
	res, err := h.write(ctx, tx, pendingHold{in: in, ev: ev, id: resID, expiresAt: expiresAt, seats: locked, occ: occupancy, fingerprint: fp})
	if err != nil {
		return holdResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return holdResult{}, storeError("commit hold", err)
	}
	committed = true
	h.afterCommit(ctx, in, seats, resID, holdFor, expiresAt)
	for _, r := range ended {
		h.releaseAfter(ctx, r, true)
	}
	return res, nil
}

// afterCommit extends, side by side so the answer waits for one round trip,
// the seat hints to the hold's time and the buyer's admission lease to the
// hold duration. A failure leaves the hold standing: PostgreSQL owns it.
func (h *holdsPlane) afterCommit(ctx context.Context, in holdInput, seats []int64, resID string, holdFor time.Duration, expiresAt time.Time) {
	hinted := make(chan error, 1)
	go func() { hinted <- h.hints.extend(ctx, in.Event, seats, resID, time.Until(expiresAt)) }()
	if err := h.admission.Extend(ctx, in.Event, in.User, holdFor); err != nil {
		// The hold stands: PostgreSQL owns it. The buyer may have to
		// re-verify at payment; count it so an operator sees it.
		h.m.leaseExtendFail.Inc()
		h.log.Warn("hold committed but the admission lease was not extended", "err", err)
	}
	if err := <-hinted; err != nil {
		// The hints lapse after the claim time; the seat rows still say
		// HELD, so a later buyer is refused by PostgreSQL instead.
		h.m.hintErrors.Inc()
		h.log.Debug("extend seat hints", "err", err)
	}
}

// gates are the cheap refusals before any row lock: the user's rate, then
// the admission pass and its lease.
func (h *holdsPlane) gates(ctx context.Context, in holdInput) error {
	if err := h.rateLimit(ctx, in.User); err != nil {
		return err
	}
	return h.verifyAdmission(ctx, in)
}

const selectStored = `SELECT fingerprint, status_code, response FROM idempotency_keys WHERE user_id = $1 AND operation = $2 AND key = $3`

// storedResponse returns the stored answer of an earlier identical request
// under the same key, if there is one. It is keyed by user, so it tells
// nobody else anything. A different request under the key is not replayed
// here: the gate's refusal stands.
func (h *holdsPlane) storedResponse(ctx context.Context, in holdInput, fp []byte) (holdResult, bool) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StatementTimeout)
	defer cancel()
	var storedFP []byte
	var stored holdResult
	err := h.db.QueryRow(ctx, selectStored, in.User, opHold, in.Key).Scan(&storedFP, &stored.Status, &stored.Body)
	if err != nil || string(storedFP) != string(fp) {
		return holdResult{}, false
	}
	stored.Replayed = true
	return stored, true
}

// check validates the request and returns the sorted cart and the request
// fingerprint.
func (h *holdsPlane) check(in holdInput) ([]int64, []byte, error) {
	keyErr := validate.Token("Idempotency-Key", in.Key, validate.MaxIdempotencyKeyBytes)
	switch {
	case !validEventID(in.Event):
		return nil, nil, web.Errorf(http.StatusNotFound, "event_not_found", "no such event")
	case in.Key == "":
		return nil, nil, web.Errorf(http.StatusBadRequest, "idempotency_key_required", "an Idempotency-Key header is required")
	case keyErr != nil:
		// Printable only: PostgreSQL refuses invalid UTF-8 and NUL (a 500
		// before), and a key with a newline would forge log lines.
		return nil, nil, web.Errorf(http.StatusBadRequest, "bad_idempotency_key", "%v", keyErr)
	case len(in.Seats) < 1 || len(in.Seats) > h.cfg.MaxSeatsPerHold:
		return nil, nil, web.BadRequest("hold 1 to %d seats", h.cfg.MaxSeatsPerHold)
	case in.PromoCode != "" && !promoPattern.Valid(in.PromoCode):
		return nil, nil, web.Errorf(http.StatusUnprocessableEntity, "invalid_promo_code", "no such promotion code")
	}
	seats := slices.Clone(in.Seats)
	slices.Sort(seats)
	for i, s := range seats {
		if s <= 0 || (i > 0 && seats[i-1] == s) {
			return nil, nil, web.BadRequest("seats must be distinct seat ids")
		}
	}
	return seats, fingerprint(in.Event, seats, in.PromoCode), nil
}

func (h *holdsPlane) rateLimit(ctx context.Context, user string) error {
	res, err := rateScript.Run(ctx, h.rdb, []string{h.keys.holdRate(user)}, time.Minute.Milliseconds()).Int64Slice()
	if err != nil {
		return web.Unavailable(time.Second, "rate limiter unavailable; retry")
	}
	if res[0] > int64(h.cfg.HoldsPerMinute) {
		e := web.Errorf(http.StatusTooManyRequests, "rate_limited", "too many hold attempts; retry later")
		e.RetryAfter = max(time.Duration(res[1])*time.Millisecond, time.Second)
		return e
	}
	return nil
}

func (h *holdsPlane) verifyAdmission(ctx context.Context, in holdInput) error {
	if in.Pass == "" {
		return web.Errorf(http.StatusForbidden, "not_admitted", "an X-Admission-Pass from the waiting room is required")
	}
	err := h.admission.Verify(ctx, in.Pass, in.Event, in.User)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotAdmitted):
		return web.Errorf(http.StatusForbidden, "not_admitted", "the admission pass is not valid for this event and user, or its lease ended")
	default:
		// Fail closed: nobody is let in by an error.
		return web.Unavailable(2*time.Second, "admission check unavailable; retry")
	}
}

// eventRow is what the hold needs of the event, read in the first round trip.
type eventRow struct {
	currency    string
	startsAt    time.Time
	holdMinutes int
	now         time.Time
	pendingID   string // an expired pending checkout of this user, to end first
	// expiredHolds are due reservations still holding wanted seats.
	expiredHolds []string
}

// prepare sets the transaction's timeouts, serialises the user's hold
// attempts (advisory lock), answers identical retries from the stored
// response, and reads the event and the user's pending checkout, all in
// one round trip.
func (h *holdsPlane) prepare(ctx context.Context, tx pgx.Tx, in holdInput, seats []int64, fp []byte) (eventRow, *holdResult, error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`,
		fmt.Sprint(h.cfg.LockTimeout.Milliseconds()), fmt.Sprint(h.cfg.StatementTimeout.Milliseconds()))
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, in.User+"\n"+opHold)
	b.Queue(selectStored, in.User, opHold, in.Key)
	b.Queue(`
SELECT e.currency, e.starts_at, e.hold_minutes, clock_timestamp(),
       e.sale_opens_at <= clock_timestamp() AND (e.sale_closes_at IS NULL OR e.sale_closes_at > clock_timestamp()),
       r.id::text, r.expires_at <= clock_timestamp()
FROM events e
LEFT JOIN reservations r ON r.event_id = e.id AND r.user_id = $2 AND r.status = 'PENDING_PAYMENT'
WHERE e.id = $1`, in.Event, in.User)
	b.Queue(`
SELECT DISTINCT r.id::text FROM seats s JOIN reservations r ON r.id = s.reservation_id
WHERE s.event_id = $1 AND s.id = ANY($2) AND s.status = 'HELD'
  AND r.status = 'PENDING_PAYMENT' AND r.expires_at <= clock_timestamp()
ORDER BY 1`, in.Event, seats)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	var ev eventRow
	for i := 0; i < 2; i++ {
		if _, err := res.Exec(); err != nil {
			return ev, nil, storeError("prepare hold", err)
		}
	}
	var storedFP []byte
	var stored holdResult
	err := res.QueryRow().Scan(&storedFP, &stored.Status, &stored.Body)
	switch {
	case err == nil:
		if string(storedFP) != string(fp) {
			return ev, nil, web.Errorf(http.StatusUnprocessableEntity, "idempotency_key_reused",
				"this Idempotency-Key was used with a different request")
		}
		stored.Replayed = true
		return ev, &stored, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return ev, nil, storeError("read idempotency key", err)
	}
	var open bool
	var pendingID *string
	var pendingDue *bool
	err = res.QueryRow().Scan(&ev.currency, &ev.startsAt, &ev.holdMinutes, &ev.now, &open, &pendingID, &pendingDue)
	if errors.Is(err, pgx.ErrNoRows) {
		return ev, nil, web.Errorf(http.StatusNotFound, "event_not_found", "no such event")
	}
	if err != nil {
		return ev, nil, storeError("read event", err)
	}
	if !open {
		return ev, nil, web.Errorf(http.StatusConflict, "sale_closed", "the sale of this event is not open")
	}
	if pendingID != nil {
		if !*pendingDue {
			e := web.Errorf(http.StatusConflict, "pending_checkout", "you already have a checkout in progress for this event")
			e.Details = map[string]any{"reservation": *pendingID}
			return ev, nil, e
		}
		ev.pendingID = *pendingID
	}
	rows, err := res.Query()
	if err != nil {
		return ev, nil, storeError("find expired holds", err)
	}
	if ev.expiredHolds, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return ev, nil, storeError("find expired holds", err)
	}
	return ev, nil, nil
}

// reclaimExpired ends expired holds on the wanted seats, reservation row
// first, before any seat is locked: the same lock order as the expiry
// worker, so the two never deadlock.
func (h *holdsPlane) reclaimExpired(ctx context.Context, tx pgx.Tx, ids []string) ([]*released, error) {
	var out []*released
	for _, id := range ids {
		r, err := endReservation(ctx, tx, id, StatusExpired, true, "")
		if errors.Is(err, errNotPending) {
			continue // someone else ended it first
		}
		if err != nil {
			return nil, storeError("expire hold inline", err)
		}
		h.m.reclaimed.WithLabelValues("inline").Inc()
		out = append(out, r)
	}
	return out, nil
}

// lockedSeat is a seat row locked for the hold.
type lockedSeat struct {
	id        int64
	section   string
	row, num  int
	status    string
	basePrice int64
}

// lockSeats locks the cart's seat rows and, in the same round trip, reads
// how full their sections are (for the scarcity multiplier).
func (h *holdsPlane) lockSeats(ctx context.Context, tx pgx.Tx, event string, seats []int64) ([]lockedSeat, []occupancy, error) {
	start := time.Now()
	b := &pgx.Batch{}
	// ORDER BY id puts the row locks under the sort: every hold locks in
	// ascending id order, so overlapping carts cannot deadlock.
	b.Queue(`
SELECT id, section_id, row_num, seat_num, status, base_price FROM seats
WHERE event_id = $1 AND id = ANY($2) ORDER BY id FOR UPDATE`, event, seats)
	b.Queue(`
SELECT o.section_id, s.seat_count, sum(o.taken)
FROM section_occupancy o JOIN sections s ON s.event_id = o.event_id AND s.id = o.section_id
WHERE o.event_id = $1 AND o.section_id IN (SELECT section_id FROM seats WHERE event_id = $1 AND id = ANY($2))
GROUP BY o.section_id, s.seat_count`, event, seats)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	rows, err := res.Query()
	if err != nil {
		return nil, nil, storeError("lock seats", err)
	}
	locked, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (lockedSeat, error) {
		var s lockedSeat
		err := row.Scan(&s.id, &s.section, &s.row, &s.num, &s.status, &s.basePrice)
		return s, err
	})
	if err != nil {
		return nil, nil, storeError("lock seats", err)
	}
	h.m.lockWait.Observe(time.Since(start).Seconds())
	rows, err = res.Query()
	if err != nil {
		return nil, nil, storeError("read occupancy", err)
	}
	occ, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (occupancy, error) {
		var o occupancy
		err := row.Scan(&o.section, &o.total, &o.taken)
		return o, err
	})
	if err != nil {
		return nil, nil, storeError("read occupancy", err)
	}
	if len(locked) != len(seats) {
		var unknown []int64
		for _, id := range seats {
			if !slices.ContainsFunc(locked, func(s lockedSeat) bool { return s.id == id }) {
				unknown = append(unknown, id)
			}
		}
		e := web.BadRequest("seats %v are not seats of this event", unknown)
		e.Code, e.Details = "unknown_seats", map[string]any{"seats": unknown}
		return nil, nil, e
	}
	var taken []int64
	for _, s := range locked {
		if s.status != SeatAvailable {
			taken = append(taken, s.id)
		}
	}
	if len(taken) > 0 {
		return nil, nil, seatsTaken(taken)
	}
	return locked, occ, nil
}

// occupancy is how many seats of a section are held or sold.
type occupancy struct {
	section      string
	total, taken int64
}

func seatsTaken(seats []int64) *web.Error {
	e := web.Errorf(http.StatusConflict, "seats_unavailable", "seats %v are not available", seats)
	e.Details = map[string]any{"seats": seats}
	return e
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
		if err := h.admission.Release(ctx, r.event, r.user); err != nil {
			h.log.Debug("release admission lease", "err", err)
		}
	}
}

// storeError maps PostgreSQL failures to a retryable 503 (lock and
// statement timeouts, deadlocks, a server starting, stopping or out of
// connections, lost connections) or, for constraint violations that mean
// "taken", a 409. Anything else is a 500.
func storeError(what string, err error) error {
	var apiErr *web.Error
	if errors.As(err, &apiErr) {
		return err
	}
	// Connection failures first: a refused connection wraps the server's
	// own PgError (57P03 "the database system is starting up"), which is
	// no bug of ours.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || pgconn.SafeToRetry(err) || isConnError(err) {
		return web.Unavailable(time.Second, "the database is unavailable; retry")
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if retryableState(pgErr.Code) {
			return web.Unavailable(time.Second, "the database is busy; retry")
		}
		switch pgErr.Code {
		case "23505":
			switch pgErr.ConstraintName {
			case "one_live_owner_per_seat":
				return web.Errorf(http.StatusConflict, "seats_unavailable", "a seat of the cart was taken")
			case "one_active_checkout":
				return web.Errorf(http.StatusConflict, "pending_checkout", "you already have a checkout in progress for this event")
			case "one_active_stay_checkout":
				return web.Errorf(http.StatusConflict, "pending_checkout", "you already have a checkout in progress at this hotel")
			}
		case "23514":
			if pgErr.ConstraintName == "room_nights_no_overbooking" {
				// The database refused an overbooking the code let through.
				return web.Errorf(http.StatusConflict, "rooms_unavailable", "not enough rooms free on every night")
			}
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// retryableState tells whether a SQLSTATE means "try again": lock and
// statement timeouts, serialization failures and deadlocks, a server that
// is shutting down, restarting or starting (57P01-57P03, 57P05 idle
// session timeout), out of connections or resources (class 53), and
// connection exceptions (class 08).
func retryableState(code string) bool {
	switch code {
	case "55P03", "57014", "40001", "40P01", "57P01", "57P02", "57P03", "57P05", "58030":
		return true
	}
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53")
}

func isConnError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || errors.Is(err, pgx.ErrTxClosed)
}
