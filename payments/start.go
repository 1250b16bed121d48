package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sony/gobreaker/v2"

	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/payments/ticketcode"
)

// apiPlane serves payment starts and tickets on the main pool.
type apiPlane struct {
	db      *pgxpool.Pool
	booking Booking
	router  *router
	fraud   *failOpen
	sealer  *ticketcode.Sealer
	m       *metrics
	log     *slog.Logger
}

// retryAfter is the base of the jittered Retry-After of a start that could
// not reach its provider: the retry finds the same payment and intent.
const retryAfter = 2 * time.Second

// storePhase bounds each PostgreSQL step of a payment start (the read by
// key, the first transaction, the save of the intent) on the client side.
// The server's lock_timeout ends waits it sees; a half-open link, where
// the server never sees the query, is ended only by this deadline, so the
// client gets its 503 in seconds instead of waiting on TCP.
const storePhase = 5 * time.Second

// payment is a payments row as the start and recovery paths need it.
type payment struct {
	ID          string
	Reservation string
	User        string
	Key         string
	Provider    string
	Status      string
	Amount      int64
	Currency    string
	Response    []byte
}

const paymentCols = `id::text, reservation_id::text, user_id, idempotency_key, provider, status, amount, currency, response`

func scanPayment(row pgx.Row) (payment, error) {
	var p payment
	err := row.Scan(&p.ID, &p.Reservation, &p.User, &p.Key, &p.Provider, &p.Status, &p.Amount, &p.Currency, &p.Response)
	return p, err
}

// start runs a payment start: find the payment of this key (or of this
// reservation), or create one in a first transaction; then get its intent
// outside any transaction, and save it in a second. It answers the stored
// response and whether it was a replay.
func (a *apiPlane) start(ctx context.Context, user, reservation, key string) ([]byte, bool, error) {
	for attempt := 0; ; attempt++ {
		p, found, err := a.byKey(ctx, user, key)
		if err != nil {
			return nil, false, unavailable("read payment", err)
		}
		if found {
			if p.Reservation != reservation {
				return nil, false, ErrKeyReused
			}
			if p.Status != StatusInitializing {
				return p.Response, true, nil
			}
			body, err := a.finish(ctx, p)
			return body, true, err
		}
		p, err = a.create(ctx, user, reservation, key)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			if attempt == 0 {
				continue // a concurrent start won: answer its payment
			}
			return nil, false, unavailable("store payment", err)
		}
		if err != nil {
			return nil, false, err
		}
		if p.Status != StatusInitializing {
			return p.Response, true, nil // the reservation's live payment
		}
		body, err := a.finish(ctx, p)
		return body, false, err
	}
}

func (a *apiPlane) byKey(ctx context.Context, user, key string) (payment, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, storePhase)
	defer cancel()
	p, err := scanPayment(a.db.QueryRow(ctx, `SELECT `+paymentCols+` FROM payments WHERE user_id = $1 AND idempotency_key = $2`, user, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return payment{}, false, nil
	}
	return p, err == nil, err
}

// create is the first transaction: lock the reservation, check it can be
// paid, score it, pick a provider, and store the payment with its outbox
// event. A reservation with a live payment answers that payment.
func (a *apiPlane) create(ctx context.Context, user, reservation, key string) (payment, error) {
	ctx, cancel := context.WithTimeout(ctx, storePhase)
	defer cancel()
	tx, err := a.db.Begin(ctx)
	if err != nil {
		return payment{}, unavailable("begin payment", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
		return payment{}, unavailable("begin payment", err)
	}
	co, err := a.booking.LockCheckout(ctx, tx, reservation)
	if errors.Is(err, ErrNoReservation) || (err == nil && co.User != user) {
		return payment{}, ErrNoReservation
	}
	if err != nil {
		return payment{}, unavailable("lock reservation", err)
	}
	live, err := scanPayment(tx.QueryRow(ctx, `SELECT `+paymentCols+` FROM payments
		WHERE reservation_id = $1 AND status IN ('INITIALIZING', 'PENDING', 'SUCCEEDED')`, reservation))
	switch {
	case err == nil && live.Status == StatusSucceeded:
		return payment{}, ErrReservationPaid
	case err == nil:
		return live, nil // started under another key: the same intent
	case !errors.Is(err, pgx.ErrNoRows):
		return payment{}, unavailable("read payments", err)
	}
	if err := payable(co); err != nil {
		return payment{}, err
	}
	verdict := VerdictAccept
	if a.fraud != nil {
		// Scored under the reservation's row lock: the check is bounded by
		// payments.fraud.timeout (200 ms), and only this reservation's
		// expiry or webhook could wait on it.
		verdict = a.fraud.Check(ctx, FraudInput{User: user, Event: co.Event, Amount: co.Total, Currency: co.Currency})
	}
	if verdict == VerdictBlock {
		return payment{}, ErrFraudDeclined
	}
	provider, err := a.router.pick()
	if errors.Is(err, errAllProvidersDown) {
		return payment{}, a.releaseEarly(ctx, tx, reservation)
	}
	p := payment{ID: uuid.NewString(), Reservation: reservation, User: user, Key: key, Provider: provider,
		Status: StatusInitializing, Amount: co.Total, Currency: co.Currency}
	if _, err := tx.Exec(ctx, `
INSERT INTO payments (id, reservation_id, user_id, idempotency_key, provider, amount, currency, status, fraud_verdict)
VALUES ($1, $2, $3, $4, $5, $6, $7, 'INITIALIZING', $8)`,
		p.ID, reservation, user, key, provider, p.Amount, p.Currency, string(verdict)); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return payment{}, err // a concurrent start won: the caller answers its payment
		}
		return payment{}, unavailable("store payment", err)
	}
	if err := outbox.Add(ctx, tx, KindPaymentInitialized, p.ID, map[string]string{
		"payment": p.ID, "reservation": reservation, "provider": provider, "fraud": string(verdict)}); err != nil {
		return payment{}, unavailable("record payment", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return payment{}, unavailable("commit payment", err)
	}
	return p, nil
}

