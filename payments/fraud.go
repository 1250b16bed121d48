package payments

import (
	"context"
	"slices"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/presenced/presenced/config"
)

const (
	// verdictUnchecked: the check failed or was too slow; the payment went
	// ahead (fail open) and says so.
	verdictUnchecked Verdict = "unchecked"
)

// sandboxRules is the built-in checker: lists of users, and thresholds.
type sandboxRules struct{ cfg config.PaymentsFraud }

func (r sandboxRules) Check(_ context.Context, in FraudInput) (Verdict, error) {
	switch {
	case slices.Contains(r.cfg.BlockUsers, in.User), r.cfg.BlockOver > 0 && in.Amount >= r.cfg.BlockOver:
		return VerdictBlock, nil
	case slices.Contains(r.cfg.ReviewUsers, in.User), r.cfg.ReviewOver > 0 && in.Amount >= r.cfg.ReviewOver:
		return VerdictReview, nil
	}
	return VerdictAccept, nil
}

// failOpen bounds a checker by a timeout and a breaker and turns every
// failure into an accepted, unchecked payment: a fraud-service blip must not
// block every sale (seed 003 accepts the brief chargeback risk).
type failOpen struct {
	inner   FraudChecker
	timeout time.Duration
	breaker *gobreaker.CircuitBreaker[Verdict]
	m       *metrics
}

func newFailOpen(inner FraudChecker, timeout time.Duration, m *metrics) *failOpen {
	return &failOpen{inner: inner, timeout: timeout, m: m,
		breaker: gobreaker.NewCircuitBreaker[Verdict](gobreaker.Settings{
			Name: "fraud", Interval: time.Minute, BucketPeriod: 6 * time.Second, Timeout: 30 * time.Second,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.Requests >= 20 && c.TotalFailures*2 >= c.Requests },
		})}
}

func (f *failOpen) Check(ctx context.Context, in FraudInput) Verdict {
	v, err := f.breaker.Execute(func() (Verdict, error) {
		ctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		return f.inner.Check(ctx, in)
	})
	if err != nil {
		f.m.fraud.WithLabelValues(string(verdictUnchecked)).Inc()
		return verdictUnchecked
	}
	f.m.fraud.WithLabelValues(string(v)).Inc()
	return v
}
