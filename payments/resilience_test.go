package payments_test

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/payments"
)

// The webhook and the expiry worker race for the same reservation, 200
// times: the hold's deadline is set a few milliseconds either side of the
// moment the sandbox delivers the success. Every round ends PAID, or
// EXPIRED with its payment refunded; never a seat both sold and released.
func TestWebhookRacesExpiry(t *testing.T) {
	t.Parallel()
	const rounds = 200
	s := startSale(t, rounds, func(c *config.Config) {
		c.Booking.ExpiryInterval = 5 * time.Millisecond
		c.Payments.WorkerInterval = 20 * time.Millisecond
	})
	type round struct{ res, payment string }
	all := make([]round, rounds)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range all {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, res, v, _ := s.pending(1)
			// The deadline lands from 50 ms before to 750 ms after the
			// confirm: the webhook and the expiry worker get the row lock in
			// either order (about 40 % of rounds end paid here).
			ms := rand.IntN(800) - 50
			_, err := s.db.Exec(context.Background(),
				`UPDATE reservations SET expires_at = clock_timestamp() + make_interval(secs => $2) WHERE id = $1`, res, float64(ms)/1000)
			require.NoError(t, err)
			s.confirm(v)
			all[i] = round{res, v.ID}
		}()
	}
	wg.Wait()
	paid, refunded := 0, 0
	for _, r := range all {
		testenv.Eventually(t, 30*time.Second, func() bool {
			st, ps := s.reservationStatus(r.res), s.paymentStatus(r.payment)
			return (st == "PAID" && ps == payments.StatusSucceeded && s.tickets(r.res) == 1) ||
				(st == "EXPIRED" && ps == payments.StatusRefunded)
		}, "round %s settles", r.res)
		if s.reservationStatus(r.res) == "PAID" {
			paid++
		} else {
			refunded++
		}
		require.EqualValues(t, 1, s.charges(r.res))
	}
	t.Logf("%d paid, %d expired and refunded", paid, refunded)
	s.requireSeatsConsistent()
	require.Zero(t, s.scalar(`SELECT count(*) FROM tickets t JOIN reservations r ON r.id = t.reservation_id WHERE r.status <> 'PAID'`),
		"no ticket for an unpaid reservation")
}

// The provider times out after creating the intent: the start answers 503,
// the retry with the same key gets the same intent, and one charge.
func TestProviderTimeoutRetrySameIntent(t *testing.T) {
	t.Parallel()
	s := startSale(t, 5, func(c *config.Config) {
		c.Payments.Sandbox.Faults = []string{"create_timeout=1"}
		c.Payments.RecoveryAfter = time.Hour // the client's retry, not the worker
	})
	b, res := s.hold(1)
	status, _, body := s.pay(b, res, "k")
	require.Equal(t, 503, status, body)
	require.Equal(t, payments.StatusInitializing, s.text(`SELECT status FROM payments WHERE reservation_id = $1`, res))
	require.EqualValues(t, 1, s.intents(res), "the provider acted before it timed out")
	status, v, body := s.pay(b, res, "k")
	require.Equal(t, 201, status, body)
	require.EqualValues(t, 1, s.intents(res), "the retry got the same intent")
	s.confirm(v)
	s.waitFulfilled(res, 1)
	require.EqualValues(t, 1, s.charges(res))
}

// The process dies between creating the intent and saving its reference
// (the start never finishes, and nobody retries): the recovery worker
// finishes it with the same key, and the buyer's retry then answers it.
func TestRecoveryFinishesInterruptedStart(t *testing.T) {
	t.Parallel()
	s := startSale(t, 5, func(c *config.Config) {
		c.Payments.Sandbox.Faults = []string{"create_timeout=1"}
		c.Payments.RecoveryAfter = 500 * time.Millisecond
	})
	b, res := s.hold(1)
	status, _, _ := s.pay(b, res, "k")
	require.Equal(t, 503, status)
	pid := s.text(`SELECT id::text FROM payments WHERE reservation_id = $1`, res)
	testenv.Eventually(t, 20*time.Second, func() bool { return s.paymentStatus(pid) == payments.StatusPending }, "recovered")
	require.EqualValues(t, 1, s.intents(res))
	status, v, body := s.pay(b, res, "k")
	require.Equal(t, 201, status, body)
	require.Equal(t, pid, v.ID)
	s.confirm(v)
	s.waitFulfilled(res, 1)
	require.EqualValues(t, 1, s.charges(res))
}

// The relay crashes between publishing an event and marking it: the event
// goes out again and fulfillment sees it twice. One ticket per seat, one
// inbox row; and with the inbox row gone too, the constraint still holds.
func TestRelayRedeliveryIssuesOneTicketPerSeat(t *testing.T) {
	t.Parallel()
	s := startSale(t, 5, nil)
	_, res, v, _ := s.pending(3)
	s.confirm(v)
	s.waitFulfilled(res, 3)
	id := s.scalar(`SELECT id FROM outbox WHERE kind = 'order.paid' AND aggregate_id = $1`, res)
	for _, forget := range []string{``, `DELETE FROM payment_inbox WHERE event_id = $1`} {
		if forget != "" {
			_, err := s.db.Exec(context.Background(), forget, id)
			require.NoError(t, err)
		}
		// What a crash before the mark leaves: published, unmarked.
		_, err := s.db.Exec(context.Background(), `UPDATE outbox SET published_at = NULL WHERE id = $1`, id)
		require.NoError(t, err)
		testenv.Eventually(t, 10*time.Second, func() bool {
			return s.scalar(`SELECT count(*) FROM outbox WHERE id = $1 AND published_at IS NOT NULL`, id) == 1 &&
				s.scalar(`SELECT count(*) FROM payment_inbox WHERE event_id = $1`, id) == 1
		}, "redelivered and handled")
		require.EqualValues(t, 3, s.tickets(res))
	}
	require.Equal(t, 1, s.notes.count(res))
}

