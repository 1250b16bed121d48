package viewers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/store"
)

var (
	errWriteDown = errors.New("viewers: the counting store is failing")
	errOverload  = errors.New("viewers: too many heartbeats waiting for the counting store")
)

// pendingKey names one HyperLogLog key: a hotel's shard in a bucket.
type pendingKey struct {
	hotel  string
	bucket int64
	shard  int
}

const writerStripes = 32

// buffer collects session hashes per key between two flushes of a class.
type buffer struct {
	stripes [writerStripes]struct {
		mu sync.Mutex
		m  map[pendingKey][]uint64
		_  [40]byte
	}
}

func newBuffer() *buffer {
	b := &buffer{}
	for i := range b.stripes {
		b.stripes[i].m = map[pendingKey][]uint64{}
	}
	return b
}

// batch is what one key gets in one flush.
type batch struct {
	key    pendingKey
	hashes []uint64
	adds   int // heartbeats before de-duplication
}

// swap takes everything buffered, leaving empty maps behind.
func (b *buffer) swap() []batch {
	var out []batch
	for i := range b.stripes {
		s := &b.stripes[i]
		s.mu.Lock()
		m := s.m
		if len(m) == 0 {
			s.mu.Unlock()
			continue
		}
		s.m = make(map[pendingKey][]uint64, len(m))
		s.mu.Unlock()
		for k, hs := range m {
			out = append(out, batch{key: k, hashes: hs, adds: len(hs)})
		}
	}
	return out
}

// writer is the coalescing write path. A heartbeat appends its session
// hash to an in-memory buffer; every flush window each (hotel, shard,
// bucket) that received any becomes one PFADD carrying all of them, and all
// hotels of a flush travel in one pipeline. However many viewers a hotel
// has, Redis sees at most one write per shard per window from this process.
//
// A heartbeat is never lost silently: a failed flush is retried once; if
// the retry fails too its hashes are counted as lost, and the write path
// refuses heartbeats (503, fast) until a probe finds Redis answering again.
type writer struct {
	rdb        redis.UniversalClient
	keys       keys
	bucket     time.Duration
	windows    [2]time.Duration // normal, hot
	timeout    time.Duration
	probeEvery time.Duration
	maxPending int64
	log        *slog.Logger
	m          *metrics

	classes [2]*buffer
	// flushing serialises the flushes of a class, so flush() returns only
	// once what was buffered before it is in Redis.
	flushing [2]sync.Mutex
	pending  atomic.Int64
	healthy  atomic.Bool

	mu       sync.Mutex       // guards expiring and rates, shared by both flush loops
	expiring map[string]int64 // keys whose expiry this process set, by bucket
	rates    map[string]int64 // adds per hotel since the last rate report
}

// writerConfig tunes a writer.
type writerConfig struct {
	Bucket     time.Duration // HyperLogLog bucket
	Flush      time.Duration // flush window of ordinary hotels
	HotFlush   time.Duration // flush window of hot hotels
	Timeout    time.Duration // bound of one flush
	Probe      time.Duration // how often a down Redis is probed
	MaxPending int           // sessions buffered before refusing
}

func newWriter(rdb redis.UniversalClient, k keys, c writerConfig, m *metrics, log *slog.Logger) *writer {
	w := &writer{
		rdb: rdb, keys: k, bucket: c.Bucket, windows: [2]time.Duration{c.Flush, c.HotFlush},
		timeout: c.Timeout, probeEvery: c.Probe, maxPending: int64(c.MaxPending), m: m, log: log,
		classes:  [2]*buffer{newBuffer(), newBuffer()},
		expiring: map[string]int64{},
		rates:    map[string]int64{},
	}
	w.healthy.Store(true)
	return w
}

// add buffers one heartbeat of session hash for hotel.
func (w *writer) add(hotel string, hash uint64, tier shardTier, now time.Time) error {
	if !w.healthy.Load() {
		return errWriteDown
	}
	if w.pending.Load() >= w.maxPending {
		return errOverload
	}
	class := 0
	if tier.hot() {
		class = 1
	}
	// The shard follows from the session, so a session stays in one shard
	// within a tier; the union over shards makes the choice invisible.
	k := pendingKey{hotel: hotel, bucket: bucketOf(now, w.bucket), shard: int((hash >> 32) % uint64(tier.Write))}
	s := &w.classes[class].stripes[stringHash(hotel)%writerStripes]
	s.mu.Lock()
	s.m[k] = append(s.m[k], hash)
	s.mu.Unlock()
	w.pending.Add(1)
	return nil
}

