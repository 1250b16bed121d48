package presence

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// reportQuantiles adds p50 / p99 of the recorded latencies to a benchmark.
func reportQuantiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// One session step (update activity, recompute, maybe publish): the write
// behind every ping and status change.
func BenchmarkSessionStep(b *testing.B) {
	rdb := testenv.Redis(b)
	m := newTestModule(b, rdb, testenv.Prefix(b), nil)
	ctx := context.Background()
	sid := store.NewToken()[:16]
	if _, err := m.st.step(ctx, "bench", "open", sid); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		manual := "=busy"
		if i%2 == 1 {
			manual = "-"
		}
		if _, err := m.st.step(ctx, "bench", "update", sid, "active", 0, manual); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	reportQuantiles(b, lat)
}

// The read path of GET /v1/presence/users/{id} and POST /v1/presence/query.
func BenchmarkStatusRead(b *testing.B) {
	rdb := testenv.Redis(b)
	m := newTestModule(b, rdb, testenv.Prefix(b), nil)
	ctx := context.Background()
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = "u" + strconv.Itoa(i)
		if i%2 == 0 {
			if _, err := m.st.step(ctx, ids[i], "open", "s"+strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("users=%d", n), func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := m.st.statuses(ctx, ids[:n]); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportQuantiles(b, lat)
		})
	}
}

// Fan-out in process: one status change decoded once and marked pending on
// every follower's connection (each one busy writing, so the change waits
// in its pending set; the write is measured by the loadgen).
func BenchmarkSubjectDeliver(b *testing.B) {
	for _, followers := range []int{20, 5000} {
		b.Run(fmt.Sprintf("followers=%d", followers), func(b *testing.B) {
			f := newFanout(nil, nil, nil, testenv.Logger())
			g := &gateway{f: f}
			s := &subject{id: "bob", f: f, watchers: map[*localUser]struct{}{}}
			var clients []*client
			for i := 0; i < followers; i++ {
				lu := &localUser{id: strconv.Itoa(i), subjects: map[string]*subject{"bob": s}}
				c := &client{g: g, lu: lu, armed: true, watched: true}
				lu.setClients([]*client{c})
				s.watchers[lu] = struct{}{}
				clients = append(clients, c)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				payload := fmt.Sprintf(`{"user":"bob","status":"busy","since":%d,"lastActiveAt":0,"v":%d,"ts":0}`, 1+i, 1+i)
				s.Deliver(hub.Message{Topic: "t", Payload: []byte(payload)})
				for _, c := range clients {
					c.mu.Lock()
					c.pending = subjectSet{}
					c.mu.Unlock()
				}
			}
		})
	}
}
