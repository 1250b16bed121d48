package waitingroom

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// go test -run x -bench . -benchtime 2000x ./waitingroom/

// BenchmarkJoin is one join script call (a round trip on loopback): a new
// entry, and a rejoin of someone already in a line of 100,000.
func BenchmarkJoin(b *testing.B) {
	bb := setup(b, testenv.Redis(b), nil)
	bb.openRoom(b, "ev", Settings{Paused: true})
	fill(b, bb, "ev", 100_000, userID12, false)
	ctx := context.Background()
	b.Run("new", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, _, err := bb.line.Join(ctx, "ev", "new-"+strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rejoin", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, _, err := bb.line.Join(ctx, "ev", userID12(i%100_000)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(8)
		var n atomicCounter
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := bb.line.Join(ctx, "ev", "par-"+strconv.FormatInt(n.next(), 10)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkTickMillionQueue is one admission tick with 1,000,000 entries in
// line: a batch of 10 or 1,000 from a fresh head, and the abandonment trap
// with a stale head (1,000 cleaned plus the re-checked pops per tick).
func BenchmarkTickMillionQueue(b *testing.B) {
	for _, c := range []struct {
		name  string
		batch int
		stale bool
	}{{"batch10", 10, false}, {"batch1000", 1000, false}, {"stale-head", 10, true}} {
		b.Run(c.name, func(b *testing.B) {
			bb := setup(b, testenv.Redis(b), nil)
			bb.openRoom(b, "ev", Settings{Capacity: maxCapacity, Batch: c.batch, HeartbeatTimeoutSeconds: 60})
			fill(b, bb, "ev", 1_000_000, userID12, c.stale)
			ctx := context.Background()
			opts := bb.tickOptions(0)
			b.ResetTimer()
			for b.Loop() {
				r, err := bb.line.Tick(ctx, "ev", opts)
				if err != nil || r.Status != "ok" {
					b.Fatal(err, r.Status)
				}
			}
			b.StopTimer()
			n, _ := bb.rdb.ZCard(ctx, keysOf(bb.keys, "ev").line).Result()
			b.ReportMetric(float64(n), "queued-at-end")
			_ = bb.rdb.Del(ctx, keysOf(bb.keys, "ev").all()...).Err()
		})
	}
}

// BenchmarkSweepMillionQueue is one tick's sweep of a line of 1,000,000
// that keeps heartbeating (nothing to remove), at a 1 s tick: the whole
// waitingroom.sweep_limit (a million entries at a 120 s timeout want more)
// read in slices of sweepSlice, each its own script call.
func BenchmarkSweepMillionQueue(b *testing.B) {
	bb := setup(b, testenv.Redis(b), nil)
	bb.openRoom(b, "ev", Settings{Paused: true})
	fill(b, bb, "ev", 1_000_000, userID12, false)
	ctx := context.Background()
	opts := bb.tickOptions(0)
	opts.Period = time.Second
	bb.tick(b, "ev") // the sweep runs once a tick has started the clock
	b.ResetTimer()
	for b.Loop() {
		if n, err := bb.line.Sweep(ctx, "ev", opts); err != nil || n != 0 {
			b.Fatal(err, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(opts.SweepLimit), "ns/entry")
	_ = bb.rdb.Del(ctx, keysOf(bb.keys, "ev").all()...).Err()
}

// BenchmarkMemoryPerQueuedUser fills a line with 1,000,000 entries as joins
// leave them (one sorted set: place and heartbeat) and reports Redis's own
// figures: MEMORY USAGE (exact, SAMPLES 0) of the line, and the used_memory
// difference from INFO memory. Run with -benchtime 1x.
func BenchmarkMemoryPerQueuedUser(b *testing.B) {
	for _, c := range []struct {
		name string
		id   func(int) string
	}{{"id12", userID12}, {"id36", userID36}} {
		b.Run(c.name, func(b *testing.B) {
			const n = 1_000_000
			rdb := testenv.Redis(b)
			bb := setup(b, rdb, nil)
			bb.openRoom(b, "ev", Settings{Paused: true})
			ctx := context.Background()
			before := usedMemory(b, rdb)
			fill(b, bb, "ev", n, c.id, false)
			after := usedMemory(b, rdb)
			k := keysOf(bb.keys, "ev")
			var exact int64
			for _, key := range []string{k.line} {
				v, err := rdb.Do(ctx, "MEMORY", "USAGE", key, "SAMPLES", "0").Int64()
				require.NoError(b, err)
				exact += v
			}
			for b.Loop() {
			}
			// Reported after the loop: starting it resets reported metrics.
			b.ReportMetric(float64(exact)/n, "bytes/user(MEMORY-USAGE)")
			b.ReportMetric(float64(after-before)/n, "bytes/user(INFO-used_memory)")
			b.ReportMetric(float64(exact)/(1<<20), "MiB/1M-users")
			_ = rdb.Del(ctx, k.all()...).Err()
		})
	}
}

// BenchmarkMemoryJoined100k puts 100,000 users with 36-byte ids in line
// through the join script and reports the bytes per queued user from INFO
// used_memory (before and after) and from MEMORY USAGE of every key of the
// room. Run alone, with -benchtime 1x, on a Redis of its own
// (PRESENCED_TEST_REDIS_URL), so nothing else moves used_memory.
func BenchmarkMemoryJoined100k(b *testing.B) {
	const n = 100_000
	rdb := testenv.Redis(b)
	bb := setup(b, rdb, nil)
	bb.openRoom(b, "ev", Settings{Paused: true})
	empty := eventMemory(b, rdb, bb, "ev")
	before := usedMemory(b, rdb)
	joinAll(b, bb, "ev", n, userID36)
	after := usedMemory(b, rdb)
	exact := eventMemory(b, rdb, bb, "ev") - empty
	ctx := context.Background()
	for iter := rdb.Scan(ctx, 0, bb.keys.Entity("wr", "ev").String()+"*", 100).Iterator(); iter.Next(ctx); {
		v, _ := rdb.Do(ctx, "MEMORY", "USAGE", iter.Val(), "SAMPLES", "0").Int64()
		b.Logf("MEMORY USAGE %s: %d B", iter.Val(), v)
	}
	for b.Loop() {
	}
	b.ReportMetric(float64(exact)/n, "bytes/user(MEMORY-USAGE)")
	b.ReportMetric(float64(after-before)/n, "bytes/user(INFO-used_memory)")
	_ = rdb.Del(ctx, keysOf(bb.keys, "ev").all()...).Err()
}

func userID12(i int) string { return fmt.Sprintf("user-%07d", i) }

func userID36(i int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", i, i%65536, i%4096, (i/7)%4096, i*7919)
}

// fill puts n entries in line the way joins do (sequence, heartbeat now),
// pipelined for speed; stale backdates every heartbeat by an hour.
func fill(tb testing.TB, bb *bundle, event string, n int, id func(int) string, stale bool) {
	tb.Helper()
	ctx := context.Background()
	k := keysOf(bb.keys, event)
	now := time.Now().Unix()
	if stale {
		now -= int64(time.Hour.Seconds())
	}
	const per = 1000
	for start := 0; start < n; start += 50 * per {
		_, err := bb.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for c := start; c < min(start+50*per, n); c += per {
				q := make([]redis.Z, 0, per)
				for i := c; i < min(c+per, n); i++ {
					q = append(q, redis.Z{Score: entryScore(int64(i+1), now), Member: id(i)})
				}
				p.ZAdd(ctx, k.line, q...)
			}
			return nil
		})
		require.NoError(tb, err)
	}
	require.NoError(tb, bb.rdb.Set(ctx, k.sequence, n, 0).Err())
}

func usedMemory(tb testing.TB, rdb redis.UniversalClient) int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	require.NoError(tb, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(tb, err)
			return n
		}
	}
	tb.Fatal("no used_memory in INFO memory")
	return 0
}

// BenchmarkPlaces is one positions call for 500 sockets of a process (their
// heartbeats refreshed, ranks read) in a line of 1,000,000.
func BenchmarkPlaces(b *testing.B) {
	bb := setup(b, testenv.Redis(b), nil)
	bb.openRoom(b, "ev", Settings{Paused: true})
	fill(b, bb, "ev", 1_000_000, userID12, false)
	users := make([]string, placesChunk)
	for i := range users {
		users[i] = userID12(i * 1999)
	}
	ctx := context.Background()
	for b.Loop() {
		_, places, err := bb.line.Places(ctx, "ev", users)
		if err != nil || places[0].State != StateQueued {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/placesChunk, "ns/socket")
	_ = bb.rdb.Del(ctx, keysOf(bb.keys, "ev").all()...).Err()
}
