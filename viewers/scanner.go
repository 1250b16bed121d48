package viewers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/streams"
	"github.com/presenced/presenced/store"
)

// scanGroup is the consumer group of the abuse scanners.
const scanGroup = "viewers-abuse"

// scanner is the abuse scanner (worker role). The heartbeat stream is split
// into partitions by session; each partition is scanned by one worker at a
// time, which holds a lease on it, so per-session windows see a session's
// whole traffic. Several workers share the partitions fairly (each takes
// its share of the partitions over the live workers). Entries are read
// through a consumer group: an entry is acknowledged once scored; one that
// fails stays pending, is reclaimed after abuse_claim_idle (also from a
// worker that died holding it) and tried again, and after abuse_max_tries
// it goes to the dead-letter stream. Verdicts are written to
// viewers_denylist, which the ingest plane reads through its cache.
type scanner struct {
	rdb      redis.UniversalClient
	db       *pgxpool.Pool
	keys     keys
	cfg      config.Viewers
	m        *metrics
	log      *slog.Logger
	id       string
	group    *streams.Group
	leaseTTL time.Duration

	owned   map[int]*scanPartition
	ownedN  atomic.Int32 // len(owned), readable from other goroutines
	pending []verdict    // verdicts not yet in PostgreSQL
}

type scanPartition struct {
	n     int
	lease *store.Lease
	rules *rules
}

func (mod *Module) newScanner() *scanner {
	id := "scanner-" + store.NewToken()[:12]
	return &scanner{
		rdb: mod.rdb, db: mod.db, keys: mod.keys, cfg: mod.cfg, m: mod.m, log: mod.log,
		id: id, group: streams.NewGroup(mod.rdb, scanGroup, id), leaseTTL: max(time.Second, 5*mod.cfg.AbuseBlock),
		owned: map[int]*scanPartition{},
	}
}

