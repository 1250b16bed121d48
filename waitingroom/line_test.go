package waitingroom

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// Joining assigns a sequence once; rejoining (and status) keeps the place.
func TestJoinKeepsPlaceOnRejoin(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, nil)
		ctx := context.Background()
		_, _, err := b.line.Join(ctx, "nosuch", "u")
		require.ErrorIs(t, err, errNoRoom)

		b.openRoom(t, "ev", Settings{})
		for i, u := range []string{"a", "b", "c"} {
			p := b.join(t, "ev", u)
			require.Equal(t, StateQueued, p.State)
			require.EqualValues(t, i, p.Rank)
		}
		for i := 0; i < 3; i++ {
			require.EqualValues(t, 0, b.join(t, "ev", "a").Rank, "rejoin keeps the head")
			require.EqualValues(t, 2, b.join(t, "ev", "c").Rank)
		}
		seq, err := rdb.Get(ctx, keysOf(b.keys, "ev").sequence).Int()
		require.NoError(t, err)
		require.Equal(t, 3, seq, "a sequence number is assigned once per entry")

		_, p, err := b.line.Status(ctx, "ev", "b")
		require.NoError(t, err)
		require.EqualValues(t, 1, p.Rank)
		_, p, err = b.line.Status(ctx, "ev", "stranger")
		require.NoError(t, err)
		require.Equal(t, StateAbsent, p.State, "status never joins")

		// Admitted: join answers the lease instead of a place.
		r := b.tick(t, "ev")
		require.Equal(t, []string{"a", "b", "c"}, r.Admitted)
		p = b.join(t, "ev", "a")
		require.Equal(t, StateAdmitted, p.State)
		require.WithinDuration(t, time.Now().Add(5*time.Minute), p.LeaseExpiry, 10*time.Second)
	})
}

// Admission order equals join order for users that kept heartbeating, in
// batches, across ticks.
func TestFIFOAdmissionOrder(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, nil)
		b.openRoom(t, "ev", Settings{Capacity: 1000, Batch: 7})
		var joined []string
		for i := 0; i < 60; i++ {
			u := fmt.Sprintf("user-%02d", 59-i) // names sort against join order
			b.join(t, "ev", u)
			joined = append(joined, u)
		}
		// Rejoins in between change nothing.
		for _, u := range []string{"user-00", "user-30", "user-59"} {
			b.join(t, "ev", u)
		}
		var admitted []string
		for len(admitted) < len(joined) {
			r := b.tick(t, "ev")
			require.Equal(t, "ok", r.Status)
			require.LessOrEqual(t, len(r.Admitted), 7, "batch")
			require.NotEmpty(t, r.Admitted)
			admitted = append(admitted, r.Admitted...)
		}
		require.Equal(t, joined, admitted)
	})
}

// The abandonment trap: more stale entries than one tick's cleanup bound sit
// at the head of the line. None of them is ever admitted; the people behind
// them are, in order.
func TestAbandonedHeadIsNeverAdmitted(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, func(c *config.Waitingroom) { c.CleanupLimit = 5 })
		b.openRoom(t, "ev", Settings{Capacity: 100, Batch: 10, HeartbeatTimeoutSeconds: 30})
		var stale, fresh []string
		for i := 0; i < 40; i++ {
			u := fmt.Sprintf("gone-%02d", i)
			b.join(t, "ev", u)
			stale = append(stale, u)
		}
		for i := 0; i < 15; i++ {
			u := fmt.Sprintf("here-%02d", i)
			b.join(t, "ev", u)
			fresh = append(fresh, u)
		}
		old := redisNow(t, rdb, "") - 31_000
		for _, u := range stale {
			b.setHeartbeat(t, "ev", u, old)
		}
		var admitted []string
		abandoned := 0
		for i := 0; i < 10 && len(admitted) < len(fresh); i++ {
			r := b.tick(t, "ev")
			require.LessOrEqual(t, r.Abandoned, 5+10+5, "cleanup and the re-check are both bounded per tick")
			abandoned += r.Abandoned
			admitted = append(admitted, r.Admitted...)
		}
		require.Equal(t, fresh, admitted, "only the heartbeating entries, in order")
		require.Equal(t, len(stale), abandoned)
		for _, u := range stale {
			exp, err := b.line.LeaseExpiry(context.Background(), "ev", u)
			require.NoError(t, err)
			require.True(t, exp.IsZero(), "%s was admitted", u)
		}
		n, err := rdb.ZCard(context.Background(), keysOf(b.keys, "ev").line).Result()
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// Paused and not-yet-open lines hold: nobody admitted, places kept.
func TestPausedAndClosedLinesHold(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.Redis(t), nil)
	open := time.Now().Add(time.Hour).UTC()
	b.openRoom(t, "ev", Settings{OpenAt: &open})
	b.join(t, "ev", "a")
	b.join(t, "ev", "b")
	r := b.tick(t, "ev")
	require.Equal(t, "closed", r.Status)
	require.Empty(t, r.Admitted)

	b.openRoom(t, "ev", Settings{Paused: true})
	r = b.tick(t, "ev")
	require.Equal(t, "paused", r.Status)
	require.Empty(t, r.Admitted)
	require.EqualValues(t, 1, b.join(t, "ev", "b").Rank)

	b.openRoom(t, "ev", Settings{})
	require.Equal(t, []string{"a", "b"}, b.tick(t, "ev").Admitted)
}

