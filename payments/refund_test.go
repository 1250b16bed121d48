package payments_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/payments"
)

// The backstop of seed 003: a charge the provider reports for no payment of
// ours is refunded after the grace period. A refund that keeps failing
// joins the manual queue (a metric and a monitor) and is never dropped.
func TestOrphanChargesAreRefundedAndFailuresQueuedForPeople(t *testing.T) {
	t.Parallel()
	s := startSale(t, 5, func(c *config.Config) {
		c.Payments.OrphanRefundAfter = 300 * time.Millisecond
		c.Payments.RefundBackoff = 10 * time.Millisecond
		c.Payments.RefundManualAfter = 5
	})
	ctx := context.Background()
	now := time.Now()
	// What the provider charged: an intent in the sandbox's ledger that no
	// payment of ours knows (our process died before it stored one).
	charged := "pi_sb_orphan_" + uuid.NewString()[:8]
	_, err := s.db.Exec(ctx, `INSERT INTO sandbox_intents (id, idempotency_key, client_secret, amount, currency, metadata, status, charged_at)
		VALUES ($1, $2, 'secret', 4500, 'eur', '{}', 'succeeded', now())`, charged, uuid.NewString())
	require.NoError(t, err)
	status, body := s.webhook(event("evt_"+uuid.NewString(), "charge.succeeded", charged, "", 4500, "eur"), now)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, payments.OutcomeOrphan)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return s.text(`SELECT status FROM payment_orphan_charges WHERE provider_ref = $1`, charged) == "REFUNDED"
	}, "orphan refunded")
	require.EqualValues(t, 1, s.scalar(`SELECT count(*) FROM sandbox_refunds WHERE intent_id = $1`, charged))

	// A payment owed a refund whose provider keeps refusing it.
	_, res, v, _ := s.pending(1)
	_, err = s.db.Exec(ctx, `UPDATE payments SET status = 'REFUND_REQUIRED', provider_ref = 'pi_gone', charged_at = now() WHERE id = $1`, v.ID)
	require.NoError(t, err)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return s.scalar(`SELECT count(*) FROM payments WHERE id = $1 AND manual AND attempts >= 5`, v.ID) == 1
	}, "in the manual queue after 5 failures")
	require.Equal(t, payments.StatusRefundRequired, s.paymentStatus(v.ID), "still owed, never dropped")
	require.Contains(t, scrape(t, s), `presenced_payments_refunds_total{outcome="manual"}`)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return scrapeHas(t, s, `presenced_payments_monitor_violations{check="money_dead_letters"} 1`)
	}, "the monitor reports it")
	require.Equal(t, "PENDING_PAYMENT", s.reservationStatus(res))
}

func scrapeHas(t *testing.T, s *sale, line string) bool {
	t.Helper()
	status, body := s.do("GET", "/metrics", nil, nil)
	return status == 200 && slices.Contains(strings.Split(body, "\n"), line)
}
