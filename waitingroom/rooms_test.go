package waitingroom

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

func TestSweepSlotsSpreadAnIntervalInStepsOfAtMostItself(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		interval time.Duration
		want     int
	}{
		{10 * time.Millisecond, 1},
		{100 * time.Millisecond, 2},
		{5 * time.Second, 100},
		{time.Hour, 200},
	} {
		require.Equal(t, c.want, sweepSlots(c.interval), c.interval)
	}
}

// The position sweep reads one slot per step: each user of the room once
// per interval, a small share at a time, and a late loop catching up
// reads nobody twice.
func TestThePositionSweepReadsEachUserOncePerIntervalASliceAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.Redis(t), func(c *config.Waitingroom) { c.PositionInterval = 5 * time.Second })
	r := newRoom(b.mod.rooms, "ev")
	n := len(r.slots)
	require.Equal(t, 100, n)

	const users = 10000
	all := make([]string, users)
	for i := range all {
		all[i] = fmt.Sprintf("user-%d", i)
		slot := r.slotOf(all[i])
		slot[all[i]] = append(slot[all[i]], &waiter{user: all[i]}, &waiter{user: all[i]})
	}

	var seen []string
	for i := 0; i < n; i++ {
		share := r.slotUsers(i, i+1)
		require.LessOrEqual(t, len(share), 2*users/n, "slot %d holds %d users: the sweep is not spread", i, len(share))
		seen = append(seen, share...)
	}
	slices.Sort(seen)
	want := slices.Clone(all)
	slices.Sort(want)
	require.Equal(t, want, seen, "one interval of slots reads every user exactly once")

	// The next interval reads the same slots again, in the same order.
	require.ElementsMatch(t, r.slotUsers(3, 4), r.slotUsers(n+3, n+4))
	// A loop three intervals late reads each user once, not three times.
	late := r.slotUsers(7, 7+3*n)
	slices.Sort(late)
	require.Equal(t, want, late)
}

// A room reads about a hundred users at a time: a small one once an
// interval, a large one every slot.
func TestARoomsSweepTicksAsOftenAsItsSizeNeeds(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.Redis(t), func(c *config.Waitingroom) { c.PositionInterval = 5 * time.Second })
	r := newRoom(b.mod.rooms, "ev")
	for _, c := range []struct {
		users int
		want  time.Duration
	}{
		{0, 5 * time.Second},
		{3, 5 * time.Second},
		{100, 5 * time.Second},
		{250, 5 * time.Second / 3},
		{5000, 100 * time.Millisecond},
		{1000000, 50 * time.Millisecond},
	} {
		r.users = c.users
		require.Equal(t, c.want, r.sweepPeriod(), "%d users", c.users)
	}
}
