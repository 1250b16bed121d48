package payments

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/internal/promlabels"
)

// metrics are the payments module's collectors, shared by its parts. No
// label carries a user, reservation, payment or ticket id.
type metrics struct {
	starts          *prometheus.CounterVec
	webhooks        *prometheus.CounterVec
	providerCalls   *prometheus.CounterVec
	providerLatency *prometheus.HistogramVec
	breakerOpen     *prometheus.GaugeVec
	fraud           *prometheus.CounterVec
	releasedEarly   prometheus.Counter
	recovered       prometheus.Counter
	tickets         prometheus.Counter
	fulfillErrors   prometheus.Counter
	notifications   *prometheus.CounterVec
	refunds         *prometheus.CounterVec
	monitor         *prometheus.GaugeVec
	fulfillPending  prometheus.Gauge
}

// webhookOutcomes label the webhooks counter: the answers' outcomes and
// the refusals.
var webhookOutcomes = []string{OutcomePaid, OutcomeRefundRequired, OutcomeDuplicate, OutcomeMismatch, OutcomeOrphan,
	OutcomeFailed, OutcomeRefunded, OutcomeIgnored, "bad_signature", "conflict", "error", "malformed", "not_ready"}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_payments_starts_total",
			Help: "Payment starts by HTTP status (201 created, 200 replayed, 402 fraud, 409 not payable, 503).",
		}, []string{"code"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_payments_webhooks_total",
			Help: "Provider webhooks by outcome (paid, refund_required, duplicate, conflict, not_ready, bad_signature, ...).",
		}, []string{"provider", "outcome"}),
		providerCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_payments_provider_calls_total",
			Help: "Calls to payment providers by operation and outcome (ok, timeout, refused, error, breaker_open).",
		}, []string{"provider", "op", "outcome"}),
		providerLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "presenced_payments_provider_call_seconds", Help: "Latency of intent creation by provider.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2, 4, 8},
		}, []string{"provider"}),
		breakerOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "presenced_payments_breaker_open", Help: "1 while a provider's circuit breaker is open in this process.",
		}, []string{"provider"}),
		fraud: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_payments_fraud_verdicts_total",
			Help: "Pre-charge fraud verdicts (unchecked: the check failed and the payment went ahead).",
		}, []string{"verdict"}),
		releasedEarly: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_payments_holds_released_early_total",
			Help: "Holds released at payment start because every provider was failing (auto-release mode).",
		}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_payments_recovered_total", Help: "INITIALIZING payments finished by the recovery worker.",
		}),
		tickets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_payments_tickets_issued_total", Help: "Tickets issued by fulfillment.",
		}),
		fulfillErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_payments_fulfillment_errors_total",
			Help: "Paid orders whose fulfillment failed and will be retried (never dropped).",
		}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_payments_notifications_total", Help: "Ticket notifications by outcome (sent, retry, dead).",
		}, []string{"outcome"}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_payments_refunds_total", Help: "Refund attempts by outcome (refunded, failed, manual).",
		}, []string{"outcome"}),
		monitor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "presenced_payments_monitor_violations",
			Help: "Correctness monitors, each must read 0 (see `presenced check`).",
		}, []string{"check"}),
		fulfillPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_payments_fulfillment_pending",
			Help: "Events delivered to the fulfillment consumers and not yet acknowledged (consumer lag).",
		}),
	}
	for _, c := range []prometheus.Collector{m.starts, m.webhooks, m.providerCalls, m.providerLatency, m.breakerOpen,
		m.fraud, m.releasedEarly, m.recovered, m.tickets, m.fulfillErrors, m.notifications, m.refunds, m.monitor, m.fulfillPending} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every series alerts may use exists from the start, at zero; those
	// labelled by provider are made when the providers are (newRouter).
	counters := func(v *prometheus.CounterVec) func(...string) { return func(lv ...string) { v.WithLabelValues(lv...) } }
	promlabels.Init(counters(m.starts), []string{"200", "201", "400", "401", "402", "404", "409", "422", "500", "502", "503"})
	promlabels.Init(counters(m.fraud), []string{string(VerdictAccept), string(VerdictReview), string(VerdictBlock), string(verdictUnchecked)})
	promlabels.Init(counters(m.notifications), []string{"sent", "retry", "dead"})
	promlabels.Init(counters(m.refunds), []string{"refunded", "failed", "manual"})
	return m, nil
}
