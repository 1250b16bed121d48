package viewers

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
)

// sessionLimiter is the per-session token bucket. It lives in process:
// whichever ingest process a session reaches enforces it, and a session
// idle for a few seconds simply starts with a full bucket again.
//
// The bucket is two words kept by value in the session map and updated
// under the stripe lock the lookup takes anyway: x/time/rate's Limiter
// would cost an allocation per new session, a pointer to chase and a lock
// of its own on every heartbeat (BenchmarkSessionLimiter).
type sessionLimiter struct {
	perNs   float64 // tokens per nanosecond
	burst   float64
	buckets *genMap[tokenBucket]
}

type tokenBucket struct {
	tokens float64
	at     int64 // unix nanoseconds tokens was computed for
}

func newSessionLimiter(perSecond float64, burst int, maxEntries int) *sessionLimiter {
	// A bucket idle for burst/rate is full again; remembering it longer
	// changes nothing.
	idle := time.Duration(float64(burst)/perSecond*float64(time.Second)) + time.Second
	return &sessionLimiter{
		perNs:   perSecond / float64(time.Second),
		burst:   float64(burst),
		buckets: newGenMap[tokenBucket](max(idle, 5*time.Second), maxEntries),
	}
}

// allow takes a token for session hash and, when none is left, says how
// long until one is.
func (l *sessionLimiter) allow(hash uint64, now int64) (bool, time.Duration) {
	sh := l.buckets.lock(hash, now)
	b, ok := sh.get(hash)
	if !ok {
		b = tokenBucket{tokens: l.burst, at: now}
	}
	if now > b.at {
		b.tokens = min(l.burst, b.tokens+float64(now-b.at)*l.perNs)
		b.at = now
	}
	allowed := b.tokens >= 1
	if allowed {
		b.tokens--
	}
	sh.cur[hash] = b
	sh.mu.Unlock()
	if allowed {
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.perNs)
}

// prefixKey packs an IPv4 /24 or IPv6 /48 into a uint64: IPv6 prefixes
// take the low 48 bits, IPv4 ones are marked by bit 48.
type prefixKey uint64

const v4Mark = 1 << 48

func prefixOf(ip string) (prefixKey, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return 0, false
	}
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return prefixKey(v4Mark | uint64(b[0])<<16 | uint64(b[1])<<8 | uint64(b[2])), true
	}
	b := a.As16()
	return prefixKey(uint64(b[0])<<40 | uint64(b[1])<<32 | uint64(b[2])<<24 | uint64(b[3])<<16 | uint64(b[4])<<8 | uint64(b[5])), true
}

// String renders the prefix in CIDR notation.
func (p prefixKey) String() string {
	if p&v4Mark != 0 {
		return strconv.Itoa(int(p>>16&0xff)) + "." + strconv.Itoa(int(p>>8&0xff)) + "." + strconv.Itoa(int(p&0xff)) + ".0/24"
	}
	var b [16]byte
	for i := 0; i < 6; i++ {
		b[i] = byte(p >> (40 - 8*i))
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), 48).String()
}

// parsePrefix reverses String.
func parsePrefix(s string) (prefixKey, bool) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return 0, false
	}
	if p.Addr().Is4() && p.Bits() == 24 {
		return prefixOf(p.Addr().String())
	}
	if p.Addr().Is6() && p.Bits() == 48 {
		return prefixOf(p.Addr().String())
	}
	return 0, false
}

//go:embed lua/prefix_bucket.lua
var prefixBucketLua string

var prefixBucketScript = store.NewScript("viewers_prefix_bucket", prefixBucketLua)

// prefixLimiter is the global per-prefix bucket. Asking Redis on every
// heartbeat would cost a round trip each; instead a prefix is admitted
// locally and debited from its shared bucket in batches: once it has sent
// prefix_sync_threshold heartbeats to this process since the last debit,
// the next sync (every prefix_sync_interval) takes them from the bucket in
// Redis. A bucket in debt blocks the prefix on this process until paid
// back. The price is a bounded overshoot: up to one sync interval of
// traffic, and prefixes that stay below the threshold on every process are
// never checked (with P ingest processes, below P x threshold per sync
// window). When Redis does not answer the limiter fails open and counts
// the heartbeats it let through unchecked.
type prefixLimiter struct {
	rdb       redis.UniversalClient
	keys      keys
	rate      float64
	burst     int
	threshold int32
	interval  time.Duration
	log       *slog.Logger
	m         *metrics

	mu     sync.RWMutex
	states map[prefixKey]*prefixState
}

