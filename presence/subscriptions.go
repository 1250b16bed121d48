package presence

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
)

type subOp int

const (
	subSet subOp = iota
	subAdd
	subRemove
)

// subChange is the effect of one subscription command.
type subChange struct {
	Added   []string
	Removed []string
	// Sessions is how many sessions the user had when the change was
	// written, this one included.
	Sessions int
}

// changeSubscriptions applies a subscription command to the forward set of
// user in one script (session check, diff, limits and write: atomic, so two
// devices changing subscriptions at once serialise and a session that ended
// writes nothing), then to the reverse (follower) sets of the subjects. The
// follower sets live in other hash slots, so they are written right after,
// merged with the batch's other follower writes (setWrites): the forward
// set is the source of truth, followers an index of it.
func (s *stateStore) changeSubscriptions(ctx context.Context, user, sid string, op subOp, ids []string) (subChange, error) {
	uk := s.keys.user(user)
	argv, err := s.appendSubsArgs(ctx, append(make([]any, 0, 4+len(ids)), op.String(), sid), op, ids)
	if err != nil {
		return subChange{}, fmt.Errorf("presence: change subscriptions: %w", err)
	}
	res, err := s.batch.runScript(ctx, subsScript, []string{uk.subs, uk.sessions}, argv)
	if err != nil {
		return subChange{}, fmt.Errorf("presence: change subscriptions: %w", err)
	}
	change, err := parseSubs(res, ids, s.cfg)
	if err != nil {
		return subChange{}, err
	}
	return change, s.writeFollowers(ctx, user, change)
}

// openSubscribing opens a session whose connection named its subscriptions
// as it connected: the open's script sets them (one call, not an open and
// a subscriptions:set), so the session opens already following them. A
// refused set (a *limitError) still opens the session, with the
// subscriptions the user had; the stepResult is valid then. The caller
// writes the follower sets with the open's first ping (pingOpened).
func (s *stateStore) openSubscribing(ctx context.Context, user, sid string, ids []string) (stepResult, subChange, error) {
	args, err := s.appendSubsArgs(ctx, make([]any, 0, 2+len(ids)), subSet, ids)
	if err != nil {
		return stepResult{}, subChange{}, fmt.Errorf("presence: session open: %w", err)
	}
	res, err := s.step(ctx, user, "open", sid, args...)
	if err != nil {
		return res, subChange{}, err
	}
	change, err := parseSubs(res.subscribed, ids, s.cfg)
	if err != nil {
		return res, subChange{}, err
	}
	res.Following = ids
	return res, change, nil
}

// appendSubsArgs appends what the scripts' applySubs takes for a command
// on ids: the limit, the count, the users, then those of them already at
// the follower cap.
func (s *stateStore) appendSubsArgs(ctx context.Context, argv []any, op subOp, ids []string) ([]any, error) {
	var full []string
	if op != subRemove {
		var err error
		if full, err = s.fullSubjects(ctx, ids); err != nil {
			return nil, err
		}
	}
	argv = append(argv, s.cfg.MaxSubscriptions, len(ids))
	for _, id := range ids {
		argv = append(argv, id)
	}
	for _, id := range full {
		argv = append(argv, id)
	}
	return argv, nil
}

// writeFollowers brings the follower sets of the subjects in line with a
// change the forward set took.
func (s *stateStore) writeFollowers(ctx context.Context, user string, change subChange) error {
	if len(change.Added) == 0 && len(change.Removed) == 0 {
		return nil
	}
	if err := s.batch.writeMembers(ctx, s.followerWrites(user, change.Added, change.Removed)); err != nil {
		return fmt.Errorf("presence: change followers: %w", err)
	}
	s.counts.added(change.Added)
	return nil
}

// String is the op as the subscriptions script names it.
func (op subOp) String() string {
	switch op {
	case subSet:
		return "set"
	case subAdd:
		return "add"
	default:
		return "remove"
	}
}

// parseSubs reads the reply of the subscriptions script to a command on
// ids.
func parseSubs(res []any, ids []string, cfg config.Presence) (subChange, error) {
	switch {
	case len(res) == 1 && res[0] == "no_session":
		return subChange{}, errNoSession
	case len(res) == 2 && res[0] == "too_many":
		return subChange{}, &limitError{msg: fmt.Sprintf("at most %d subscriptions per user (this would make %d)", cfg.MaxSubscriptions, toInt(res[1]))}
	case len(res) == 2 && res[0] == "full":
		return subChange{}, &limitError{msg: fmt.Sprintf("at most %d followers per user", cfg.MaxFollowers), users: toStrings(res[1])}
	case len(res) == 4 && res[0] == "ok":
		added := ids
		if res[1] != "all" {
			added = toStrings(res[1])
		}
		return subChange{Added: added, Removed: toStrings(res[2]), Sessions: int(toInt(res[3]))}, nil
	}
	return subChange{}, fmt.Errorf("presence: change subscriptions: unexpected reply %v", res)
}

// followerWrites adds user to the follower sets of added and removes it
// from those of removed.
func (s *stateStore) followerWrites(user string, added, removed []string) []memberWrite {
	// One more: an open sends them with its ping's (pingOpened).
	w := make([]memberWrite, 0, len(added)+len(removed)+1)
	member := any(user) // boxed once, not once per write
	for _, subj := range added {
		w = append(w, memberWrite{key: s.keys.userKey(subj, partFollowers), member: member})
	}
	for _, subj := range removed {
		w = append(w, memberWrite{key: s.keys.userKey(subj, partFollowers), member: member, remove: true})
	}
	return w
}

// fullSubjects lists the subjects that already have the most followers
// allowed; the script refuses a command that would add one of them. The
// counts are read before the script (they live in other slots), so
// followers added at the same instant by other users may overshoot the cap
// by a few; sizes read in the last second are reused (followerCounts).
func (s *stateStore) fullSubjects(ctx context.Context, added []string) ([]string, error) {
	if len(added) == 0 {
		return nil, nil
	}
	c := s.counts.claim(added)
	n, err := s.readCounts(ctx, added, c.mine)
	s.counts.done(c.entries, n)
	if err != nil {
		return nil, err
	}
	full := s.atTheCap(nil, added, c.mine, n)
	// Sizes others were reading: theirs if it came and is well below the
	// cap, else read here.
	var again []int
	for i, at := range c.waiting {
		waitClosed(ctx, c.pending[i].read)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !s.counts.trusted(c.pending[i]) {
			again = append(again, at)
		}
	}
	n, err = s.readCounts(ctx, added, again)
	if err != nil {
		return nil, err
	}
	return s.atTheCap(full, added, again, n), nil
}

// atTheCap appends to full each ids[at[i]] whose size n[i] is at the cap.
func (s *stateStore) atTheCap(full, ids []string, at []int, n []int64) []string {
	for i, j := range at {
		if n[i] >= int64(s.cfg.MaxFollowers) {
			full = append(full, ids[j])
		}
	}
	return full
}

// readCounts reads the follower-set sizes of ids[at] for each at.
func (s *stateStore) readCounts(ctx context.Context, ids []string, at []int) ([]int64, error) {
	if len(at) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.IntCmd, len(at))
	err := s.batch.pipeline(ctx, func(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
		out := make([]redis.Cmder, len(at))
		for i, j := range at {
			cmds[i] = p.SCard(ctx, s.keys.userKey(ids[j], partFollowers))
			out[i] = cmds[i]
		}
		return out
	})
	if err != nil {
		return nil, err
	}
	n := make([]int64, len(at))
	for i, c := range cmds {
		n[i] = c.Val()
	}
	return n, nil
}
