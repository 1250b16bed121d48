package viewers

import (
	"time"

	"github.com/sony/gobreaker/v2"
)

// Breaker states, as the breaker gauge reports them: gobreaker's own
// numbering.
const (
	breakerClosed   = int(gobreaker.StateClosed)
	breakerHalfOpen = int(gobreaker.StateHalfOpen)
	breakerOpen     = int(gobreaker.StateOpen)
)

// breaker keeps a dead or drowning Redis from being hammered by count
// reads: after `threshold` consecutive failures it opens and every read is
// served stale without trying; after `cooldown` one probe is let through,
// and its outcome closes or re-opens the breaker. It is gobreaker's
// two-step breaker: allow before the read, done with its outcome after.
type breaker struct {
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
}

func newBreaker(threshold int, cooldown time.Duration, onChange func(int)) *breaker {
	return &breaker{cb: gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "viewers-count",
		MaxRequests: 1, // one probe at a time while half-open
		Timeout:     cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(threshold) },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			if onChange != nil {
				onChange(int(to))
			}
		},
	})}
}

// allow tells whether a read may go to Redis now; when it may, done must
// be called with the read's error (nil for a success).
func (b *breaker) allow() (done func(err error), allowed bool) {
	done, err := b.cb.Allow()
	return done, err == nil
}

func (b *breaker) current() int { return int(b.cb.State()) }
