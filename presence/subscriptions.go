package presence

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

type subOp int

const (
	subSet subOp = iota
	subAdd
	subRemove
)

// limitError is a subscription change refused by a limit.
type limitError struct {
	msg   string
	users []string
}

func (e *limitError) Error() string { return e.msg }

// subChange is the effect of one subscription command.
type subChange struct {
	All     []string // the user's subscriptions afterwards
	Added   []string
	Removed []string
}

// changeSubscriptions applies a subscription command to the forward set of
// user and the reverse (follower) sets of the subjects. The forward set is
// watched together with the session, so concurrent changes from two devices
// serialise and a session that ended meanwhile writes nothing. On a single
// Redis everything commits in one MULTI/EXEC; on a cluster the subjects'
// follower sets live in other slots, so they are written right after, one
// pipeline per node (the forward set stays the source of truth, followers
// an index of it).
func (s *stateStore) changeSubscriptions(ctx context.Context, user, sid string, op subOp, ids []string) (subChange, error) {
	uk := s.keys.user(user)
	var change subChange
	txf := func(tx *redis.Tx) error {
		// Both reads in one round trip, under the WATCH just taken.
		var aliveCmd *redis.BoolCmd
		var oldCmd *redis.StringSliceCmd
		if _, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			aliveCmd = p.HExists(ctx, uk.sessions, sid)
			oldCmd = p.SMembers(ctx, uk.subs)
			return nil
		}); err != nil {
			return err
		}
		if !aliveCmd.Val() {
			return errNoSession
		}
		old := oldCmd.Val()
		change = diffSubscriptions(old, op, ids)
		if len(change.All) > s.cfg.MaxSubscriptions {
			return &limitError{msg: fmt.Sprintf("at most %d subscriptions per user (this would make %d)", s.cfg.MaxSubscriptions, len(change.All))}
		}
		if full, err := s.fullSubjects(ctx, change.Added); err != nil {
			return err
		} else if len(full) > 0 {
			return &limitError{msg: fmt.Sprintf("at most %d followers per user", s.cfg.MaxFollowers), users: full}
		}
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			s.writeForward(ctx, p, uk.subs, op, change)
			if !s.cluster {
				s.writeReverse(ctx, p, user, change)
			}
			return nil
		})
		return err
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = s.rdb.Watch(ctx, txf, uk.subs, uk.sessions)
		if !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil {
		var le *limitError
		if errors.Is(err, errNoSession) || errors.As(err, &le) {
			return subChange{}, err
		}
		return subChange{}, fmt.Errorf("presence: change subscriptions: %w", err)
	}
	if s.cluster && (len(change.Added) > 0 || len(change.Removed) > 0) {
		// Each follower-set change is one command on its own key, so a
		// plain pipeline (one round trip per node) keeps each atomic.
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			s.writeReverse(ctx, p, user, change)
			return nil
		})
		if err != nil {
			return subChange{}, fmt.Errorf("presence: change followers: %w", err)
		}
	}
	return change, nil
}

func (s *stateStore) writeForward(ctx context.Context, p redis.Pipeliner, key string, op subOp, c subChange) {
	switch {
	case op == subSet:
		p.Del(ctx, key)
		if len(c.All) > 0 {
			p.SAdd(ctx, key, anys(c.All)...)
		}
	default:
		if len(c.Added) > 0 {
			p.SAdd(ctx, key, anys(c.Added)...)
		}
		if len(c.Removed) > 0 {
			p.SRem(ctx, key, anys(c.Removed)...)
		}
	}
}

func (s *stateStore) writeReverse(ctx context.Context, p redis.Pipeliner, user string, c subChange) {
	for _, subj := range c.Added {
		p.SAdd(ctx, s.keys.user(subj).followers, user)
	}
	for _, subj := range c.Removed {
		p.SRem(ctx, s.keys.user(subj).followers, user)
	}
}

// fullSubjects lists the subjects that already have the most followers
// allowed. The counts are read outside the transaction (on a cluster they
// live in other slots), so followers added at the same instant by other
// users may overshoot the cap by a few.
func (s *stateStore) fullSubjects(ctx context.Context, added []string) ([]string, error) {
	if len(added) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.IntCmd, len(added))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, subj := range added {
			cmds[i] = p.SCard(ctx, s.keys.user(subj).followers)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var full []string
	for i, c := range cmds {
		if c.Val() >= int64(s.cfg.MaxFollowers) {
			full = append(full, added[i])
		}
	}
	return full, nil
}

// diffSubscriptions computes the new subscription list and what changed.
func diffSubscriptions(old []string, op subOp, ids []string) subChange {
	have := make(map[string]bool, len(old))
	for _, o := range old {
		have[o] = true
	}
	var c subChange
	switch op {
	case subSet:
		want := make(map[string]bool, len(ids))
		for _, id := range ids {
			want[id] = true
			if !have[id] {
				c.Added = append(c.Added, id)
			}
		}
		for _, o := range old {
			if !want[o] {
				c.Removed = append(c.Removed, o)
			}
		}
		c.All = slices.Clone(ids)
	case subAdd:
		c.All = slices.Clone(old)
		for _, id := range ids {
			if !have[id] {
				c.Added = append(c.Added, id)
				c.All = append(c.All, id)
				have[id] = true
			}
		}
	case subRemove:
		drop := make(map[string]bool, len(ids))
		for _, id := range ids {
			if have[id] {
				drop[id] = true
				c.Removed = append(c.Removed, id)
			}
		}
		for _, o := range old {
			if !drop[o] {
				c.All = append(c.All, o)
			}
		}
	}
	return c
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
