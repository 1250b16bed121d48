package viewers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

var errBreakerOpen = errors.New("viewers: count breaker open")

// countResult is one hotel's count, encoded once for every reader.
type countResult struct {
	hotel string
	count int64
	asOf  time.Time
	stale bool
	body  []byte // the JSON answer
	etag  string
}

func newResult(hotel string, n int64, asOf time.Time, stale bool) *countResult {
	r := &countResult{hotel: hotel, count: n, asOf: asOf, stale: stale}
	r.body = encodeCount(hotel, n, asOf, stale)
	if stale {
		r.etag = `W/"` + strconv.FormatInt(n, 10) + `-stale"`
	} else {
		r.etag = `W/"` + strconv.FormatInt(n, 10) + `"`
	}
	return r
}

// encodeCount renders {"hotel","count","approximate","stale","asOf"}. Hotel
// ids are validated to a charset that needs no JSON escaping.
func encodeCount(hotel string, n int64, asOf time.Time, stale bool) []byte {
	b := make([]byte, 0, 100+len(hotel))
	b = append(b, `{"hotel":"`...)
	b = append(b, hotel...)
	b = append(b, `","count":`...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, `,"approximate":true,"stale":`...)
	b = strconv.AppendBool(b, stale)
	b = append(b, `,"asOf":"`...)
	b = asOf.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `"}`...)
	return b
}

// countEntry is the cached count of one hotel. It outlives its freshness:
// after expiry it is the last known count, served stale when Redis fails.
type countEntry struct {
	res        *countResult
	expires    int64 // unix nanoseconds
	delta      int64 // how long the last recount took, for early refresh
	hits       atomic.Int32
	refreshing atomic.Bool
}

const countStripes = 32

type countCache struct {
	limit   int
	stripes [countStripes]struct {
		mu sync.RWMutex
		m  map[string]*countEntry
	}
}

func newCountCache(entries int) *countCache {
	c := &countCache{limit: max(1, entries/countStripes)}
	for i := range c.stripes {
		c.stripes[i].m = map[string]*countEntry{}
	}
	return c
}

func (c *countCache) get(hotel string) *countEntry {
	s := &c.stripes[stringHash(hotel)%countStripes]
	s.mu.RLock()
	e := s.m[hotel]
	s.mu.RUnlock()
	return e
}

// clear forgets every count.
func (c *countCache) clear() {
	for i := range c.stripes {
		s := &c.stripes[i]
		s.mu.Lock()
		clear(s.m)
		s.mu.Unlock()
	}
}

func (c *countCache) put(hotel string, e *countEntry) {
	s := &c.stripes[stringHash(hotel)%countStripes]
	s.mu.Lock()
	if _, ok := s.m[hotel]; !ok && len(s.m) >= c.limit {
		// Full: drop an arbitrary tenth (map order is random), which
		// costs a few recounts, never a wrong answer.
		n := len(s.m) / 10
		for k := range s.m {
			if n <= 0 {
				break
			}
			delete(s.m, k)
			n--
		}
	}
	s.m[hotel] = e
	s.mu.Unlock()
}

// peerMerger adds other regions' registers to a count.
type peerMerger interface {
	// bundles returns the peers' current HyperLogLog blobs for hotel;
	// peers that did not answer in time are left out.
	bundles(hotel string) [][]byte
}

// counter answers "how many are looking at this hotel": the cardinality of
// the union of every shard of the current and previous bucket. In front of
// Redis sit a one-second cache, singleflight (concurrent misses of a hotel
// share one read), XFetch early refresh for hot hotels, a timeout and a
// circuit breaker; when Redis fails the last known count is served stale.
type counter struct {
	rdb     redis.UniversalClient
	keys    keys
	tiers   *tierCache
	bucket  time.Duration
	ttl     time.Duration
	timeout time.Duration
	beta    float64
	peers   peerMerger
	breaker *breaker
	cache   *countCache
	sf      singleflight.Group
	m       *metrics
	log     *slog.Logger
}

// hotHits is how many reads within one cache period make a hotel hot for
// early refresh, besides having more than one shard.
const hotHits = 5

// counterConfig tunes a counter.
type counterConfig struct {
	Bucket           time.Duration // HyperLogLog bucket
	CacheTTL         time.Duration // how long a count is served from cache
	Timeout          time.Duration // bound of one store read
	EarlyRefreshBeta float64       // probabilistic early refresh (0: off)
	BreakerFailures  int           // failures that open the breaker
	BreakerCooldown  time.Duration // open time before a probe
	CacheEntries     int           // hotels kept in the cache
}