// stringHash is FNV-1a, inlined to stay allocation free.
func stringHash(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// run flushes both classes on their windows and probes a failed Redis,
// until ctx ends; then it flushes what is left.
func (w *writer) run(ctx context.Context) error {
	var wg sync.WaitGroup
	for class := range w.classes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(w.windows[class])
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					w.flushClass(ctx, class)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.probeLoop(ctx)
	}()
	wg.Wait()
	// Shutdown: what was accepted is still written.
	final, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	for class := range w.classes {
		w.flushClass(final, class)
	}
	return nil
}

// flush writes everything buffered now (both classes); tests and shutdown
// use it.
func (w *writer) flush(ctx context.Context) error {
	var errs []error
	for class := range w.classes {
		errs = append(errs, w.flushClass(ctx, class))
	}
	return errors.Join(errs...)
}

func (w *writer) flushClass(ctx context.Context, class int) error {
	w.flushing[class].Lock()
	defer w.flushing[class].Unlock()
	batches := w.classes[class].swap()
	if len(batches) == 0 {
		return nil
	}
	var hashes int64
	for _, b := range batches {
		hashes += int64(b.adds)
	}
	defer func() {
		w.m.pending.Set(float64(w.pending.Add(-hashes)))
	}()
	err := w.write(ctx, batches)
	if err != nil {
		w.m.flushFailures.WithLabelValues("retried").Inc()
		err = w.write(ctx, batches)
	}
	if err != nil {
		w.m.flushFailures.WithLabelValues("lost").Inc()
		w.m.lost.Add(float64(hashes))
		if w.healthy.Swap(false) {
			w.m.writeHealthy.Set(0)
			w.log.Error("viewers: flush failed twice; refusing heartbeats until Redis answers", "hashes", hashes, "err", err)
		}
		return err
	}
	w.noteRates(batches)
	return nil
}

// write sends one pipeline: a PFADD per key, and the key's expiry the first
// time this process writes it (the expiry is absolute, so once is enough).
func (w *writer) write(ctx context.Context, batches []batch) error {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	start := time.Now()
	pipe := w.rdb.Pipeline()
	var newKeys []string
	var newBuckets []int64
	w.mu.Lock()
	for i := range batches {
		b := &batches[i]
		key := w.keys.hll(b.key.hotel, b.key.bucket, b.key.shard)
		if len(b.hashes) > 1 {
			slices.Sort(b.hashes)
			b.hashes = slices.Compact(b.hashes)
		}
		args := make([]any, len(b.hashes))
		for j, h := range b.hashes {
			args[j] = h
		}
		pipe.PFAdd(ctx, key, args...)
		w.m.flushBatch.Observe(float64(len(b.hashes)))
		if _, ok := w.expiring[key]; !ok {
			pipe.PExpireAt(ctx, key, bucketExpiry(b.key.bucket, w.bucket))
			newKeys = append(newKeys, key)
			newBuckets = append(newBuckets, b.key.bucket)
		}
	}
	w.mu.Unlock()
	_, err := pipe.Exec(ctx)
	w.m.flushDuration.Observe(time.Since(start).Seconds())
	w.m.redisCommands.WithLabelValues("pfadd").Add(float64(len(batches)))
	w.m.redisCommands.WithLabelValues("pexpireat").Add(float64(len(newKeys)))
	if err != nil {
		return fmt.Errorf("flush %d keys: %w", len(batches), err)
	}
	w.m.flushWrites.Add(float64(len(batches)))
	w.mu.Lock()
	for i, k := range newKeys {
		w.expiring[k] = newBuckets[i]
	}
	// Forget keys of buckets that can no longer be written.
	cur := bucketOf(time.Now(), w.bucket)
	if len(w.expiring) > 4096 || len(newKeys) > 0 {
		for k, b := range w.expiring {
			if b < cur-1 {
				delete(w.expiring, k)
			}
		}
	}
	w.mu.Unlock()
	return nil
}

func (w *writer) noteRates(batches []batch) {
	w.mu.Lock()
	for _, b := range batches {
		w.rates[b.key.hotel] += int64(b.adds)
	}
	w.mu.Unlock()
}

// takeRates returns the adds per hotel since the last call.
func (w *writer) takeRates() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.rates
	w.rates = make(map[string]int64, len(r))
	return r
}

func (w *writer) probeLoop(ctx context.Context) {
	t := time.NewTicker(w.probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.healthy.Load() {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, w.timeout)
			err := store.PingRedis(pctx, w.rdb)
			cancel()
			if err == nil {
				w.healthy.Store(true)
				w.m.writeHealthy.Set(1)
				w.log.Info("viewers: Redis answers again; accepting heartbeats")
			}
		}
	}
}
