package socket

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// Connections opened together are not pinged together: a burst of pings
// is a burst of writes that deliveries would queue behind. Each first ping
// comes in the second half of the interval after its connection opened.
func TestPingsOfABurstOfConnectionsAreSpread(t *testing.T) {
	t.Parallel()
	const interval = 4 * time.Second
	b := setupServe(t, parking(true, func(c *config.Config) {
		c.Realtime.PingInterval = interval
		c.Realtime.PongTimeout = 20 * time.Second
	}))
	const n = 30
	type pinged struct {
		opened, at time.Time
	}
	got := make(chan pinged, n)
	for range n {
		opened := time.Now()
		cl, _ := b.open(t)
		go func() {
			op, _ := cl.next(true)
			if op == opPing {
				got <- pinged{opened, time.Now()}
			}
		}()
	}
	var firsts []time.Time
	for range n {
		select {
		case p := <-got:
			require.GreaterOrEqual(t, p.at.Sub(p.opened), interval/2, "pinged before half the interval")
			firsts = append(firsts, p.at)
		case <-time.After(interval + 10*time.Second):
			t.Fatal("a connection was never pinged")
		}
	}
	slices.SortFunc(firsts, func(a, b time.Time) int { return a.Compare(b) })
	// Thirty draws over two seconds span about 1.9 s; all in one sweep
	// would be a few milliseconds.
	require.Greater(t, firsts[n-1].Sub(firsts[0]), 500*time.Millisecond, "first pings bunched together")
}