// deadStripe is a local address nobody listens on: the Stripe adapter's
// calls fail at once, as when the provider is down.
func deadStripe(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

func failingPrimary(t *testing.T, c *config.Config) {
	c.Payments.Primary, c.Payments.Fallback = "stripe", "sandbox"
	c.Payments.Stripe = config.PaymentsStripe{SecretKey: "sk_test_123", APIURL: deadStripe(t), WebhookSecrets: []string{"whsec_x"}}
	c.Payments.BreakerMinRequests, c.Payments.BreakerOpenFor = 3, time.Hour
}

// The primary provider fails: its breaker opens after the configured share
// of failures and new intents go to the fallback; payments started with
// the primary stay with it.
func TestBreakerFallsBackToSecondProvider(t *testing.T) {
	t.Parallel()
	s := startSale(t, 10, func(c *config.Config) {
		failingPrimary(t, c)
		// The recovery worker retries a failed start through the same
		// provider; on a slow machine, a retry of the first start between
		// the three below was a third failure before the third start, which
		// then went to the fallback (201, not 503). Only the starts count
		// here.
		c.Payments.RecoveryAfter = time.Hour
	})
	var first string
	for i := 0; i < 3; i++ {
		b, res := s.hold(1)
		status, _, body := s.pay(b, res, "k")
		require.Equal(t, 503, status, body)
		if i == 0 {
			first = res
		}
	}
	b, res := s.hold(1)
	status, v, body := s.pay(b, res, "k")
	require.Equal(t, 201, status, body)
	require.Equal(t, "sandbox", v.Provider, "the breaker is open: the fallback takes new intents")
	s.confirm(v)
	s.waitFulfilled(res, 1)
	require.Equal(t, "stripe", s.text(`SELECT provider FROM payments WHERE reservation_id = $1`, first),
		"a started payment stays with its provider")
	require.Contains(t, scrape(t, s), `presenced_payments_breaker_open{provider="stripe"} 1`)
}

// Both providers failing: a start releases the hold at once (auto-release
// mode) instead of keeping the seats locked, and counts it.
func TestBothProvidersDownReleasesHolds(t *testing.T) {
	t.Parallel()
	s := startSale(t, 10, func(c *config.Config) {
		failingPrimary(t, c)
		c.Payments.Sandbox.Faults = []string{"create_error=1"}
	})
	for i := 0; i < 6; i++ {
		b, res := s.hold(1)
		status, _, body := s.pay(b, res, "k")
		require.Equal(t, 503, status, body)
	}
	// The recovery loop retries the failed starts through the same
	// breakers, so the sandbox's may open before the sixth start: count
	// from here, once both are open.
	before := scrape(t, s)
	require.Contains(t, before, `presenced_payments_breaker_open{provider="stripe"} 1`)
	require.Contains(t, before, `presenced_payments_breaker_open{provider="sandbox"} 1`)
	b, res := s.hold(1)
	status, _, body := s.pay(b, res, "k")
	require.Equal(t, 503, status, body)
	require.Contains(t, body, payments.CodeProvidersUnavailable)
	require.Equal(t, "CANCELLED", s.reservationStatus(res))
	require.Zero(t, s.scalar(`SELECT count(*) FROM seats WHERE reservation_id = $1`, res), "the seats are free again")
	require.Zero(t, s.scalar(`SELECT count(*) FROM payments WHERE reservation_id = $1`, res))
	const early = "presenced_payments_holds_released_early_total"
	require.Equal(t, metricValue(t, before, early)+1, metricValue(t, scrape(t, s), early), "the release is counted")
	_ = b
}

// metricValue reads an unlabelled series from a scrape.
func metricValue(t *testing.T, scrape, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	t.Fatalf("no series %s in the scrape", name)
	return 0
}

// The fraud check, by amount (1,500 a seat): a blocked payment gets 402
// fraud_declined and nothing is stored; a reviewed one is charged and
// flagged; the rest go ahead.
func TestFraudBlockAndReview(t *testing.T) {
	t.Parallel()
	s := startSale(t, 10, func(c *config.Config) {
		c.Payments.Fraud.BlockOver, c.Payments.Fraud.ReviewOver = 4000, 2500
	})
	b, res := s.hold(3)
	status, _, body := s.pay(b, res, "k")
	require.Equal(t, 402, status, body)
	require.Contains(t, body, payments.CodeFraudDeclined)
	require.Zero(t, s.scalar(`SELECT count(*) FROM payments WHERE reservation_id = $1`, res))
	_, res, v, _ := s.pending(2)
	require.Equal(t, "review", s.text(`SELECT fraud_verdict FROM payments WHERE id = $1`, v.ID))
	s.confirm(v)
	s.waitFulfilled(res, 2)
	_, _, v, _ = s.pending(1)
	require.Equal(t, "accept", s.text(`SELECT fraud_verdict FROM payments WHERE id = $1`, v.ID))
}

func scrape(t *testing.T, s *sale) string {
	t.Helper()
	status, body := s.do("GET", "/metrics", nil, nil)
	require.Equal(t, 200, status)
	return body
}
