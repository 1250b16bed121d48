package app

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// A command's process starts only its command parts and connects only the
// stores they declare: booking's admin writes through the main pool, and
// no Redis is opened for it. No role starts a command part.
func TestOpenCommandStartsOnlyItsParts(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	a, err := OpenCommand(context.Background(), cfg, testenv.Logger(), BookingAdmin)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown() })
	require.Equal(t, []string{BookingAdmin}, a.Started())
	require.Equal(t, []string{store.PoolMain}, a.openedPools())
	a.mu.Lock()
	require.Nil(t, a.redis, "no part asked for Redis")
	a.mu.Unlock()
	b, err := a.Booking()
	require.NoError(t, err)
	sum, err := b.CreateEvent(context.Background(), booking.EventSpec{ID: "cmd-ev", Currency: "EUR", HoldMinutes: 10,
		StartsAt: time.Now().Add(24 * time.Hour), Sections: []booking.SectionSpec{{ID: "A", Rows: 1, SeatsPerRow: 2, BasePrice: 100}}})
	require.NoError(t, err)
	require.Equal(t, 2, sum.Seats)

	_, err = OpenCommand(context.Background(), cfg, testenv.Logger(), "booking.holds")
	require.ErrorContains(t, err, `no command part "booking.holds"`)
	for name := range commandParts {
		_, inTable := parts[name]
		require.False(t, inTable, "command part %s is also a role's part", name)
	}
}
