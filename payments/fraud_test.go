package payments

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

type slowChecker struct{ err error }

func (s slowChecker) Check(ctx context.Context, _ FraudInput) (Verdict, error) {
	if s.err != nil {
		return "", s.err
	}
	<-ctx.Done() // slower than any budget
	return VerdictBlock, ctx.Err()
}

// The fraud check fails open: a scorer slower than its budget or failing
// lets the payment through, marked unchecked; after enough failures the
// breaker stops asking it at all.
func TestFraudFailsOpen(t *testing.T) {
	t.Parallel()
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	slow := newFailOpen(slowChecker{}, 20*time.Millisecond, m)
	require.Equal(t, verdictUnchecked, slow.Check(context.Background(), FraudInput{Amount: 1}))
	down := newFailOpen(slowChecker{err: errors.New("scorer down")}, time.Second, m)
	for i := 0; i < 25; i++ {
		require.Equal(t, verdictUnchecked, down.Check(context.Background(), FraudInput{}))
	}
	require.Equal(t, "open", down.breaker.State().String(), "the breaker stops calling a failing scorer")
	rules := newFailOpen(sandboxRules{cfg: config.PaymentsFraud{BlockOver: 100, ReviewUsers: []string{"eve"}}}, time.Second, m)
	require.Equal(t, VerdictBlock, rules.Check(context.Background(), FraudInput{Amount: 100}))
	require.Equal(t, VerdictReview, rules.Check(context.Background(), FraudInput{User: "eve", Amount: 1}))
	require.Equal(t, VerdictAccept, rules.Check(context.Background(), FraudInput{User: "ann", Amount: 99}))
}
