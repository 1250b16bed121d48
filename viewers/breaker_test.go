package viewers

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// Threshold consecutive failures open the breaker; after the cooldown one
// probe at a time goes through; its failure re-opens, its success closes.
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	var states []int
	b := newBreaker(3, 50*time.Millisecond, func(s int) { states = append(states, s) })
	fail := errors.New("redis down")
	for i := 0; i < 2; i++ {
		done, ok := b.allow()
		require.True(t, ok)
		done(fail)
	}
	done, ok := b.allow()
	require.True(t, ok)
	done(nil) // a success in between: failures must be consecutive
	for i := 0; i < 3; i++ {
		done, ok := b.allow()
		require.True(t, ok)
		done(fail)
	}
	require.Equal(t, breakerOpen, b.current())
	_, ok = b.allow()
	require.False(t, ok, "open: no read goes to Redis")

	var probe func(error)
	testenv.Eventually(t, 5*time.Second, func() bool {
		probe, ok = b.allow()
		return ok
	}, "a probe after the cooldown")
	_, ok = b.allow()
	require.False(t, ok, "one probe at a time")
	probe(fail)
	require.Equal(t, breakerOpen, b.current(), "a failed probe re-opens")

	testenv.Eventually(t, 5*time.Second, func() bool {
		probe, ok = b.allow()
		return ok
	}, "another probe")
	probe(nil)
	require.Equal(t, breakerClosed, b.current())
	require.Equal(t, []int{breakerOpen, breakerHalfOpen, breakerOpen, breakerHalfOpen, breakerClosed}, states)
}