// payable refuses a checkout that can no longer take money.
func payable(co Checkout) error {
	switch {
	case co.State == CheckoutPaid:
		return ErrReservationPaid
	case co.State == CheckoutCancelled:
		return ErrReservationCancelled
	case co.State == CheckoutExpired || co.Due:
		return ErrReservationExpired
	}
	return nil
}

// releaseEarly is seed 003's auto-release mode: with every provider
// failing, a hold that cannot be paid goes back to the sale now instead of
// locking its seats until it expires.
func (a *apiPlane) releaseEarly(ctx context.Context, tx pgx.Tx, reservation string) error {
	after, err := a.booking.ReleaseCheckout(ctx, tx, reservation)
	if err != nil {
		return unavailable("release hold", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return unavailable("release hold", err)
	}
	after(ctx)
	a.m.releasedEarly.Inc()
	a.log.Warn("every payment provider is failing: released a hold early")
	return &refusal.Error{Kind: ErrProvidersUnavailable, Msg: ErrProvidersUnavailable.Error(),
		RetryAfter: refusal.Jitter(30 * time.Second)}
}

// finish gets the intent of an INITIALIZING payment (the same one however
// often it is asked: the payment id is the provider's idempotency key) and
// saves it in the second transaction.
func (a *apiPlane) finish(ctx context.Context, p payment) ([]byte, error) {
	body, err := finishPayment(ctx, a.db, a.router, p)
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, errProviderRefused):
		return nil, fmt.Errorf("create payment intent: %w", err)
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests),
		errors.Is(err, errProviderTimeout):
		a.log.Warn("payment provider did not answer; the retry or the recovery worker finishes it", "err", err)
		return nil, refusal.Busy(retryAfter, "the payment provider did not answer; retry with the same Idempotency-Key")
	}
	a.log.Warn("create payment intent", "provider", p.Provider, "err", err)
	return nil, unavailable("create payment intent", err)
}

// finishPayment is shared by starts and the recovery worker.
func finishPayment(ctx context.Context, db *pgxpool.Pool, r *router, p payment) ([]byte, error) {
	in, err := r.create(ctx, p.Provider, IntentRequest{PaymentID: p.ID, Reservation: p.Reservation, Amount: p.Amount, Currency: p.Currency})
	if errors.Is(err, errProviderRefused) {
		_, _ = db.Exec(context.WithoutCancel(ctx), `UPDATE payments SET status = 'FAILED', last_error = $2, updated_at = clock_timestamp()
			WHERE id = $1 AND status = 'INITIALIZING'`, p.ID, err.Error())
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	view := PaymentView{ID: p.ID, Reservation: p.Reservation, Provider: p.Provider, Status: StatusPending,
		Amount: p.Amount, Currency: p.Currency, ClientSecret: in.ClientSecret, ConfirmURL: in.ConfirmURL}
	body, err := json.Marshal(view)
	if err != nil {
		return nil, err
	}
	var stored []byte
	ctx, cancel := context.WithTimeout(ctx, storePhase)
	defer cancel()
	err = db.QueryRow(ctx, `
UPDATE payments SET status = 'PENDING', provider_ref = $2, client_secret = $3, response = $4, updated_at = clock_timestamp()
WHERE id = $1 AND status = 'INITIALIZING' RETURNING response`, p.ID, in.Ref, in.ClientSecret, body).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		// Finished meanwhile (by the recovery worker or a retry, or a
		// webhook already moved it on): answer what was stored.
		err = db.QueryRow(ctx, `SELECT response FROM payments WHERE id = $1`, p.ID).Scan(&stored)
		if err == nil && stored == nil {
			err = fmt.Errorf("payment %s left INITIALIZING without a response", p.ID)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("save payment intent: %w", err)
	}
	return stored, nil
}

// unavailable wraps a store failure as a refusal to retry (busy), logged
// by the error handler's caller through the message.
func unavailable(what string, err error) error {
	e := refusal.Busy(retryAfter, "%s: the store is unavailable, retry", what)
	return fmt.Errorf("%s: %w: %w", what, err, e)
}
