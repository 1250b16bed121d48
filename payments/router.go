package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/presenced/presenced/internal/promlabels"
)

// router sends new intents to the primary provider, or to the fallback
// while the primary's circuit breaker is open (seed 003: 50 % errors over
// 60 s). An intent, once started, stays with its provider: the recovery
// worker and refunds call the provider named on the payment row.
type router struct {
	providers map[string]Provider
	order     []string // primary first
	breakers  map[string]*gobreaker.CircuitBreaker[Intent]
	timeout   time.Duration
	m         *metrics
}

type breakerConfig struct {
	Window       time.Duration
	FailureRatio float64
	MinRequests  int
	OpenFor      time.Duration
}

// newRouter routes new intents over the first pick providers, in order;
// the others (the sandbox beside Stripe) only finish what they started.
func newRouter(providers []Provider, pick int, bc breakerConfig, timeout time.Duration, m *metrics) *router {
	r := &router{providers: map[string]Provider{}, breakers: map[string]*gobreaker.CircuitBreaker[Intent]{}, timeout: timeout, m: m}
	for i, p := range providers {
		name := p.Name()
		r.providers[name] = p
		if i < pick {
			r.order = append(r.order, name)
		}
		r.breakers[name] = gobreaker.NewCircuitBreaker[Intent](gobreaker.Settings{
			Name:         name,
			MaxRequests:  1,
			Interval:     bc.Window,
			BucketPeriod: bc.Window / 10,
			Timeout:      bc.OpenFor,
			ReadyToTrip: func(c gobreaker.Counts) bool {
				return c.Requests >= uint32(bc.MinRequests) && float64(c.TotalFailures) >= bc.FailureRatio*float64(c.Requests)
			},
			// A refusal (4xx) is the provider working as it should.
			IsSuccessful: func(err error) bool { return err == nil || errors.Is(err, errProviderRefused) },
			OnStateChange: func(name string, _, to gobreaker.State) {
				m.breakerOpen.WithLabelValues(name).Set(boolGauge(to == gobreaker.StateOpen))
			},
		})
		m.breakerOpen.WithLabelValues(name).Set(0)
		m.providerLatency.WithLabelValues(name)
		promlabels.Init(func(lv ...string) { m.providerCalls.WithLabelValues(lv...) }, []string{name},
			[]string{"create", "refund"}, []string{"ok", "breaker_open", "timeout", "refused", "error"})
		promlabels.Init(func(lv ...string) { m.webhooks.WithLabelValues(lv...) }, []string{name}, webhookOutcomes)
	}
	return r
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// pick names the provider for a new intent.
func (r *router) pick() (string, error) {
	for _, name := range r.order {
		if r.breakers[name].State() != gobreaker.StateOpen {
			return name, nil
		}
	}
	return "", errAllProvidersDown
}

func (r *router) provider(name string) (Provider, error) {
	p, ok := r.providers[name]
	if !ok {
		return nil, fmt.Errorf("payment provider %q is not configured in this process", name)
	}
	return p, nil
}

// create asks provider name for the intent of req, through its breaker and
// within the provider timeout.
func (r *router) create(ctx context.Context, name string, req IntentRequest) (Intent, error) {
	p, err := r.provider(name)
	if err != nil {
		return Intent{}, err
	}
	start := time.Now()
	in, err := r.breakers[name].Execute(func() (Intent, error) {
		ctx, cancel := context.WithTimeout(ctx, r.timeout)
		defer cancel()
		in, err := p.CreateIntent(ctx, req)
		if err != nil && ctx.Err() != nil && !errors.Is(err, errProviderTimeout) {
			err = fmt.Errorf("%w: %v", errProviderTimeout, err)
		}
		return in, err
	})
	r.m.providerCalls.WithLabelValues(name, "create", outcomeOf(err)).Inc()
	r.m.providerLatency.WithLabelValues(name).Observe(time.Since(start).Seconds())
	return in, err
}

// refund calls provider name within the provider timeout. Refunds skip
// the breaker: they are retried by the refund worker whatever its state.
func (r *router) refund(ctx context.Context, name, key, ref string, amount int64) (string, error) {
	p, err := r.provider(name)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	id, err := p.Refund(ctx, key, ref, amount)
	r.m.providerCalls.WithLabelValues(name, "refund", outcomeOf(err)).Inc()
	return id, err
}

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return "breaker_open"
	case errors.Is(err, errProviderTimeout):
		return "timeout"
	case errors.Is(err, errProviderRefused):
		return "refused"
	}
	return "error"
}
