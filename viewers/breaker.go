package viewers

import (
	"sync"
	"time"
)

const (
	breakerClosed = iota
	breakerHalfOpen
	breakerOpen
)

// breaker keeps a dead or drowning Redis from being hammered by count
// reads: after `threshold` consecutive failures it opens and every read is
// served stale without trying; after `cooldown` one probe is let through,
// and its outcome closes or re-opens the breaker.
type breaker struct {
	threshold int
	cooldown  time.Duration
	onChange  func(state int)

	mu       sync.Mutex
	state    int
	failures int
	openedAt time.Time
	probing  bool
}

func newBreaker(threshold int, cooldown time.Duration, onChange func(int)) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown, onChange: onChange}
}

// allow tells whether a read may go to Redis now.
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerClosed:
		return true
	case breakerOpen:
		if now.Sub(b.openedAt) < b.cooldown {
			return false
		}
		b.set(breakerHalfOpen)
		b.probing = true
		return true
	default: // half-open: one probe at a time
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
}

func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	b.probing = false
	if b.state != breakerClosed {
		b.set(breakerClosed)
	}
}

func (b *breaker) failure(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	b.probing = false
	if b.state == breakerHalfOpen || (b.state == breakerClosed && b.failures >= b.threshold) {
		b.openedAt = now
		b.set(breakerOpen)
	}
}

func (b *breaker) current() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

func (b *breaker) set(s int) {
	b.state = s
	if b.onChange != nil {
		b.onChange(s)
	}
}
