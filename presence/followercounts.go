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
// work. Followers asking while a read is on its way wait for it. A subject
// is read again when the remembered size comes within a tenth of
// max_followers of the cap or is older than followerCountsTTL. The cap was
// already approximate (sizes are read before the write, in other slots);
// what this adds is that followers added through other gateways within the
// last second are not seen, which the margin covers for all but a subject
// gaining a tenth of the cap in one second.
type followerCounts struct {
	max, margin int64
	ttl         time.Duration

	mu      sync.Mutex
	counts  map[string]*followerCount
	resetAt time.Time
}

// followerCount is one subject's size: n once read is closed.
type followerCount struct {
	read chan struct{}
	ok   bool  // the read succeeded; set before read is closed
	n    int64 // guarded by followerCounts.mu once read is closed
}

// followerCountsTTL is how long a size read is trusted.
const followerCountsTTL = time.Second

func newFollowerCounts(max int) *followerCounts {
	return &followerCounts{max: int64(max), margin: int64(max) / 10, ttl: followerCountsTTL,
		counts: map[string]*followerCount{}, resetAt: time.Now()}
}

// countClaim is what claim found for the subjects of one command.
type countClaim struct {
	mine    []int            // positions whose size the caller reads (then done)
	waiting []int            // positions whose size another caller is reading
	pending []*followerCount // their reads, in the order of waiting
	entries []*followerCount // the caller's reads, in the order of mine
}

// claim sorts ids into sizes known well below the cap (left out), sizes
// being read by someone else, and sizes the caller must read and report
// with done.
func (fc *followerCounts) claim(ids []string) countClaim {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.expireLocked()
	var c countClaim
	for i, id := range ids {
		e := fc.counts[id]
		switch {
		case e == nil:
		case !isClosed(e.read):
			c.waiting = append(c.waiting, i)
			c.pending = append(c.pending, e)
			continue
		case e.ok && e.n+fc.margin < fc.max:
			continue
		}
		e = &followerCount{read: make(chan struct{})}
		fc.counts[id] = e
		c.mine = append(c.mine, i)
		c.entries = append(c.entries, e)
	}
	return c
}

// done reports the sizes of the caller's claim: n[i] for entries[i], or a
// failed read (nil n), which leaves waiters to read for themselves.
func (fc *followerCounts) done(entries []*followerCount, n []int64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for i, e := range entries {
		if n != nil {
			e.n, e.ok = n[i], true
		}
		close(e.read)
	}
}

// trusted reports whether a size another caller read can stand in for the
// caller's own read: read, and well below the cap.
func (fc *followerCounts) trusted(e *followerCount) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return e.ok && e.n+fc.margin < fc.max
}

// added counts followers this process added to the subjects.
func (fc *followerCounts) added(ids []string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, id := range ids {
		if e := fc.counts[id]; e != nil && isClosed(e.read) && e.ok {
			e.n++
		}
	}
}

// expireLocked forgets every size once a TTL has passed since the last
// reset: one map, dropped whole, so nothing ever sweeps entries one by one
// and the map holds only what the last second read. Reads still on their
// way finish into entries their waiters hold.
func (fc *followerCounts) expireLocked() {
	now := time.Now()
	if now.Sub(fc.resetAt) < fc.ttl {
		return
	}
	fc.resetAt = now
	if len(fc.counts) > 0 {
		fc.counts = make(map[string]*followerCount, len(fc.counts))
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
