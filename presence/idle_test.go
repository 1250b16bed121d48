package presence

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Each connection waits in at most one slot: re-arming moves it, stopping
// removes it, and due slots fire once.
func TestIdleWheel(t *testing.T) {
	t.Parallel()
	w := newIdleWheel()
	now := time.Now()
	w.done = w.slotOf(now) - 1
	a, b, c := &client{}, &client{}, &client{}
	w.arm(a, now.Add(time.Second))
	w.arm(b, now.Add(time.Second))
	w.arm(c, now.Add(time.Second))
	w.arm(a, now.Add(3*time.Second)) // moved later
	w.stop(c)                        // gone
	require.Len(t, w.slots, 2)

	require.Empty(t, w.due(w.slotOf(now.Add(500*time.Millisecond))))
	got := w.due(w.slotOf(now.Add(2 * time.Second)))
	require.Equal(t, []*client{b}, got)
	require.Zero(t, b.idleSlot)
	require.Empty(t, w.due(w.slotOf(now.Add(2*time.Second))), "fired once")
	require.Equal(t, []*client{a}, w.due(w.slotOf(now.Add(4*time.Second))))
	require.Empty(t, w.slots)

	// Arming in the past lands in the next slot to fire.
	w.arm(c, now.Add(-time.Hour))
	require.Equal(t, []*client{c}, w.due(w.done+1))
}
