package viewers

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// hbRecord is the metadata of one accepted heartbeat, as the abuse scanner
// sees it.
type hbRecord struct {
	hotel   string
	session uint64
	prefix  prefixKey
	ua      uint64 // FNV-1a of the User-Agent
	at      int64  // unix milliseconds
	flags   byte
}

// Record flags.
const (
	flagNewSession = 1 << iota // the session was issued by this heartbeat
	flagReplaced               // ... because a presented cookie was refused
)

const recordFormat = "1"

// appendRecord encodes r: hotel length (1 byte), hotel, session, prefix,
// user agent hash, time (8 bytes each, little endian), flags.
func appendRecord(b []byte, hotel string, session uint64, prefix prefixKey, ua uint64, at int64, flags byte) []byte {
	b = append(b, byte(len(hotel)))
	b = append(b, hotel...)
	b = binary.LittleEndian.AppendUint64(b, session)
	b = binary.LittleEndian.AppendUint64(b, uint64(prefix))
	b = binary.LittleEndian.AppendUint64(b, ua)
	b = binary.LittleEndian.AppendUint64(b, uint64(at))
	return append(b, flags)
}

var errBadRecord = errors.New("malformed heartbeat record")

// decodeRecords parses a blob of n records; anything off is an error, and
// the entry is poison.
func decodeRecords(blob []byte, n int) ([]hbRecord, error) {
	out := make([]hbRecord, 0, n)
	for len(blob) > 0 {
		l := int(blob[0])
		if l == 0 || l > maxHotelID || len(blob) < 1+l+33 {
			return nil, errBadRecord
		}
		r := hbRecord{hotel: string(blob[1 : 1+l])}
		if !validHotel(r.hotel) {
			return nil, errBadRecord
		}
		p := blob[1+l:]
		r.session = binary.LittleEndian.Uint64(p)
		r.prefix = prefixKey(binary.LittleEndian.Uint64(p[8:]))
		r.ua = binary.LittleEndian.Uint64(p[16:])
		r.at = int64(binary.LittleEndian.Uint64(p[24:]))
		r.flags = p[32]
		out = append(out, r)
		blob = p[33:]
	}
	if len(out) != n {
		return nil, errBadRecord
	}
	return out, nil
}

// uaHash is FNV-1a 64 of a User-Agent, without allocating.
func uaHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// recorder sends heartbeat metadata to a capped, partitioned Redis stream
// for the abuse scanner. Records are packed, up to stream_batch per entry,
// and flushed every stream_flush: the stream costs Redis a few entries per
// second, not one write per heartbeat. A session always maps to the same
// partition, so one scanner sees all of a session's heartbeats. The stream
// must never hurt the page: when Redis fails or the buffer is full, records
// are dropped and counted.
type recorder struct {
	rdb      redis.UniversalClient
	keys     keys
	maxLen   int64
	batch    int
	every    time.Duration
	maxBytes int
	m        *metrics
	log      *slog.Logger

	parts []recPartition
}

type recPartition struct {
	mu     sync.Mutex
	chunks [][]byte // full entries waiting
	cur    []byte
	n      int // records in cur
	counts []int
	bytes  int
}

// recorderConfig tunes a recorder.
type recorderConfig struct {
	Partitions int           // stream partitions
	MaxLen     int64         // entries kept per partition
	Batch      int           // records per stream entry
	Flush      time.Duration // how often buffered records are written
}

func newRecorder(rdb redis.UniversalClient, k keys, c recorderConfig, m *metrics, log *slog.Logger) *recorder {
	return &recorder{
		rdb: rdb, keys: k, maxLen: c.MaxLen, batch: c.Batch, every: c.Flush, maxBytes: 64 << 20 / c.Partitions,
		m: m, log: log, parts: make([]recPartition, c.Partitions),
	}
}

func (r *recorder) partitionOf(session uint64) int { return int(session % uint64(len(r.parts))) }

func (r *recorder) record(hotel string, session uint64, prefix prefixKey, ua uint64, at time.Time, flags byte) {
	p := &r.parts[r.partitionOf(session)]
	p.mu.Lock()
	if p.bytes >= r.maxBytes {
		p.mu.Unlock()
		r.m.streamRecords.WithLabelValues("dropped").Inc()
		return
	}
	before := len(p.cur)
	p.cur = appendRecord(p.cur, hotel, session, prefix, ua, at.UnixMilli(), flags)
	p.bytes += len(p.cur) - before
	p.n++
	if p.n >= r.batch {
		p.chunks = append(p.chunks, p.cur)
		p.counts = append(p.counts, p.n)
		p.cur, p.n = make([]byte, 0, len(p.cur)), 0
	}
	p.mu.Unlock()
}

func (r *recorder) run(ctx context.Context) error {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			r.flush(fctx)
			cancel()
			return nil
		case <-t.C:
			r.flush(ctx)
		}
	}
}

// flush writes every buffered entry, one pipeline for all partitions.
func (r *recorder) flush(ctx context.Context) error {
	type entry struct {
		part int
		blob []byte
		n    int
	}
	var entries []entry
	for i := range r.parts {
		p := &r.parts[i]
		p.mu.Lock()
		if p.n > 0 {
			p.chunks = append(p.chunks, p.cur)
			p.counts = append(p.counts, p.n)
			p.cur, p.n = nil, 0
		}
		for j, c := range p.chunks {
			entries = append(entries, entry{part: i, blob: c, n: p.counts[j]})
		}
		p.chunks, p.counts, p.bytes = nil, nil, 0
		p.mu.Unlock()
	}
	if len(entries) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pipe := r.rdb.Pipeline()
	records := 0
	for _, e := range entries {
		records += e.n
		pipe.XAdd(ctx, &redis.XAddArgs{
			Stream: r.keys.stream(e.part), MaxLen: r.maxLen, Approx: true,
			Values: []any{"v", recordFormat, "n", strconv.Itoa(e.n), "b", e.blob},
		})
	}
	_, err := pipe.Exec(ctx)
	r.m.redisCommands.WithLabelValues("xadd").Add(float64(len(entries)))
	if err != nil {
		r.m.streamRecords.WithLabelValues("dropped").Add(float64(records))
		r.log.Debug("viewers: heartbeat stream write failed; records dropped", "records", records, "err", err)
		return fmt.Errorf("heartbeat stream: %w", err)
	}
	r.m.streamRecords.WithLabelValues("written").Add(float64(records))
	return nil
}
