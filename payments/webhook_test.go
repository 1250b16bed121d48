package payments_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/payments"
)

// pending starts a payment of a fresh hold and returns the pieces a
// webhook about it needs.
func (s *sale) pending(seats int) (buyer, string, payments.PaymentView, string) {
	s.t.Helper()
	b, res := s.hold(seats)
	status, v, body := s.pay(b, res, "k-"+res)
	require.Equal(s.t, 201, status, body)
	ref := s.text(`SELECT provider_ref FROM payments WHERE id = $1`, v.ID)
	return b, res, v, ref
}

// The webhook contract, each case against real PostgreSQL: signature and
// timestamp first, then dedupe by event id and content, then the payment.
func TestWebhookContract(t *testing.T) {
	t.Parallel()
	s := startSale(t, 40, nil)
	now := time.Now()
	_, res, v, ref := s.pending(2)
	goodID := "evt_" + uuid.NewString()
	good := event(goodID, "payment_intent.succeeded", ref, v.ID, v.Amount, "eur")

	status, body := s.webhook(good, now, "whsec_attacker_secret_00")
	require.Equal(t, 401, status, body)
	require.Contains(t, body, payments.CodeBadSignature)
	status, _ = s.webhook(good, now.Add(-6*time.Minute))
	require.Equal(t, 401, status, "a stale timestamp")
	status, _ = s.webhook([]byte(`{"junk":true}`), now)
	require.Equal(t, 400, status, "signed junk")
	status, _ = s.do(http.MethodPost, "/v1/payments/webhooks/nope", nil, map[string]string{})
	require.Equal(t, 404, status, "unknown provider")
	require.Equal(t, payments.StatusPending, s.paymentStatus(v.ID), "nothing moved")

	// Rotation: the provider signs with the new and the current secret.
	status, body = s.webhook(good, now, append([]string{"whsec_next_secret_000000"}, s.cfg.Payments.Sandbox.WebhookSecrets...)...)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, payments.OutcomePaid)

	// The same event 100 times at once: all 200, nothing sold twice.
	var wg sync.WaitGroup
	outcomes := make([]string, 100)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, b := s.webhook(good, time.Now())
			outcomes[i] = fmt.Sprintf("%d %s", st, b)
		}()
	}
	wg.Wait()
	for _, o := range outcomes {
		require.Contains(t, o, `200 {"outcome":"duplicate"}`)
	}
	// The same id with other content is a red flag, not a retry.
	forged := event(goodID, "payment_intent.succeeded", ref, v.ID, v.Amount+1, "eur")
	status, body = s.webhook(forged, now)
	require.Equal(t, 409, status, body)
	require.Contains(t, body, payments.CodeWebhookConflict)
	// Another event id for the same success (charge.succeeded after
	// payment_intent.succeeded): a no-op.
	status, body = s.webhook(event("evt_"+uuid.NewString(), "charge.succeeded", ref, v.ID, v.Amount, "eur"), now)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, payments.OutcomeDuplicate)

	s.waitFulfilled(res, 2)
	require.EqualValues(t, 1, s.scalar(`SELECT count(*) FROM payment_webhook_events WHERE payment_id = $1 AND outcome = 'paid'`, v.ID),
		"exactly one PAID transition")
	testenv.Eventually(t, 5*time.Second, func() bool {
		return s.scalar(`SELECT count(*) FROM payment_notifications WHERE reservation_id = $1 AND status = 'SENT'`, res) == 1
	}, "notification sent")
	require.Equal(t, 1, s.notes.count(res), "one notification")
	require.EqualValues(t, 2, s.tickets(res), "one set of tickets")

	// Wrong amount and wrong currency never sell: the charge is refunded.
	for _, c := range []struct {
		name     string
		amount   func(int64) int64
		currency string
	}{{"amount", func(a int64) int64 { return a - 1 }, "eur"}, {"currency", func(a int64) int64 { return a }, "usd"}} {
		_, res, v, ref := s.pending(1)
		status, body := s.webhook(event("evt_"+uuid.NewString(), "payment_intent.succeeded", ref, v.ID, c.amount(v.Amount), c.currency), now)
		require.Equal(t, 200, status, body)
		require.Contains(t, body, payments.OutcomeMismatch, c.name)
		require.Equal(t, "PENDING_PAYMENT", s.reservationStatus(res), c.name)
		require.Contains(t, []string{payments.StatusRefundRequired, payments.StatusRefunded}, s.paymentStatus(v.ID), c.name)
	}

	// Out of order: the intent's "created" event after its success.
	_, res2, v2, ref2 := s.pending(1)
	// A declined card first: recorded; the intent can still succeed.
	status, body = s.webhook(event("evt_"+uuid.NewString(), "payment_intent.payment_failed", ref2, v2.ID, v2.Amount, "eur"), now)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, payments.OutcomeFailed)
	require.Equal(t, payments.StatusPending, s.paymentStatus(v2.ID))
	status, body = s.webhook(event("evt_"+uuid.NewString(), "payment_intent.succeeded", ref2, v2.ID, v2.Amount, "eur"), now)
	require.Equal(t, 200, status, body)
	status, body = s.webhook(event("evt_"+uuid.NewString(), "payment_intent.created", ref2, v2.ID, v2.Amount, "eur"), now)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, payments.OutcomeIgnored)
	require.Equal(t, "PAID", s.reservationStatus(res2))

	// Late: the hold expired before the money came. It is not sold; the
	// money goes back.
	_, res3, v3, ref3 := s.pending(1)
	_, err := s.db.Exec(context.Background(), `UPDATE reservations SET expires_at = now() - interval '1 second' WHERE id = $1`, res3)
	require.NoError(t, err)
	status, body = s.webhook(event("evt_"+uuid.NewString(), "payment_intent.succeeded", ref3, v3.ID, v3.Amount, "eur"), now)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, payments.OutcomeRefundRequired)
	require.NotEqual(t, "PAID", s.reservationStatus(res3))

	// Unknown payment: recorded as an orphan charge, refunded unless
	// claimed.
	orphanRef := "pi_unknown_" + uuid.NewString()[:8]
	status, body = s.webhook(event("evt_"+uuid.NewString(), "payment_intent.succeeded", orphanRef, uuid.NewString(), 100, "eur"), now)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, payments.OutcomeOrphan)
	require.EqualValues(t, 1, s.scalar(`SELECT count(*) FROM payment_orphan_charges WHERE provider_ref = $1`, orphanRef))

	// A success whose metadata names a payment of ours for a charge that is
	// not its intent: money taken for nothing sold, recorded as an orphan
	// (refunded unless claimed), the payment untouched.
	_, _, v5, _ := s.pending(1)
	strayRef := "pi_stray_" + uuid.NewString()[:8]
	status, body = s.webhook(event("evt_"+uuid.NewString(), "payment_intent.succeeded", strayRef, v5.ID, v5.Amount, "eur"), now)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, payments.OutcomeMismatch)
	require.EqualValues(t, 1, s.scalar(`SELECT count(*) FROM payment_orphan_charges WHERE provider_ref = $1`, strayRef))
	require.Equal(t, payments.StatusPending, s.paymentStatus(v5.ID))

	// The sandbox's confirm step: an intent id no intent can have is not
	// found (not a retryable 503 a client would repeat forever).
	for _, id := range []string{"%FF%FE", "pi%00x", strings.Repeat("p", 200)} {
		status, body = s.do(http.MethodPost, "/v1/sandbox/psp/intents/"+id+"/confirm", nil, payments.SandboxConfirm{ClientSecret: "secret_x"})
		require.Equal(t, 404, status, "%s: %s", id, body)
	}

	// A payment whose reference is not saved yet: 503, the provider retries.
	_, res4 := s.hold(1)
	pid := uuid.NewString()
	_, err = s.db.Exec(context.Background(), `INSERT INTO payments (id, reservation_id, user_id, idempotency_key, provider, amount, currency, status, fraud_verdict)
		SELECT $1, id, user_id, 'early', 'sandbox', total, currency, 'INITIALIZING', 'accept' FROM reservations WHERE id = $2`, pid, res4)
	require.NoError(t, err)
	early := event("evt_"+uuid.NewString(), "payment_intent.succeeded", "pi_early", pid, 1500, "eur")
	status, body = s.webhook(early, now)
	require.Equal(t, 503, status, body)
	require.Contains(t, body, payments.CodePaymentNotReady)
	_, err = s.db.Exec(context.Background(), `UPDATE payments SET status = 'PENDING', provider_ref = 'pi_early' WHERE id = $1`, pid)
	require.NoError(t, err)
	status, body = s.webhook(early, now)
	require.Equal(t, 200, status, body, "the retry after the reference is saved")
	require.Contains(t, body, payments.OutcomePaid)
	s.requireSeatsConsistent()
}

