package presence

import (
	"slices"
	"strings"

	"github.com/presenced/presenced/internal/auth"
)

// newer tells whether s is a later state than o. Since orders states across
// a Redis restart that resets V; V breaks ties within one millisecond.
func (s *Status) newer(o *Status) bool {
	if o == nil {
		return true
	}
	if s.Since != o.Since {
		return s.Since > o.Since
	}
	return s.V > o.V
}

// sameAs tells whether a follower would see no difference.
func (s *Status) sameAs(o *Status) bool {
	return o != nil && s.Status == o.Status && s.Since == o.Since && s.LastActiveAt == o.LastActiveAt
}

// public is s without the internal publish time.
func (s *Status) public() Status {
	p := *s
	p.TS = 0
	return p
}

func offlineStatus(user string) *Status {
	return &Status{User: user, Status: StatusOffline}
}

// validUserID is the server's one rule for user ids (auth.ValidUserID),
// applied here to subscription targets and read-API ids as well.
func validUserID(id string) bool { return auth.ValidUserID(id) == nil }

// cleanIDs validates and de-duplicates a list of user ids, keeping order.
func cleanIDs(ids []string) (out []string, bad string, ok bool) {
	// A short list (a connect's usual follow) is checked for repeats
	// against what was kept, which costs less than building a map.
	var seen map[string]struct{}
	if len(ids) > smallSet {
		seen = make(map[string]struct{}, len(ids))
	}
	out = make([]string, 0, len(ids))
	for _, id := range ids {
		if !validUserID(id) {
			return nil, id, false
		}
		if seen == nil {
			if slices.Contains(out, id) {
				continue
			}
		} else if _, dup := seen[id]; dup {
			continue
		} else {
			seen[id] = struct{}{}
		}
		out = append(out, id)
	}
	return out, "", true
}

// member names one session in the lifecycle indexes: "<sid>:<user>". The
// session id is hex, so the first colon splits it.
func member(sid, user string) string { return sid + ":" + user }

func splitMember(m string) (sid, user string, ok bool) {
	sid, user, ok = strings.Cut(m, ":")
	return sid, user, ok && sid != "" && validUserID(user)
}
