package viewers

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
)

// The heartbeat path looks a session up twice (verified cookie, token
// bucket). These benchmarks compare genMap with the expirable LRU the
// issue proposed (hashicorp/golang-lru/v2/expirable) on the same parallel
// lookup-or-insert over 20,000 sessions. Speed is not why genMap stays
// (they are close); see genmap.go for the reasons.
//
//	go test -run x -bench 'SessionCache' -cpu 2 ./viewers/

func BenchmarkSessionCacheGenMap(b *testing.B) {
	m := newGenMap[uint64](5*time.Second, 1<<21)
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := next.Add(1) % 20_000 * 0x9e3779b97f4a7c15
			now := time.Now().UnixNano()
			if _, ok := m.Get(k, now); !ok {
				m.Put(k, k, now)
			}
		}
	})
}

func BenchmarkSessionCacheExpirableLRU(b *testing.B) {
	m := expirable.NewLRU[uint64, uint64](1<<21, nil, 5*time.Second)
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := next.Add(1) % 20_000 * 0x9e3779b97f4a7c15
			if _, ok := m.Get(k); !ok {
				m.Add(k, k)
			}
		}
	})
}