// Heartbeats could not be recorded while Redis (or every worker) was away:
// after a long gap between ticks the gap is credited, so people whose
// sockets stayed open are not dropped; without a gap they would be.
func TestOutageGapIsCreditedToHeartbeats(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.Redis(t), nil)
	b.openRoom(t, "ev", Settings{HeartbeatTimeoutSeconds: 20, Paused: true})
	ctx := context.Background()
	k := keysOf(b.keys, "ev")
	b.join(t, "ev", "kept")
	b.join(t, "ev", "dropped")
	b.tick(t, "ev") // start the tick clock
	now := redisNow(t, b.rdb, "")
	// The last tick ran 60 s ago; "kept" was last heard 50 s ago, just
	// before the outage began.
	require.NoError(t, b.rdb.HSet(ctx, k.state, "lt", now-60_000).Err())
	b.setHeartbeat(t, "ev", "kept", now-50_000)
	opts := b.tickOptions(0)
	opts.OutageGap = 10 * time.Second
	// The sweep runs first, as on a worker: it removes nobody until a tick
	// has credited the gap.
	r := b.tickWith(t, "ev", opts)
	require.Zero(t, r.Abandoned, "heard within the timeout plus the outage")
	r = b.tickWith(t, "ev", opts)
	require.Zero(t, r.Abandoned, "the credit holds for the sweep too")

	// Once the credit window has passed the normal rule applies.
	require.NoError(t, b.rdb.HSet(ctx, k.state, "creditUntil", now-1).Err())
	b.setHeartbeat(t, "ev", "dropped", now-50_000)
	r = b.tickWith(t, "ev", opts)
	require.Equal(t, 2, r.Abandoned)
}

