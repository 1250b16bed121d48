package booking

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/presenced/presenced/internal/testenv"
)

// BenchmarkHoldUncontended: one-seat holds of distinct users on distinct
// seats, in parallel over GOMAXPROCS goroutines (the full path: rate limit,
// admission, idempotency, hints, locks, pricing, writes, commit), with the
// PostgreSQL round trips and statements per hold.
func BenchmarkHoldUncontended(b *testing.B) {
	db, trips := countingPool(b, 8)
	bb := setupWith(b, db, testenv.Redis(b))
	const perEvent = 20_000
	var events []string
	var seats [][]int64
	for n := 0; n < b.N; n += perEvent {
		ev, s := bb.event(b, fmt.Sprintf("A:20x%d@1000", perEvent/20))
		events, seats = append(events, ev), append(seats, s)
	}
	// Admitted before the timer: the desk's lease is a Redis write, the
	// waiting room's job, not the hold's.
	passes := make([]string, b.N)
	for i := range passes {
		passes[i] = bb.desk.admit(events[i/perEvent], fmt.Sprintf("%sbench%d", bb.run, i))
	}
	ctx := context.Background()
	runHolds(b, trips, func(i int64) error {
		ev, seat := events[i/perEvent], seats[i/perEvent][i%perEvent]
		user := fmt.Sprintf("%sbench%d", bb.run, i)
		_, err := bb.holds.Hold(ctx, holdInput{User: user, Event: ev, Pass: passes[i], Key: "k", Seats: []int64{seat}})
		return err
	})
}

// BenchmarkHoldBestAvailable: best-available holds of the 2 best adjacent
// seats of one hot section (8,000 seats, 80 rows of 100, sold out by 4,000
// holds), 8 in flight, as loadgen booking --best-available runs them,
// with the PostgreSQL round trips and statements per hold.
func BenchmarkHoldBestAvailable(b *testing.B) {
	db, trips := countingPool(b, 8)
	bb := setupWith(b, db, testenv.Redis(b))
	const perEvent = 4_000
	var events []string
	for n := 0; n < b.N; n += perEvent {
		ev, _ := bb.event(b, "B:80x100@3000")
		events = append(events, ev)
	}
	passes := make([]string, b.N)
	for i := range passes {
		passes[i] = bb.desk.admit(events[i/perEvent], fmt.Sprintf("%sbest%d", bb.run, i))
	}
	ctx := context.Background()
	best := bestInput{Section: "B", Quantity: 2, Adjacent: true}
	runHolds(b, trips, func(i int64) error {
		user := fmt.Sprintf("%sbest%d", bb.run, i)
		_, err := bb.holds.HoldBest(ctx, holdInput{User: user, Event: events[i/perEvent], Pass: passes[i], Key: "k"}, best)
		return err
	})
}

// runHolds times b.N holds, 8 in flight on 2 CPUs (enough to show
// contention), hold(i) making the i-th, and reports holds a second and the
// PostgreSQL round trips and statements per hold.
func runHolds(b *testing.B, trips *tripCounter, hold func(i int64) error) {
	var next atomic.Int64
	trips.take() // the events' creation
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := hold(next.Add(1) - 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "holds/s")
	n, statements := trips.take()
	b.ReportMetric(float64(n)/float64(b.N), "roundtrips/hold")
	b.ReportMetric(float64(statements)/float64(b.N), "statements/hold")
}