func (s *scanner) run(ctx context.Context) error {
	defer s.releaseAll()
	for ctx.Err() == nil {
		if err := s.rebalance(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("viewers: abuse scanner cannot coordinate; retrying", "err", err)
			sleep(ctx, s.cfg.AbuseBlock)
			continue
		}
		if len(s.owned) == 0 {
			sleep(ctx, s.cfg.AbuseBlock)
			continue
		}
		block := max(10*time.Millisecond, s.cfg.AbuseBlock/time.Duration(len(s.owned)))
		for _, p := range s.owned {
			if err := s.scan(ctx, p, block); err != nil && ctx.Err() == nil {
				s.log.Debug("viewers: scan failed", "partition", p.n, "err", err)
				sleep(ctx, block)
			}
		}
		s.writeVerdicts(ctx)
		s.reportLag(ctx)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// rebalance renews this worker's registration and leases, takes free
// partitions up to its fair share and gives back any above it.
func (s *scanner) rebalance(ctx context.Context) error {
	now := time.Now()
	reg := s.keys.scanners()
	pipe := s.rdb.Pipeline()
	pipe.ZAdd(ctx, reg, redis.Z{Score: float64(now.UnixMilli()), Member: s.id})
	pipe.ZRemRangeByScore(ctx, reg, "-inf", strconv.FormatInt(now.Add(-3*s.leaseTTL).UnixMilli(), 10))
	live := pipe.ZCard(ctx, reg)
	pipe.Expire(ctx, reg, 10*s.leaseTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("register scanner: %w", err)
	}
	parts := s.cfg.StreamPartitions
	share := (parts + int(max(1, live.Val())) - 1) / int(max(1, live.Val()))
	for n := 0; n < parts; n++ {
		p := s.owned[n]
		if p != nil {
			ok, err := p.lease.TryAcquire(ctx)
			if err != nil {
				return err
			}
			if !ok || len(s.owned) > share {
				if ok {
					_ = p.lease.Release(ctx)
				}
				delete(s.owned, n)
			}
			continue
		}
		if len(s.owned) >= share {
			continue
		}
		lease := store.NewLease(s.rdb, s.keys.partitionLease(n), s.leaseTTL)
		ok, err := lease.TryAcquire(ctx)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := s.group.Create(ctx, s.keys.stream(n)); err != nil {
			_ = lease.Release(ctx)
			return err
		}
		s.owned[n] = &scanPartition{n: n, lease: lease, rules: newRules(s.cfg)}
	}
	s.ownedN.Store(int32(len(s.owned)))
	s.m.scannerParts.Set(float64(len(s.owned)))
	return nil
}

func (s *scanner) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for n, p := range s.owned {
		_ = p.lease.Release(ctx)
		delete(s.owned, n)
	}
	_ = s.rdb.ZRem(ctx, s.keys.scanners(), s.id).Err()
	s.m.scannerParts.Set(0)
}

// scan reclaims stuck entries of partition p, then reads new ones. An
// entry tried abuse_max_tries times goes to the dead-letter stream.
func (s *scanner) scan(ctx context.Context, p *scanPartition, block time.Duration) error {
	stream := s.keys.stream(p.n)
	claimed, err := s.group.Reclaim(ctx, stream, streams.Reclaim{
		MinIdle: s.cfg.AbuseClaimIdle, Count: 100,
		MaxDeliveries: int64(s.cfg.AbuseMaxTries), DeadLetter: s.keys.deadLetters(),
	})
	if claimed.Dead > 0 {
		s.m.deadLetters.Add(float64(claimed.Dead))
		s.log.Warn("viewers: heartbeat entries moved to the dead-letter stream", "partition", p.n, "entries", claimed.Dead)
	}
	s.m.reclaimed.Add(float64(len(claimed.Entries)))
	for _, msg := range claimed.Entries {
		s.handle(ctx, p, stream, msg)
	}
	if err != nil {
		return err
	}
	read, err := s.group.Read(ctx, 64, block, stream)
	for _, msg := range read[stream] {
		s.handle(ctx, p, stream, msg)
	}
	return err
}

// handle scores one entry and acknowledges it; an entry that cannot be
// scored stays pending for a retry.
func (s *scanner) handle(ctx context.Context, p *scanPartition, stream string, msg redis.XMessage) {
	recs, err := decodeEntry(msg.Values)
	if err != nil {
		s.log.Warn("viewers: unreadable heartbeat entry; it will be retried", "stream", stream, "id", msg.ID, "err", err)
		return
	}
	for _, rec := range recs {
		s.pending = p.rules.apply(rec, s.pending)
	}
	s.m.streamRecords.WithLabelValues("scanned").Add(float64(len(recs)))
	if err := s.group.Ack(ctx, stream, msg.ID); err != nil {
		s.log.Debug("viewers: ack failed", "err", err)
	}
}

func decodeEntry(v map[string]any) ([]hbRecord, error) {
	if v["v"] != recordFormat {
		return nil, fmt.Errorf("unknown record format %v", v["v"])
	}
	ns, _ := v["n"].(string)
	n, err := strconv.Atoi(ns)
	if err != nil || n <= 0 {
		return nil, errors.New("bad record count")
	}
	blob, _ := v["b"].(string)
	return decodeRecords([]byte(blob), n)
}

// writeVerdicts upserts pending verdicts; on failure they wait for the next
// round (bounded, oldest dropped).
func (s *scanner) writeVerdicts(ctx context.Context) {
	if len(s.pending) == 0 {
		return
	}
	const maxPending = 10000
	if len(s.pending) > maxPending {
		s.pending = s.pending[len(s.pending)-maxPending:]
	}
	n := len(s.pending)
	subjects, rulesCol, reasons, expires := make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i, v := range s.pending {
		subjects[i], rulesCol[i], reasons[i], expires[i] = v.subject, v.rule, v.reason, v.expires
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.db.Exec(wctx, `INSERT INTO viewers_denylist (subject, rule, reason, expires_at)
		SELECT DISTINCT ON (subject) subject, rule, reason, expires_at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS v(subject, rule, reason, expires_at)
		WHERE expires_at > now()
		ORDER BY subject, expires_at DESC
		ON CONFLICT (subject) DO UPDATE SET
			rule = EXCLUDED.rule, reason = EXCLUDED.reason,
			expires_at = GREATEST(viewers_denylist.expires_at, EXCLUDED.expires_at),
			hits = viewers_denylist.hits + 1, updated_at = now()`,
		subjects, rulesCol, reasons, expires)
	if err != nil {
		s.log.Warn("viewers: denylist write failed; retrying", "verdicts", n, "err", err)
		return
	}
	for _, v := range s.pending {
		s.m.verdicts.WithLabelValues(v.rule).Inc()
		s.log.Info("viewers: denylisted", "subject", v.subject, "rule", v.rule, "reason", v.reason, "until", v.expires)
	}
	s.pending = s.pending[:0]
}

// reportLag sums the consumer group's lag over the owned partitions.
func (s *scanner) reportLag(ctx context.Context) {
	var lag int64
	for n := range s.owned {
		groups, err := s.rdb.XInfoGroups(ctx, s.keys.stream(n)).Result()
		if err != nil {
			return
		}
		for _, g := range groups {
			if g.Name == scanGroup && g.Lag > 0 {
				lag += g.Lag
			}
		}
	}
	s.m.streamLag.Set(float64(lag))
}