// Lottery: everyone who joined before the open time is shuffled exactly
// once at opening; later joiners queue first in, first out behind them.
func TestLotteryShufflesExactlyThePreOpenCohort(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, nil)
		later := time.Now().Add(time.Hour).UTC()
		b.openRoom(t, "ev", Settings{Capacity: 10000, Batch: 1000, Mode: ModeLottery, OpenAt: &later})
		var cohort, late []string
		for i := 0; i < 300; i++ {
			u := fmt.Sprintf("early-%03d", i)
			p := b.join(t, "ev", u)
			require.True(t, p.Undrawn, "no rank before the draw")
			cohort = append(cohort, u)
		}
		require.Equal(t, "closed", b.tick(t, "ev").Status)
		// The sale opens: the open time moves to just now.
		open := time.Now().Add(100 * time.Millisecond).UTC()
		b.openRoom(t, "ev", Settings{Capacity: 10000, Batch: 1000, Mode: ModeLottery, OpenAt: &open})
		time.Sleep(time.Until(open) + 50*time.Millisecond)
		for i := 0; i < 30; i++ {
			u := fmt.Sprintf("late-%02d", i)
			require.False(t, b.join(t, "ev", u).Undrawn)
			late = append(late, u)
		}
		require.Equal(t, "draw", b.tick(t, "ev").Status, "nobody is admitted before the draw")

		// Two workers draw at once, in small steps: each entry is drawn once.
		ctx := context.Background()
		done := make(chan error, 2)
		for w := 0; w < 2; w++ {
			go func() {
				for {
					keys := make([]int64, 7)
					for i := range keys {
						keys[i] = randKey()
					}
					_, finished, err := b.line.Draw(ctx, "ev", keys)
					if err != nil || finished {
						done <- err
						return
					}
				}
			}()
		}
		require.NoError(t, <-done)
		require.NoError(t, <-done)
		before, err := rdb.ZRangeWithScores(ctx, keysOf(b.keys, "ev").line, 0, -1).Result()
		require.NoError(t, err)
		n, finished, err := b.line.Draw(ctx, "ev", []int64{1, 2, 3})
		require.NoError(t, err)
		require.True(t, finished)
		require.Zero(t, n, "a finished draw never runs again")
		after, err := rdb.ZRangeWithScores(ctx, keysOf(b.keys, "ev").line, 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, before, after)
		for _, z := range before[:len(cohort)] {
			require.Less(t, z.Score, 0.0, "every cohort entry was drawn")
		}

		r := b.tick(t, "ev")
		require.Equal(t, "ok", r.Status)
		admitted := r.Admitted
		require.Len(t, admitted, len(cohort)+len(late))
		first := admitted[:len(cohort)]
		require.ElementsMatch(t, cohort, first, "the cohort comes first")
		require.NotEqual(t, cohort, first, "shuffled")
		require.Equal(t, late, admitted[len(cohort):], "later joiners in join order")
		// A fair shuffle leaves no trace of join order (|rho| ~ 0.06 here).
		require.Less(t, math.Abs(spearman(cohort, first)), 0.3)
	})
}

func spearman(a, b []string) float64 {
	pos := map[string]int{}
	for i, u := range b {
		pos[u] = i
	}
	n := float64(len(a))
	var d2 float64
	for i, u := range a {
		d := float64(i - pos[u])
		d2 += d * d
	}
	return 1 - 6*d2/(n*(n*n-1))
}

// Active leases never exceed capacity: several workers tick one event at
// once with no lease and no period guard (the worst case), while capacity
// changes and checkouts end at random.
func TestCapacityNeverExceeded(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, nil)
		b.openRoom(t, "ev", Settings{Capacity: 5, Batch: 3, HeartbeatTimeoutSeconds: 3600})
		for i := 0; i < 400; i++ {
			b.join(t, "ev", fmt.Sprintf("u%03d", i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		type violation struct{ active, capacity int }
		bad := make(chan violation, 100)
		ticks := make(chan int, 1000)
		workers := 4
		for w := 0; w < workers; w++ {
			go func() {
				n := 0
				defer func() { ticks <- n }()
				for ctx.Err() == nil {
					r, err := b.line.Tick(ctx, "ev", b.tickOptions(0))
					if err != nil {
						continue
					}
					n++
					if len(r.Admitted) > 0 && r.Active > r.Capacity {
						bad <- violation{r.Active, r.Capacity}
					}
				}
			}()
		}
		// Capacity moves up and down; checkouts end at random. These
		// goroutines end before the test does (helpers joins them), and
		// report through channels: a test may not fail after it returned.
		caps := []int{5, 12, 2, 8, 0, 20, 1, 9}
		var helpers sync.WaitGroup
		defer helpers.Wait()
		settingErrs := make(chan error, 1)
		helpers.Add(2)
		go func() {
			defer helpers.Done()
			for i := 0; ctx.Err() == nil; i++ {
				s := Settings{Capacity: caps[i%len(caps)], Batch: 3, HeartbeatTimeoutSeconds: 3600,
					LeaseSeconds: int(b.cfg.DefaultLease.Seconds()), Mode: ModeFIFO}
				if err := b.line.PutSettings(ctx, "ev", s); err != nil && ctx.Err() == nil {
					select {
					case settingErrs <- err:
					default:
					}
				}
				time.Sleep(40 * time.Millisecond)
			}
		}()
		go func() {
			defer helpers.Done()
			k := keysOf(b.keys, "ev")
			for ctx.Err() == nil {
				users, _ := rdb.ZRange(ctx, k.leases, 0, 2).Result()
				for _, u := range users {
					_ = b.line.ReleaseLease(ctx, "ev", u)
				}
				time.Sleep(15 * time.Millisecond)
			}
		}()
		<-ctx.Done()
		total := 0
		for w := 0; w < workers; w++ {
			total += <-ticks
		}
		helpers.Wait()
		close(bad)
		for v := range bad {
			t.Errorf("a tick admitted beyond capacity: %d active, capacity %d", v.active, v.capacity)
		}
		select {
		case err := <-settingErrs:
			t.Errorf("changing the settings: %v", err)
		default:
		}
		require.Greater(t, total, 100, "the workers really raced")
	})
}

