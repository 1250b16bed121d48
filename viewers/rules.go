package viewers

import (
	"fmt"
	"time"

	"github.com/presenced/presenced/config"
)

// verdict is a denylist entry the scanner decided on.
type verdict struct {
	subject string
	rule    string
	reason  string
	expires time.Time
}

// rules scores heartbeats of one stream partition. Every heartbeat of a
// session lands in the same partition, so per-session windows here see all
// of a session's traffic. Time is the heartbeat's own, so a replay after a
// lag scores the same as live traffic. A rule set to 0 is off.
type rules struct {
	cfg      config.Viewers
	sessions map[uint64]*sessionWindow
	prefixes map[prefixKey]*prefixWindow
	swept    int64 // minute of the last sweep
}

type sessionWindow struct {
	lastSeen int64 // unix ms
	minute   int64
	beats    int
	hotels   map[string]struct{}
	// prefixes seen within rule_prefix_window, by last-seen time; the
	// first one is kept inline since most sessions have one.
	prefix0  prefixKey
	seen0    int64
	others   map[prefixKey]int64
	deniedTo int64 // unix ms; no new verdict before
}

type prefixWindow struct {
	lastSeen int64
	minute   int64
	fresh    int // new sessions this minute
	deniedTo int64
}

func newRules(cfg config.Viewers) *rules {
	return &rules{cfg: cfg, sessions: map[uint64]*sessionWindow{}, prefixes: map[prefixKey]*prefixWindow{}}
}

// apply scores one heartbeat and returns the verdicts it triggers.
func (r *rules) apply(rec hbRecord, out []verdict) []verdict {
	minute := rec.at / 60000
	if minute != r.swept {
		r.sweep(rec.at)
		r.swept = minute
	}
	s := r.sessions[rec.session]
	if s == nil {
		s = &sessionWindow{prefix0: rec.prefix, seen0: rec.at}
		r.sessions[rec.session] = s
	}
	s.lastSeen = rec.at
	if s.minute != minute {
		s.minute, s.beats, s.hotels = minute, 0, nil
	}
	s.beats++
	deny := func(rule, reason string) {
		if rec.at < s.deniedTo {
			return
		}
		s.deniedTo = rec.at + r.cfg.DenyTTL.Milliseconds()
		out = append(out, verdict{subject: sessionSubject(rec.session), rule: rule, reason: reason,
			expires: time.UnixMilli(rec.at).Add(r.cfg.DenyTTL)})
	}
	if max := r.cfg.RuleMaxPerMinute; max > 0 && s.beats > max {
		deny("rate", fmt.Sprintf("%d heartbeats within a minute (a page sends about 4)", s.beats))
	}
	if max := r.cfg.RuleMaxHotels; max > 0 {
		if s.hotels == nil {
			s.hotels = map[string]struct{}{}
		}
		if len(s.hotels) <= max {
			s.hotels[rec.hotel] = struct{}{}
		}
		if len(s.hotels) > max {
			deny("hotels", fmt.Sprintf("more than %d hotels within a minute", max))
		}
	}
	if max := r.cfg.RuleMaxPrefixes; max > 0 {
		if n := s.notePrefix(rec.prefix, rec.at, r.cfg.RulePrefixWindow.Milliseconds(), max); n > max {
			deny("prefixes", fmt.Sprintf("one session from %d networks within %s", n, r.cfg.RulePrefixWindow))
		}
	}
	if max := r.cfg.RuleMaxNewSessions; max > 0 && rec.flags&flagNewSession != 0 {
		p := r.prefixes[rec.prefix]
		if p == nil {
			p = &prefixWindow{}
			r.prefixes[rec.prefix] = p
		}
		p.lastSeen = rec.at
		if p.minute != minute {
			p.minute, p.fresh = minute, 0
		}
		p.fresh++
		if p.fresh > max && rec.at >= p.deniedTo {
			p.deniedTo = rec.at + r.cfg.DenyTTL.Milliseconds()
			out = append(out, verdict{subject: prefixSubject(rec.prefix), rule: "new_sessions",
				reason:  fmt.Sprintf("%d new sessions within a minute from one network", p.fresh),
				expires: time.UnixMilli(rec.at).Add(r.cfg.DenyTTL)})
		}
	}
	return out
}

// notePrefix records prefix p and returns how many distinct prefixes the
// session used within the window (counting stops a little past limit).
func (s *sessionWindow) notePrefix(p prefixKey, at, window int64, limit int) int {
	if p == s.prefix0 {
		s.seen0 = at
	} else {
		if s.others == nil {
			s.others = map[prefixKey]int64{}
		}
		if _, ok := s.others[p]; ok || len(s.others) <= limit {
			s.others[p] = at
		}
	}
	n := 0
	if at-s.seen0 <= window {
		n++
	}
	for k, seen := range s.others {
		if at-seen > window {
			delete(s.others, k)
			continue
		}
		n++
	}
	return n
}

// sweep forgets sessions and prefixes idle longer than any rule looks back.
func (r *rules) sweep(now int64) {
	keep := max(r.cfg.RulePrefixWindow, 2*time.Minute).Milliseconds()
	for k, s := range r.sessions {
		if now-s.lastSeen > keep && now >= s.deniedTo {
			delete(r.sessions, k)
		}
	}
	for k, p := range r.prefixes {
		if now-p.lastSeen > 2*60000 && now >= p.deniedTo {
			delete(r.prefixes, k)
		}
	}
}
