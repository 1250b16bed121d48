package presence

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Who may see a user's status and lastActiveAt (Visible*) is kept in the
// user's privacy hash (vs, vl), which has no expiry; everyone is stored as
// nothing.

// visibility is a user's two settings; "" is everyone.
type visibility struct {
	Status, LastActive string
}

func validVisibility(s string) bool {
	return s == VisibleEveryone || s == VisibleContacts || s == VisibleNobody
}

// listedBy answers which owners have viewer on their contact list.
type listedBy interface {
	ListedBy(ctx context.Context, viewer string, owners []string) ([]string, error)
}

// visibilities reads the settings of users (everyone for those without).
func (s *stateStore) visibilities(ctx context.Context, users []string) ([]visibility, error) {
	if len(users) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.SliceCmd, len(users))
	err := s.batch.pipeline(ctx, func(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
		out := make([]redis.Cmder, len(users))
		for i, u := range users {
			cmds[i] = p.HMGet(ctx, s.keys.userKey(u, partPrivacy), "vs", "vl")
			out[i] = cmds[i]
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("presence: read visibility: %w", err)
	}
	out := make([]visibility, len(users))
	for i := range users {
		if vals := cmds[i].Val(); len(vals) == 2 {
			out[i] = visibility{Status: toString(vals[0]), LastActive: toString(vals[1])}
		}
	}
	return out, nil
}

// visibilityEpoch reads the count of visibility changes (0 before the
// first), through the batcher.
func (s *stateStore) visibilityEpoch(ctx context.Context) (int64, error) {
	var cmd *redis.StringCmd
	err := s.batch.pipeline(ctx, func(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
		cmd = p.Get(ctx, s.keys.visibilityEpoch())
		return []redis.Cmder{cmd}
	})
	if err != nil {
		return 0, fmt.Errorf("presence: read visibility epoch: %w", err)
	}
	n, err := cmd.Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("presence: read visibility epoch: %w", err)
	}
	return n, nil
}

// bumpVisibilityEpoch counts a change of who may see whom, once it is
// written and before its followers are read (recheckFollowers).
func (s *stateStore) bumpVisibilityEpoch(ctx context.Context) error {
	if err := s.rdb.Incr(ctx, s.keys.visibilityEpoch()).Err(); err != nil {
		return fmt.Errorf("presence: count a visibility change: %w", err)
	}
	return nil
}

// setVisibility changes the settings given (non-empty) and returns both as
// they were and as they are.
func (s *stateStore) setVisibility(ctx context.Context, user string, status, lastActive string) (before, after visibility, err error) {
	key := s.keys.userKey(user, partPrivacy)
	var cur *redis.SliceCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		cur = p.HMGet(ctx, key, "vs", "vl")
		for field, v := range map[string]string{"vs": status, "vl": lastActive} {
			switch v {
			case "":
			case VisibleEveryone:
				p.HDel(ctx, key, field)
			default:
				p.HSet(ctx, key, field, v)
			}
		}
		return nil
	})
	if err != nil {
		return before, after, fmt.Errorf("presence: set visibility: %w", err)
	}
	if vals := cur.Val(); len(vals) == 2 {
		before = visibility{Status: toString(vals[0]), LastActive: toString(vals[1])}
	}
	after = before
	if status != "" {
		after.Status = status
	}
	if lastActive != "" {
		after.LastActive = lastActive
	}
	return before.orEveryone(), after.orEveryone(), nil
}

func (v visibility) orEveryone() visibility {
	if v.Status == "" {
		v.Status = VisibleEveryone
	}
	if v.LastActive == "" {
		v.LastActive = VisibleEveryone
	}
	return v
}

// visibilityPolicy narrows a policy by each subject's own choice of who
// may see their status; it also answers whose lastActiveAt a viewer may
// not see.
type visibilityPolicy struct {
	base     policy
	settings interface {
		visibilities(ctx context.Context, users []string) ([]visibility, error)
		visibilityEpoch(ctx context.Context) (int64, error)
	}
	listed listedBy
}

func (p *visibilityPolicy) Forbidden(ctx context.Context, v viewer, subjects []string) ([]string, error) {
	forbidden, _, err := p.forbidden(ctx, v, subjects)
	return forbidden, err
}

// forbidden is Forbidden, with the subjects whose lastActiveAt the viewer
// may not see (among those it may see).
func (p *visibilityPolicy) forbidden(ctx context.Context, v viewer, subjects []string) (forbidden, noLastActive []string, err error) {
	forbidden, err = p.base.Forbidden(ctx, v, subjects)
	if err != nil {
		return nil, nil, err
	}
	var rest []string
	for _, s := range subjects {
		if !slices.Contains(forbidden, s) {
			rest = append(rest, s)
		}
	}
	hidden, noLastActive, err := p.restrictions(ctx, v.User, rest)
	if err != nil {
		return nil, nil, err
	}
	return append(forbidden, hidden...), noLastActive, nil
}

