package viewers

import (
	"sync"
	"time"
)

// genShards is the number of lock stripes of a genMap: enough that two
// cores rarely meet on one lock.
const genShards = 64

// genMap is a striped map from uint64 to V that forgets idle entries
// without a sweeper: each stripe keeps a current and a previous generation
// and, once per period, drops the previous one and demotes the current. An
// entry touched at least once per period lives on; one idle for two periods
// is gone. That is exactly what per-client state with a short memory
// (token buckets, verified cookies) needs, at the cost of one map lookup
// more on a miss.
//
// Why not an expirable LRU (hashicorp/golang-lru/v2/expirable): its TTL
// runs from the last Add, not the last use, so keeping these semantics
// would cost an Add (a list move under its one lock) per heartbeat; it
// starts a cleanup goroutine per map that nothing can stop; and it keeps a
// list element per entry, some 100 bytes more for each of up to 2M
// sessions. BenchmarkSessionCache* (genmap_bench_test.go) measure both.
type genMap[V any] struct {
	period int64 // nanoseconds
	limit  int   // entries per stripe generation before an early rotation
	shards [genShards]genShard[V]
}

type genShard[V any] struct {
	mu        sync.Mutex
	cur, old  map[uint64]V
	rotatedAt int64
	_         [24]byte // keep stripes on separate cache lines
}

func newGenMap[V any](period time.Duration, maxEntries int) *genMap[V] {
	m := &genMap[V]{period: int64(period), limit: max(16, maxEntries/genShards/2)}
	for i := range m.shards {
		m.shards[i].cur = map[uint64]V{}
	}
	return m
}

// lock returns k's stripe, locked and rotated as due; the caller unlocks.
func (m *genMap[V]) lock(k uint64, now int64) *genShard[V] {
	sh := &m.shards[(k^k>>29)%genShards]
	sh.mu.Lock()
	if now-sh.rotatedAt >= m.period || len(sh.cur) >= m.limit {
		sh.old, sh.cur = sh.cur, make(map[uint64]V, len(sh.cur)/2+8)
		sh.rotatedAt = now
	}
	return sh
}

// get finds k in either generation, promoting it to the current one.
// The stripe must be locked.
func (sh *genShard[V]) get(k uint64) (V, bool) {
	if v, ok := sh.cur[k]; ok {
		return v, true
	}
	if v, ok := sh.old[k]; ok {
		delete(sh.old, k)
		sh.cur[k] = v
		return v, true
	}
	var zero V
	return zero, false
}

func (m *genMap[V]) Get(k uint64, now int64) (V, bool) {
	sh := m.lock(k, now)
	v, ok := sh.get(k)
	sh.mu.Unlock()
	return v, ok
}

func (m *genMap[V]) Put(k uint64, v V, now int64) {
	sh := m.lock(k, now)
	sh.cur[k] = v
	sh.mu.Unlock()
}

// Len counts the entries of both generations (approximate while in use).
func (m *genMap[V]) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.cur) + len(sh.old)
		sh.mu.Unlock()
	}
	return n
}