// With the capacity fixed, an observer never sees more live leases than the
// capacity while several real tickers run (leases, shards, period guard)
// and checkouts end; and the event gets about one tick per period, not one
// per worker.
func TestSeveralTickersOneTickPerPeriod(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		prefix := testenv.Prefix(t)
		ring := newRing(t, "k1")
		var workers []*bundle
		for i := 0; i < 3; i++ {
			workers = append(workers, newBundle(t, rdb, prefix, ring, func(c *config.Waitingroom) {
				c.TickInterval = 100 * time.Millisecond
				c.TickLeaseTTL = 300 * time.Millisecond
				c.TickShards = 1
			}))
		}
		b := workers[0]
		b.openRoom(t, "ev", Settings{Capacity: 4, Batch: 2, HeartbeatTimeoutSeconds: 3600})
		for i := 0; i < 300; i++ {
			b.join(t, "ev", fmt.Sprintf("u%03d", i))
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()
		stopped := make(chan struct{}, len(workers))
		for _, w := range workers {
			go func() {
				_ = w.ticker.Run(ctx)
				stopped <- struct{}{}
			}()
		}
		go func() { // checkouts end quickly
			k := keysOf(b.keys, "ev")
			for ctx.Err() == nil {
				users, _ := rdb.ZRange(ctx, k.leases, 0, 0).Result()
				for _, u := range users {
					_ = b.line.ReleaseLease(ctx, "ev", u)
				}
				time.Sleep(80 * time.Millisecond)
			}
		}()
		maxActive := int64(0)
		for time.Since(start) < 2*time.Second {
			maxActive = max(maxActive, b.activeCount(t, "ev"))
			require.LessOrEqual(t, maxActive, int64(4))
			time.Sleep(3 * time.Millisecond)
		}
		cancel()
		for range workers {
			<-stopped
		}
		elapsed := time.Since(start)
		var ok float64
		for _, w := range workers {
			ok += counterValue(t, w.reg, "presenced_waitingroom_ticks_total", "result", "ok")
		}
		periods := elapsed.Seconds() / 0.1
		require.Greater(t, ok, periods*0.3, "the event was ticked")
		require.Less(t, ok, periods*1.5+2, "one tick per period, not one per worker")
		require.Equal(t, int64(4), maxActive, "capacity was used")
	})
}

