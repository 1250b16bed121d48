package waitingroom

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// A lone user in an idle room is let in at the next tick: the measured
// admission rate of a quiet room (one admission in the window) says how
// few people came, not how long the next one waits.
func TestEstimateLoneUserInIdleRoom(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.Redis(t), nil)
	s := newServer(t, b)
	s.openRoom(t, "ev", Settings{Capacity: 50, Batch: 10})
	// One admission in the last five minutes: 1/300 per second.
	k := keysOf(b.keys, "ev")
	require.NoError(t, b.rdb.HSet(context.Background(), k.state, "rate", "0.0033").Err())

	var a answer
	code, _ := s.call(t, http.MethodPost, "/v1/waitingroom/ev/join", "lone", nil, &a)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, StateQueued, a.State)
	require.NotNil(t, a.EtaSeconds)
	require.LessOrEqual(t, *a.EtaSeconds, int64(1), "first in line with 50 free places: the next tick (every %s)", b.cfg.TickInterval)

	// Once every place is taken, the measured rate is what frees the next.
	for i := range 49 {
		b.join(t, "ev", fmt.Sprintf("u%d", i))
	}
	for range 6 {
		b.tick(t, "ev")
	}
	require.EqualValues(t, 50, b.activeCount(t, "ev"))
	require.NoError(t, b.rdb.HSet(context.Background(), k.state, "rate", "0.5").Err())
	code, _ = s.call(t, http.MethodPost, "/v1/waitingroom/ev/join", "late", nil, &a)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, StateQueued, a.State)
	require.NotNil(t, a.EtaSeconds)
	require.EqualValues(t, 2, *a.EtaSeconds, "the full room frees one place every 2 s")
}
