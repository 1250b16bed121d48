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
// interval, a large one every step, and one growing at 1,000 sockets a
// second (the join load) reads as it grows, never putting its read off.
func TestARoomsSweepReadsAsOftenAsItsSizeNeeds(t *testing.T) {
	t.Parallel()
	const interval = 5 * time.Second
	n := sweepSlots(interval)
	c := newSweepClock(interval, n, time.Unix(0, 0), 0)
	require.Equal(t, interval, c.period, "an empty room")
	for users, want := range map[int]time.Duration{3: interval, 100: interval, 250: interval / 3, 5000: interval / 50, 1000000: interval / 100} {
		require.Equal(t, want, c.periodFor(users), "%d users", users)
	}

	// 1,000 sockets a second for 10 s, then 10 s steady; a read takes as
	// long as a millisecond.
	now, users, read := time.Unix(0, 0), 0, 0
	lastRead := now
	var gaps []time.Duration
	for ms := 1; ms <= 20000; ms++ {
		now = time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond)
		if ms <= 10000 {
			users++
			c.grew(users)
		}
		if now.Before(c.next) {
			continue
		}
		from, to := c.tick(now)
		require.Equal(t, read, from, "each read starts where the last stopped")
		require.LessOrEqual(t, to-from, n, "a read takes at most one interval of slots")
		share := users * (to - from) / n
		require.LessOrEqual(t, share, 3*sweepShare, "at %v a read takes %d of %d users (slots %d..%d)", now.Sub(time.Unix(0, 0)), share, users, from, to)
		read = to
		gaps = append(gaps, now.Sub(lastRead))
		lastRead = now
		c.schedule(now.Add(time.Millisecond), users)
	}
	require.GreaterOrEqual(t, read, 20000/int(interval/time.Millisecond)*n-1, "every slot of the run was read")
	require.LessOrEqual(t, slices.Max(gaps), interval, "no read was put off past an interval")
	require.LessOrEqual(t, gaps[len(gaps)-1], 2*interval/time.Duration(n), "a room of 10,000 reads every step")
}