// The admitted users' join-to-admit times and the admission rate are
// measured, and the estimate uses them.
func TestAdmissionRateAndEstimate(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.Redis(t), nil)
	b.openRoom(t, "ev", Settings{Capacity: 1000, Batch: 5})
	for i := 0; i < 30; i++ {
		b.join(t, "ev", fmt.Sprintf("u%02d", i))
	}
	room, p, err := b.line.Status(context.Background(), "ev", "u20")
	require.NoError(t, err)
	require.Zero(t, room.Rate)
	// Before any admission: 21 people at a batch of 5 per 50 ms tick.
	require.EqualValues(t, 1, *b.mod.estimate(room, p.Rank))

	r := b.tick(t, "ev")
	require.Len(t, r.Waits, 5)
	for _, w := range r.Waits {
		require.Less(t, w, 5*time.Second)
	}
	time.Sleep(1100 * time.Millisecond)
	r = b.tick(t, "ev")
	require.Len(t, r.Waits, 5)
	for _, w := range r.Waits {
		// Joined before the first tick recorded the sequence: the wait is
		// measured from that tick, to one tick.
		require.InDelta(t, 1.1, w.Seconds(), 0.5)
	}
	room, p, err = b.line.Status(context.Background(), "ev", "u20")
	require.NoError(t, err)
	require.Greater(t, room.Rate, 5.0, "10 admitted within about a second")
	require.Less(t, room.Rate, 11.0)
	eta := b.mod.estimate(room, p.Rank)
	require.NotNil(t, eta)
	require.InDelta(t, float64(p.Rank+1)/room.Rate, float64(*eta), 1)

	st, err := b.line.Stats(context.Background(), "ev")
	require.NoError(t, err)
	require.Equal(t, 10, st.AdmittedPerMinute)
	require.Equal(t, 20, st.Queued)
	require.Equal(t, 10, st.Active)
	require.NotNil(t, st.OldestWaitSeconds)
	require.Greater(t, *st.OldestWaitSeconds, 1.0)

	room.Paused = true
	require.Nil(t, b.mod.estimate(room, 3), "no estimate while paused")
}

func TestSettingsValidation(t *testing.T) {
	t.Parallel()
	d := Settings{Capacity: 10, Batch: 2, LeaseSeconds: 300, HeartbeatTimeoutSeconds: 120, Mode: ModeFIFO}
	require.NoError(t, d.validate())
	for name, mutate := range map[string]func(*Settings){
		"negative capacity": func(s *Settings) { s.Capacity = -1 },
		"zero batch":        func(s *Settings) { s.Batch = 0 },
		"short lease":       func(s *Settings) { s.LeaseSeconds = 1 },
		"long heartbeat":    func(s *Settings) { s.HeartbeatTimeoutSeconds = 99999 },
		"mode":              func(s *Settings) { s.Mode = "random" },
		"lottery, no open":  func(s *Settings) { s.Mode = ModeLottery },
	} {
		s := d
		mutate(&s)
		require.Error(t, s.validate(), name)
	}
	for _, ok := range []string{"a", "ev-2025.final_1", "A1"} {
		require.True(t, validEvent(ok), ok)
	}
	for _, bad := range []string{"", "-a", "a{b}", "a b", "a/b", string(make([]byte, 65))} {
		require.False(t, validEvent(bad), bad)
	}
	keys := []int{}
	for s := 0; s < 1000; s++ {
		keys = append(keys, shardOf(fmt.Sprint("event-", s), 16))
	}
	sort.Ints(keys)
	require.Equal(t, 0, keys[0])
	require.Equal(t, 15, keys[len(keys)-1])
	require.True(t, slices.IsSorted(keys))
}

// Concurrent changes of the settings do not overwrite each other.
func TestUpdateSettingsIsAtomic(t *testing.T) {
	t.Parallel()
	redisKinds(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, rdb, nil)
		ctx := context.Background()
		incr := func(s Settings) (Settings, error) { s.Capacity++; return s, nil }
		_, created, err := b.line.UpdateSettings(ctx, "ev", b.mod.defaults(), incr)
		require.NoError(t, err)
		require.True(t, created)
		errs := make(chan error, 20)
		for i := 0; i < 20; i++ {
			go func() {
				_, created, err := b.line.UpdateSettings(ctx, "ev", b.mod.defaults(), incr)
				if created {
					err = fmt.Errorf("created twice")
				}
				errs <- err
			}()
		}
		for i := 0; i < 20; i++ {
			require.NoError(t, <-errs)
		}
		s, err := b.line.Settings(ctx, "ev")
		require.NoError(t, err)
		require.Equal(t, b.mod.defaults().Capacity+21, s.Capacity)

		_, _, err = b.line.UpdateSettings(ctx, "ev", b.mod.defaults(), func(s Settings) (Settings, error) {
			s.Batch = 0
			return s, s.validate()
		})
		var invalid *invalidSettingsError
		require.ErrorAs(t, err, &invalid)
		s2, err := b.line.Settings(ctx, "ev")
		require.NoError(t, err)
		require.Equal(t, s, s2, "a refused change stores nothing")
	})
}