// Faults of the sandbox PSP end to end: the success delivered 100 times
// (concurrently, by the delivery loop), twice, out of order, early (before
// our reference is saved), with a wrong amount. Each sale ends in exactly
// one charge, and the wrong amount in one charge and one refund.
func TestSandboxFaultsEndToEnd(t *testing.T) {
	t.Parallel()
	s := startSale(t, 20, nil)
	for _, faults := range [][]string{{"webhook_x100"}, {"webhook_twice", "webhook_out_of_order"}} {
		_, res, v, _ := s.pending(2)
		s.confirm(v, faults...)
		s.waitFulfilled(res, 2)
		testenv.Eventually(t, 20*time.Second, func() bool {
			return s.scalar(`SELECT count(*) FROM sandbox_deliveries WHERE payload::text LIKE '%' || $1 || '%' AND delivered_at IS NULL`, v.ID) == 0
		}, "every copy delivered")
		require.Equal(t, 1, s.notes.count(res), "%v: one notification", faults)
		require.EqualValues(t, 2, s.tickets(res), "%v: one set of tickets", faults)
		require.EqualValues(t, 1, s.charges(res), "%v: one charge", faults)
		require.EqualValues(t, 1, s.scalar(`SELECT count(*) FROM payment_webhook_events WHERE payment_id = $1 AND outcome = 'paid'`, v.ID))
	}
	_, res, v, _ := s.pending(1)
	s.confirm(v, "webhook_wrong_amount")
	testenv.Eventually(t, 20*time.Second, func() bool { return s.paymentStatus(v.ID) == payments.StatusRefunded }, "refunded")
	require.EqualValues(t, 1, s.charges(res))
	require.EqualValues(t, 1, s.scalar(`SELECT count(*) FROM sandbox_refunds r JOIN sandbox_intents i ON i.id = r.intent_id
		WHERE i.metadata->>'reservation_id' = $1`, res))
	require.Equal(t, "PENDING_PAYMENT", s.reservationStatus(res), "a wrong amount never sells")
	s.requireSeatsConsistent()
}

// webhook_early: the sandbox charges and sends its webhook as it creates
// the intent, before the start saved the reference; the receiver answers
// 503 until it has, the delivery is retried, and the sale completes.
func TestEarlyWebhookIsRetried(t *testing.T) {
	t.Parallel()
	s := startSale(t, 5, func(c *config.Config) { c.Payments.Sandbox.Faults = []string{"webhook_early=1"} })
	_, res, v, _ := s.pending(1)
	s.waitFulfilled(res, 1)
	require.Equal(t, payments.StatusSucceeded, s.paymentStatus(v.ID))
	require.EqualValues(t, 1, s.charges(res))
}
