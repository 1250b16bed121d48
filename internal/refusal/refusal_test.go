package refusal

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var errTaken = errors.New("a seat was taken")

func TestKindsAreFoundThroughContext(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("hold seats: %w", New(errTaken, "seat %d is taken", 7))
	require.ErrorIs(t, err, errTaken)
	require.NotErrorIs(t, err, ErrBusy)
	require.Equal(t, "seat 7 is taken", Message(err, errTaken), "the refusal's message, not the context's")
	require.Equal(t, "a seat was taken", Message(fmt.Errorf("hold: %w", errTaken), errTaken), "the kind's text")
	require.Equal(t, "busy, retry", Message(err, ErrBusy), "a kind err is not: that kind's text")
	require.ErrorIs(t, Invalid("rooms: 1 to %d", 4), ErrInvalid)
	require.Equal(t, "rooms: 1 to 4", Invalid("rooms: 1 to %d", 4).Error())
}

func TestBusyJittersItsRetryAfter(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for range 200 {
		err := fmt.Errorf("read: %w", Busy(2*time.Second, "store busy"))
		require.ErrorIs(t, err, ErrBusy)
		after := RetryAfter(err)
		require.GreaterOrEqual(t, after, time.Second)
		require.Less(t, after, 3*time.Second)
		seen[after] = true
	}
	require.Greater(t, len(seen), 1, "clients told to come back do not all come back at once")
	require.Zero(t, RetryAfter(errTaken))
	require.Zero(t, Jitter(0))
}
