package presence

import (
	"sync"
	"time"
)

// followerCounts remembers the follower-set sizes this process read in the
// last second, plus the followers it added since, so a subject followed by
// many users at once (a connect burst, where each new connection follows
// its contacts) has its size read once rather than once per follower: that
// read was a Redis command per followed user, a fifth of a connect's Redis
// work. A subject is read again when the remembered size comes within a
// tenth of max_followers of the cap or is older than followerCountsTTL.
// The cap was already approximate (sizes are read before the write, in
// other slots); what this adds is that followers added through other
// gateways within the last second are not seen, which the margin covers
// for all but a subject gaining a tenth of the cap in one second.
type followerCounts struct {
	max, margin int64
	ttl         time.Duration

	mu      sync.Mutex
	counts  map[string]int64
	resetAt time.Time
}

// followerCountsTTL is how long a size read is trusted.
const followerCountsTTL = time.Second

func newFollowerCounts(max int) *followerCounts {
	return &followerCounts{max: int64(max), margin: int64(max) / 10, ttl: followerCountsTTL, counts: map[string]int64{}, resetAt: time.Now()}
}

// unknown returns the positions in ids whose size must be read: not
// remembered, or too close to the cap to trust.
func (fc *followerCounts) unknown(ids []string) []int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.expireLocked()
	var out []int
	for i, id := range ids {
		n, ok := fc.counts[id]
		if !ok || n+fc.margin >= fc.max {
			out = append(out, i)
		}
	}
	return out
}

// read records a size just read.
func (fc *followerCounts) read(id string, n int64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.counts[id] = n
}

// added counts followers this process added to the subjects.
func (fc *followerCounts) added(ids []string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, id := range ids {
		if n, ok := fc.counts[id]; ok {
			fc.counts[id] = n + 1
		}
	}
}

// expireLocked forgets every size once a TTL has passed since the last
// reset: one map, dropped whole, so nothing ever sweeps entries one by one
// and the map holds only what the last second read.
func (fc *followerCounts) expireLocked() {
	now := time.Now()
	if now.Sub(fc.resetAt) < fc.ttl {
		return
	}
	fc.resetAt = now
	if len(fc.counts) > 0 {
		fc.counts = make(map[string]int64, len(fc.counts))
	}
}