type prefixState struct {
	pending      atomic.Int32
	blockedUntil atomic.Int64 // unix nanoseconds
	lastSeen     atomic.Int64
}

// prefixConfig tunes the global prefix buckets.
type prefixConfig struct {
	Rate          float64       // heartbeats per second per prefix
	Burst         int           // bucket size
	SyncThreshold int           // local heartbeats of a prefix before Redis is asked
	SyncInterval  time.Duration // at most one Redis check per prefix this often
}

func newPrefixLimiter(rdb redis.UniversalClient, k keys, c prefixConfig, m *metrics, log *slog.Logger) *prefixLimiter {
	return &prefixLimiter{
		rdb: rdb, keys: k, rate: c.Rate, burst: c.Burst, threshold: int32(c.SyncThreshold),
		interval: c.SyncInterval, m: m, log: log, states: map[prefixKey]*prefixState{},
	}
}

// allow admits a heartbeat from prefix p unless p is blocked.
func (l *prefixLimiter) allow(p prefixKey, now int64) (bool, time.Duration) {
	l.mu.RLock()
	st := l.states[p]
	l.mu.RUnlock()
	if st == nil {
		l.mu.Lock()
		if st = l.states[p]; st == nil {
			st = &prefixState{}
			l.states[p] = st
		}
		l.mu.Unlock()
	}
	if until := st.blockedUntil.Load(); until > now {
		return false, time.Duration(until - now)
	}
	st.pending.Add(1)
	if st.lastSeen.Load() < now-int64(time.Second) {
		st.lastSeen.Store(now)
	}
	return true, 0
}

// run syncs heavy prefixes with Redis until ctx ends.
func (l *prefixLimiter) run(ctx context.Context) error {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			l.sync(ctx)
		}
	}
}

type prefixDebit struct {
	p   prefixKey
	st  *prefixState
	n   int32
	cmd *redis.Cmd
}

func (l *prefixLimiter) sync(ctx context.Context) {
	now := time.Now().UnixNano()
	var debits []prefixDebit
	var idle []prefixKey
	l.mu.RLock()
	for p, st := range l.states {
		if n := st.pending.Load(); n >= l.threshold {
			debits = append(debits, prefixDebit{p: p, st: st, n: st.pending.Swap(0)})
		} else if st.lastSeen.Load() < now-int64(time.Minute) && st.blockedUntil.Load() < now {
			idle = append(idle, p)
		}
	}
	l.mu.RUnlock()
	if len(idle) > 0 {
		l.mu.Lock()
		for _, p := range idle {
			if st := l.states[p]; st != nil && st.lastSeen.Load() < now-int64(time.Minute) {
				delete(l.states, p)
			}
		}
		l.mu.Unlock()
	}
	// Small amounts below the threshold are forgotten once a second, so a
	// quiet prefix never reaches Redis.
	if now/int64(time.Second) != (now-int64(l.interval))/int64(time.Second) {
		l.mu.RLock()
		for _, st := range l.states {
			if st.pending.Load() < l.threshold {
				st.pending.Store(0)
			}
		}
		l.mu.RUnlock()
	}
	if len(debits) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, max(l.interval, 100*time.Millisecond))
	defer cancel()
	if err := l.debit(ctx, debits); err != nil {
		var unchecked int
		for _, d := range debits {
			unchecked += int(d.n)
		}
		l.m.limitFailOpen.Add(float64(unchecked))
		l.m.limitErrors.Inc()
		l.log.Debug("viewers: prefix limiter fails open", "err", err)
		return
	}
	rate := l.rate / float64(time.Second)
	for _, d := range debits {
		left, err := d.cmd.Int64()
		if err != nil {
			continue
		}
		if left < 0 {
			wait := int64(float64(-left) / 1000 / rate)
			d.st.blockedUntil.Store(now + max(wait, int64(l.interval)))
			l.m.prefixBlocks.Inc()
		}
	}
}

func (l *prefixLimiter) debit(ctx context.Context, debits []prefixDebit) error {
	err := prefixBucketScript.Pipelined(ctx, l.rdb, func(pipe redis.Pipeliner) {
		for i := range debits {
			d := &debits[i]
			d.cmd = prefixBucketScript.Queue(ctx, pipe, []string{l.keys.prefixBucket(d.p.String())}, l.rate, l.burst, d.n)
		}
	})
	if err != nil {
		return fmt.Errorf("prefix buckets: %w", err)
	}
	return nil
}
