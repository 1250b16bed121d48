package viewers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// tierRow reads a hotel's tier row. A hotel without one is on tier 1 (rows
// are written at the first promotion and never deleted); any other error
// fails the test, so a condition polled on it cannot pass on a store error.
func tierRow(t *testing.T, hotel string) (read, write, target int, pending bool) {
	t.Helper()
	var next *time.Time
	err := testenv.Postgres(t).QueryRow(t.Context(), `SELECT read_tier, write_tier, target_tier, next_step_at FROM viewers_hotel_tiers WHERE hotel_id = $1`, hotel).
		Scan(&read, &write, &target, &next)
	if errors.Is(err, pgx.ErrNoRows) {
		return 1, 1, 1, false
	}
	if err != nil {
		t.Fatalf("read the tier row of %s: %v", hotel, err)
	}
	return read, write, target, next != nil
}

// tierChangedAt is when the hotel's tier row last changed, and the tiers
// it changed to, read together.
func tierChangedAt(t *testing.T, hotel string) (at time.Time, read, write int) {
	t.Helper()
	err := testenv.Postgres(t).QueryRow(t.Context(), `SELECT changed_at, read_tier, write_tier FROM viewers_hotel_tiers WHERE hotel_id = $1`, hotel).
		Scan(&at, &read, &write)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, 1, 1
	}
	require.NoError(t, err, "read the tier row of %s", hotel)
	return at, read, write
}

// A busy hotel is promoted readers first, writers after write_delay, and
// demoted writers first after a quiet period; counts stay right throughout.
//
// Controller tests do not run in parallel: they share the database's
// leader lock.
func TestControllerPromotesAndDemotes(t *testing.T) {
	e := newEnv(t, envOpts{
		parts: []string{"heartbeat", "count", "controller"},
		cfg: func(v *cfgViewers) {
			v.Promote16Rate, v.Promote64Rate = 40, 100_000
			v.SessionRate, v.SessionBurst = 1000, 1000
			v.PrefixRate = 0
			v.WriteDelay = 600 * time.Millisecond
			v.QuietPeriod = time.Second
			v.DemoteRatio = 0.1
			v.Bucket = 2 * time.Second
		},
	})
	hotel := fmt.Sprintf("busy-%d", time.Now().UnixNano())
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	cookies := make([]string, 30)
	for i := range cookies {
		cookies[i] = sessionCookie(e.post(hotel, "", nil), e.cfg.CookieName)
	}
	// Three posters of ~150 heartbeats/s each, so that even a slow CI
	// machine stays well above the promotion rate of 40 adds/s.
	for p := 0; p < 3; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; ctx.Err() == nil; i += 3 {
				e.post(hotel, cookies[i%len(cookies)], nil)
				time.Sleep(6 * time.Millisecond)
			}
		}()
	}
	var readersAt time.Time
	testenv.Eventually(t, 10*time.Second, func() bool {
		var r, w int
		readersAt, r, w = tierChangedAt(t, hotel)
		return r == 16 && w == 1
	}, "readers promoted first")
	testenv.Eventually(t, 10*time.Second, func() bool {
		r, w, _, pending := tierRow(t, hotel)
		return r == 16 && w == 16 && !pending
	}, "writers follow")
	// By the database's clock, which stamped both steps: the test's own
	// polling may see the first step late on a loaded machine.
	writersAt, _, _ := tierChangedAt(t, hotel)
	require.GreaterOrEqual(t, writersAt.Sub(readersAt), e.cfg.WriteDelay, "after the write delay")
	testenv.Eventually(t, 5*time.Second, func() bool { return e.mod.tiers.get(hotel) == shardTier{Read: 16, Write: 16} }, "processes see the new tier")
	time.Sleep(300 * time.Millisecond) // writes now spread over 16 shards
	e.flush()
	require.Equal(t, e.estimate(t, cookies), e.countOf(hotel).Count)
	testenv.Eventually(t, 2*time.Second, func() bool {
		return e.metric(e.mod.m.tierChanges.WithLabelValues("promote", "read")) == 1 &&
			e.metric(e.mod.m.tierChanges.WithLabelValues("promote", "write")) == 1
	}, "one promotion step of each kind counted")

	stop()
	wg.Wait()
	testenv.Eventually(t, 15*time.Second, func() bool {
		r, w, _, _ := tierRow(t, hotel)
		return r == 16 && w == 1
	}, "quiet: writers demoted first")
	require.Equal(t, e.estimate(t, cookies), e.countOf(hotel).Count)
	testenv.Eventually(t, 15*time.Second, func() bool {
		r, w, _, pending := tierRow(t, hotel)
		return r == 1 && w == 1 && !pending
	}, "then readers")
	// The controller counts a step just after its update commits: the test
	// may see the row first.
	testenv.Eventually(t, 2*time.Second, func() bool {
		return e.metric(e.mod.m.tierChanges.WithLabelValues("demote", "write")) == 1 &&
			e.metric(e.mod.m.tierChanges.WithLabelValues("demote", "read")) == 1
	}, "one demotion step of each kind counted")
}

// Only one controller leads at a time; another takes over when it stops.
func TestOneControllerLeads(t *testing.T) {
	a := newEnv(t, envOpts{parts: []string{"controller"}})
	b := newEnv(t, envOpts{parts: []string{"controller"}})
	testenv.Eventually(t, 5*time.Second, func() bool {
		return a.metric(a.mod.m.leader)+b.metric(b.mod.m.leader) == 1
	}, "one leader")
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, float64(1), a.metric(a.mod.m.leader)+b.metric(b.mod.m.leader), "still one")
	leader, follower := a, b
	if b.metric(b.mod.m.leader) == 1 {
		leader, follower = b, a
	}
	leader.stop()
	testenv.Eventually(t, 5*time.Second, func() bool { return follower.metric(follower.mod.m.leader) == 1 }, "the other takes over")
}

// Without rate reports the controller does nothing rather than demote a
// hotel it is blind to.
func TestControllerRefusesToActBlind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{parts: []string{"count"}})
	hotel := fmt.Sprintf("blind-%d", time.Now().UnixNano())
	setTier(t, e, hotel, shardTier{Read: 16, Write: 16})
	c := &controller{db: e.mod.db, rdb: e.rdb, keys: e.mod.keys, cfg: e.cfg, m: e.mod.m, log: e.mod.log}
	for i := 0; i < 3; i++ {
		require.NoError(t, c.step(t.Context(), time.Now().Add(time.Duration(i)*time.Hour)))
	}
	r, w, _, _ := tierRow(t, hotel)
	require.Equal(t, 16, r)
	require.Equal(t, 16, w)
	require.Equal(t, float64(3), e.metric(e.mod.m.ratesMissing))
	_ = http.StatusOK
}
