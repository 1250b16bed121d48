package viewers

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// denySnapshot is the live denylist as ingest reads it: expiry (unix
// seconds) by session hash and by prefix.
type denySnapshot struct {
	sessions map[uint64]int64
	prefixes map[prefixKey]int64
	loadedAt time.Time
}

// denylist caches viewers_denylist for the heartbeat path: a heartbeat
// checks two maps, never PostgreSQL. Refreshes read only rows changed since
// the last one (with an overlap for transactions that committed late), and
// a full reload every tenth time forgets deleted rows.
type denylist struct {
	db      *pgxpool.Pool
	refresh time.Duration
	log     *slog.Logger
	m       *metrics

	snap   atomic.Pointer[denySnapshot]
	since  time.Time
	rounds int
}

func newDenylist(db *pgxpool.Pool, refresh time.Duration, m *metrics, log *slog.Logger) *denylist {
	d := &denylist{db: db, refresh: refresh, m: m, log: log}
	d.snap.Store(&denySnapshot{sessions: map[uint64]int64{}, prefixes: map[prefixKey]int64{}})
	return d
}

// denied tells whether a heartbeat of session from prefix must not count.
func (d *denylist) denied(session uint64, prefix prefixKey, now time.Time) bool {
	s := d.snap.Load()
	if len(s.sessions) == 0 && len(s.prefixes) == 0 {
		return false
	}
	sec := now.Unix()
	if exp, ok := s.sessions[session]; ok && exp > sec {
		return true
	}
	if exp, ok := s.prefixes[prefix]; ok && exp > sec {
		return true
	}
	return false
}

const denyOverlap = time.Minute

func (d *denylist) load(ctx context.Context) error {
	full := d.rounds%10 == 0 || d.since.IsZero()
	d.rounds++
	old := d.snap.Load()
	next := &denySnapshot{sessions: map[uint64]int64{}, prefixes: map[prefixKey]int64{}, loadedAt: time.Now()}
	since := time.Time{}
	if !full {
		since = d.since.Add(-denyOverlap)
		now := time.Now().Unix()
		for k, v := range old.sessions {
			if v > now {
				next.sessions[k] = v
			}
		}
		for k, v := range old.prefixes {
			if v > now {
				next.prefixes[k] = v
			}
		}
	}
	var maxUpdated time.Time
	rows, err := d.db.Query(ctx, `SELECT subject, expires_at, updated_at FROM viewers_denylist
		WHERE expires_at > now() AND updated_at >= $1`, since)
	if err != nil {
		return fmt.Errorf("load denylist: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var subject string
		var exp, upd time.Time
		if err := rows.Scan(&subject, &exp, &upd); err != nil {
			return fmt.Errorf("load denylist: %w", err)
		}
		if upd.After(maxUpdated) {
			maxUpdated = upd
		}
		if h, ok := parseSessionSubject(subject); ok {
			next.sessions[h] = exp.Unix()
		} else if p, ok := parsePrefixSubject(subject); ok {
			next.prefixes[p] = exp.Unix()
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load denylist: %w", err)
	}
	d.snap.Store(next)
	if !maxUpdated.IsZero() {
		d.since = maxUpdated
	} else if d.since.IsZero() {
		d.since = time.Now().Add(-denyOverlap)
	}
	d.m.denylistSize.Set(float64(len(next.sessions) + len(next.prefixes)))
	return nil
}

func (d *denylist) run(ctx context.Context) error {
	for {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.load(lctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			d.log.Warn("viewers: denylist refresh failed; keeping the last one", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d.refresh):
		}
	}
}

func sessionSubject(h uint64) string {
	s := strconv.FormatUint(h, 16)
	return "s:" + strings.Repeat("0", 16-len(s)) + s
}

func prefixSubject(p prefixKey) string { return "p:" + p.String() }

func parseSessionSubject(s string) (uint64, bool) {
	hex, ok := strings.CutPrefix(s, "s:")
	if !ok {
		return 0, false
	}
	h, err := strconv.ParseUint(hex, 16, 64)
	return h, err == nil
}

func parsePrefixSubject(s string) (prefixKey, bool) {
	p, ok := strings.CutPrefix(s, "p:")
	if !ok {
		return 0, false
	}
	return parsePrefix(p)
}