func newCounter(rdb redis.UniversalClient, k keys, tiers *tierCache, cc counterConfig, m *metrics, log *slog.Logger) *counter {
	c := &counter{
		rdb: rdb, keys: k, tiers: tiers, bucket: cc.Bucket, ttl: cc.CacheTTL, timeout: cc.Timeout, beta: cc.EarlyRefreshBeta,
		cache: newCountCache(cc.CacheEntries), m: m, log: log,
	}
	c.breaker = newBreaker(cc.BreakerFailures, cc.BreakerCooldown, func(s int) { m.breakerState.Set(float64(s)) })
	return c
}

// get returns the hotel's count: cached, recounted, or the last known one
// marked stale. It fails only when Redis fails and nothing is known yet.
func (c *counter) get(hotel string) (*countResult, error) {
	start := time.Now()
	e := c.cache.get(hotel)
	if e != nil && start.UnixNano() < e.expires {
		c.m.countCache.WithLabelValues("hit").Inc()
		if c.refreshEarly(e, hotel, start) {
			c.m.countCache.WithLabelValues("early_refresh").Inc()
			go func() {
				defer e.refreshing.Store(false)
				_, _, _ = c.sf.Do(hotel, func() (any, error) { return c.fetch(hotel) })
			}()
		}
		c.m.countDuration.WithLabelValues("cache").Observe(time.Since(start).Seconds())
		return e.res, nil
	}
	c.m.countCache.WithLabelValues("miss").Inc()
	v, err, _ := c.sf.Do(hotel, func() (any, error) { return c.fetch(hotel) })
	if err == nil {
		c.m.countDuration.WithLabelValues("store").Observe(time.Since(start).Seconds())
		return v.(*countResult), nil
	}
	if e == nil {
		e = c.cache.get(hotel)
	}
	if e == nil {
		return nil, err
	}
	c.m.staleServes.Inc()
	c.m.countDuration.WithLabelValues("stale").Observe(time.Since(start).Seconds())
	return newResult(hotel, e.res.count, e.res.asOf, true), nil
}

// refreshEarly is XFetch (Vattani et al.): a hot hotel's entry is
// recounted before it expires with a probability that grows as expiry
// nears, scaled by how long a recount takes, so a popular count is never
// found expired by a crowd of readers at once. At most one early refresh
// runs per entry.
func (c *counter) refreshEarly(e *countEntry, hotel string, now time.Time) bool {
	if c.beta == 0 {
		return false
	}
	hits := e.hits.Add(1)
	if hits < hotHits && !c.tiers.get(hotel).hot() {
		return false
	}
	gap := float64(e.delta) * c.beta * -math.Log(1-rand.Float64())
	if now.UnixNano()+int64(gap) < e.expires {
		return false
	}
	return e.refreshing.CompareAndSwap(false, true)
}

// fetch recounts a hotel from Redis (and the peers' bundles).
func (c *counter) fetch(hotel string) (*countResult, error) {
	now := time.Now()
	done, allowed := c.breaker.allow()
	if !allowed {
		return nil, errBreakerOpen
	}
	var blobs [][]byte
	if c.peers != nil {
		blobs = c.peers.bundles(hotel)
	}
	tier := c.tiers.get(hotel)
	keys := c.keys.window(hotel, bucketOf(now, c.bucket), tier.readShards())
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	start := time.Now()
	var n int64
	var err error
	if len(blobs) > 0 {
		n, err = c.mergedCount(ctx, hotel, keys, blobs)
	} else {
		n, err = c.rdb.PFCount(ctx, keys...).Result()
		c.m.redisCommands.WithLabelValues("pfcount").Inc()
	}
	done(err)
	if err != nil {
		c.m.countErrors.Inc()
		return nil, fmt.Errorf("count %s: %w", hotel, err)
	}
	res := newResult(hotel, n, now, false)
	c.cache.put(hotel, &countEntry{res: res, expires: now.Add(c.ttl).UnixNano(), delta: int64(time.Since(start))})
	return res, nil
}

// observe takes a count published by another process into the cache when
// it is newer than what is cached.
func (c *counter) observe(res *countResult) {
	if res.stale {
		return
	}
	if e := c.cache.get(res.hotel); e != nil && !e.res.asOf.Before(res.asOf) {
		return
	}
	c.cache.put(res.hotel, &countEntry{res: res, expires: res.asOf.Add(c.ttl).UnixNano()})
}

// recount reads the hotel from Redis now (sharing an in-flight read).
func (c *counter) recount(hotel string) (*countResult, error) {
	v, err, _ := c.sf.Do(hotel, func() (any, error) { return c.fetch(hotel) })
	if err != nil {
		return nil, err
	}
	return v.(*countResult), nil
}