// visibilityRead is what the check of a connect's or a request's new
// subscriptions read of their settings, and when: the follow, which must
// check them again once the follower sets name the viewer (see follow),
// reuses it when no visibility changed in between.
type visibilityRead struct {
	epoch        int64
	ids          []string
	noLastActive []string
}

// covers reports whether r read the settings of every one of ids: by a
// set, since a connect may name a thousand.
func (r *visibilityRead) covers(ids []string) bool {
	read := make(map[string]struct{}, len(r.ids))
	for _, id := range r.ids {
		read[id] = struct{}{}
	}
	for _, id := range ids {
		if _, ok := read[id]; !ok {
			return false
		}
	}
	return true
}

// checkFollows is Forbidden for subscriptions about to be made, and keeps
// what it read. The epoch is read first: a change counted after it makes
// the follow read again; one counted before it was written before the
// settings were read here.
func (p *visibilityPolicy) checkFollows(ctx context.Context, v viewer, subjects []string) ([]string, *visibilityRead, error) {
	epoch, err := p.settings.visibilityEpoch(ctx)
	if err != nil {
		forbidden, err := p.Forbidden(ctx, v, subjects)
		return forbidden, nil, err
	}
	forbidden, noLastActive, err := p.forbidden(ctx, v, subjects)
	if err != nil {
		return nil, nil, err
	}
	return forbidden, &visibilityRead{epoch: epoch, ids: subjects, noLastActive: noLastActive}, nil
}

// hidesLastActive returns the subjects whose lastActiveAt viewer may not see.
func (p *visibilityPolicy) hidesLastActive(ctx context.Context, viewer string, subjects []string) ([]string, error) {
	_, hidden, err := p.restrictions(ctx, viewer, subjects)
	return hidden, err
}

// restrictions reads the settings of subjects once and returns those whose
// status, and those whose lastActiveAt, viewer may not see by their
// choice (a user always sees themself).
func (p *visibilityPolicy) restrictions(ctx context.Context, viewer string, subjects []string) (noStatus, noLastActive []string, err error) {
	var rest []string
	for _, s := range subjects {
		if s != viewer {
			rest = append(rest, s)
		}
	}
	if len(rest) == 0 {
		return nil, nil, nil
	}
	vis, err := p.settings.visibilities(ctx, rest)
	if err != nil {
		return nil, nil, err
	}
	var ask, listing []string
	for i, s := range rest {
		if vis[i].Status == VisibleContacts || vis[i].LastActive == VisibleContacts {
			ask = append(ask, s)
		}
	}
	if len(ask) > 0 {
		if listing, err = p.listed.ListedBy(ctx, viewer, ask); err != nil {
			return nil, nil, err
		}
	}
	keepsOut := func(setting, s string) bool {
		return setting == VisibleNobody || setting == VisibleContacts && !slices.Contains(listing, s)
	}
	for i, s := range rest {
		if keepsOut(vis[i].Status, s) {
			noStatus = append(noStatus, s)
		}
		if keepsOut(vis[i].LastActive, s) {
			noLastActive = append(noLastActive, s)
		}
	}
	return noStatus, noLastActive, nil
}

// setVisibility changes who may see user (empty: unchanged) and, when that
// changed, audits it (from r: who, how), tells the user's other sessions
// (all but r.Device) and has the gateways of the user's followers check
// again before it returns: a follower who lost sight gets forbidden at
// once. It returns the settings as they are.
func (m *Module) setVisibility(ctx context.Context, user string, p VisibilityPayload, r AuditRecord) (visibility, error) {
	before, after, err := m.st.setVisibility(ctx, user, p.Status, p.LastActiveAt)
	if err != nil {
		return visibility{}, err
	}
	if after != before {
		r.Kind, r.Old, r.New = auditVisibility, visibilityString(before), visibilityString(after)
		m.audit.add(r)
		vp := after.payload()
		m.tellSelf(ctx, user, r.Device, nil, &vp)
		m.recheckFollowers(user)
	}
	return after, nil
}

// checkVisibility refuses values that are not a visibility.
func checkVisibility(p VisibilityPayload) error {
	for _, v := range []string{p.Status, p.LastActiveAt} {
		if v != "" && !validVisibility(v) {
			return fmt.Errorf("%q is not one of everyone, contacts, nobody", v)
		}
	}
	return nil
}

func (v visibility) payload() VisibilityPayload {
	return VisibilityPayload{Status: v.Status, LastActiveAt: v.LastActive}
}
