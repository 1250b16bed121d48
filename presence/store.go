package presence

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/store"
)

var (
	//go:embed lua/session.lua
	sessionLua string
	//go:embed lua/ping_apply.lua
	pingApplyLua string
	//go:embed lua/ping_open.lua
	pingOpenLua string
	//go:embed lua/expire.lua
	expireLua string
	//go:embed lua/rooms.lua
	roomsLua string
	//go:embed lua/subs.lua
	subsLua string
	//go:embed lua/subs_apply.lua
	subsApplyLua string

	sessionScript   = store.NewScript("presence_session", subsApplyLua+sessionLua)
	pingApplyScript = store.NewScript("presence_ping_apply", pingApplyLua)
	pingOpenScript  = store.NewScript("presence_ping_open", pingOpenLua)
	expireScript    = store.NewScript("presence_expire", expireLua)
	roomsScript     = store.NewScript("presence_rooms", roomsLua)
	subsScript      = store.NewScript("presence_subs", subsApplyLua+subsLua)
)

// stateStore is the Redis side of the module: sessions, statuses,
// subscriptions and the lifecycle indexes.
type stateStore struct {
	rdb   redis.UniversalClient
	batch *batcher
	keys  keys
	cfg   config.Presence
	// stepSettings are the session script's arguments 5-9 (the publish
	// command, then settings), the same for every call.
	stepSettings []any
	// gateway is this process's id when it serves connections: the
	// sessions it opens are recorded under its lease.
	gateway string
	counts  *followerCounts
}

// newStateStore publishes changes from its scripts with pubCmd, the hub's
// (hub.PublishCommand).
func newStateStore(rdb redis.UniversalClient, k keys, cfg config.Presence, pubCmd string) *stateStore {
	return &stateStore{rdb: rdb, batch: newBatcher(rdb), keys: k, cfg: cfg, counts: newFollowerCounts(cfg.MaxFollowers),
		// Boxed once: every status change and ping passes them.
		stepSettings: []any{pubCmd, cfg.IdleThreshold.Milliseconds(), cfg.LastActiveGranularity.Milliseconds(),
			cfg.OfflineRetention.Milliseconds(), cfg.MaxSessionsPerUser},
	}
}

// stepResult is what one session step did to the user's status.
type stepResult struct {
	// Result is "ok", or "absent" when closing a session already gone.
	Result   string
	Changed  bool
	Status   Status
	Sessions int
	// IdleIn is how long until the user turns idle if nothing happens; <0
	// when no session is active.
	IdleIn time.Duration
	// Watchers asked to be told when this user came online (now).
	Watchers []string
	// Unfollowed are the users this user followed until going offline.
	Unfollowed []string
	// Following (open only) are the user's subscriptions as the session
	// opened: those of a session that ended within the grace period.
	Following []string
	// subscribed is the subscriptions script's answer to the set an open
	// made (openSubscribing); nil otherwise.
	subscribed []any
	// Own is the user's true status, for their own sessions: Status is
	// what followers see, which differs while the user is invisible.
	Own Status
	// OwnBefore and WasInvisible are the true status ("" for none) and
	// invisible before the step, for the audit of what it changed.
	OwnBefore    string
	WasInvisible bool
}

// step runs one session operation on a user and recomputes their status.
func (s *stateStore) step(ctx context.Context, user, op, sid string, args ...any) (stepResult, error) {
	e := s.keys.userEntity(user)
	// The script splices the user into the payload it publishes: encoded
	// here once, so the script does not run a JSON encoder per change.
	userJSON, err := json.Marshal(user)
	if err != nil {
		return stepResult{}, fmt.Errorf("presence: session %s: encode user: %w", op, err)
	}
	argv := make([]any, 0, 4+len(s.stepSettings)+len(args))
	argv = append(argv, op, sid, userJSON, e.Key(partChannel))
	argv = append(argv, s.stepSettings...)
	argv = append(argv, args...)
	scriptKeys := []string{e.Key(partStatus), e.Key(partSessions), e.Key(partNotify), e.Key(partSubs), e.Key(partPrivacy)}
	res, err := s.batch.runScript(ctx, sessionScript, scriptKeys, argv)
	if err != nil {
		return stepResult{}, fmt.Errorf("presence: session %s: %w", op, err)
	}
	return parseStep(user, res)
}

func parseStep(user string, res []any) (stepResult, error) {
	if len(res) == 1 {
		switch res[0] {
		case "no_session":
			return stepResult{}, errNoSession
		case "too_many_sessions":
			return stepResult{}, errTooManySessions
		}
	}
	if len(res) != 18 {
		return stepResult{}, fmt.Errorf("presence: session step: unexpected reply %v", res)
	}
	st := stepResult{
		Result:  toString(res[0]),
		Changed: toInt(res[1]) == 1,
		Status: Status{
			User: user, Status: toString(res[2]), Since: toInt(res[3]),
			LastActiveAt: toInt(res[4]), V: toInt(res[5]),
		},
		Sessions:   int(toInt(res[6])),
		IdleIn:     time.Duration(toInt(res[7])) * time.Millisecond,
		Watchers:   toStrings(res[8]),
		Unfollowed: toStrings(res[9]),
		Following:  toStrings(res[10]),
	}
	st.subscribed, _ = res[11].([]any)
	if st.Status.Since == 0 {
		st.Status.LastActiveAt = 0
	}
	st.Own = Status{User: user, Status: toString(res[12]), Since: toInt(res[13]), LastActiveAt: toInt(res[14]),
		V: st.Status.V, Invisible: toInt(res[15]) == 1}
	if st.Own.Since == 0 {
		st.Own.LastActiveAt = 0
	}
	st.OwnBefore, st.WasInvisible = toString(res[16]), toInt(res[17]) == 1
	return st, nil
}

// removeFollower drops user from the follower sets of subjects, after the
// user's forward set was removed (going offline) or shrank.
func (s *stateStore) removeFollower(ctx context.Context, user string, subjects []string) error {
	if err := s.batch.writeMembers(ctx, s.followerWrites(user, nil, subjects)); err != nil {
		return fmt.Errorf("presence: remove follower: %w", err)
	}
	return nil
}

// statuses reads the current status of users (offline for unknown ones),
// through the batcher: in a connect burst each connection's first follow
// reads the users new to this gateway, and those reads ride with the
// other connections' calls instead of a round trip each.
func (s *stateStore) statuses(ctx context.Context, users []string) ([]*Status, error) {
	if len(users) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.SliceCmd, len(users))
	err := s.batch.pipeline(ctx, func(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
		out := make([]redis.Cmder, len(users))
		for i, u := range users {
			cmds[i] = p.HMGet(ctx, s.keys.userKey(u, partStatus), "s", "since", "la", "v")
			out[i] = cmds[i]
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("presence: read statuses: %w", err)
	}
	gran := s.cfg.LastActiveGranularity.Milliseconds()
	expired := time.Now().Add(-s.cfg.OfflineRetention).UnixMilli()
	out := make([]*Status, len(users))
	for i, u := range users {
		vals := cmds[i].Val()
		if len(vals) != 4 || vals[0] == nil {
			out[i] = offlineStatus(u)
			continue
		}
		la := toInt(vals[2])
		st := &Status{User: u, Status: toString(vals[0]), Since: toInt(vals[1]), LastActiveAt: la - la%gran, V: toInt(vals[3])}
		if st.Status == StatusOffline && st.Since <= expired {
			// The hash of one really offline this long has expired; an
			// invisible user's is kept, and must read the same.
			st = offlineStatus(u)
		}
		out[i] = st
	}
	return out, nil
}

// trueStatuses reads the users' true statuses: an invisible user's own,
// marked Invisible, where statuses reads what followers see.
func (s *stateStore) trueStatuses(ctx context.Context, users []string) ([]*Status, error) {
	pub, err := s.statuses(ctx, users)
	if err != nil {
		return nil, err
	}
	status := make([]*redis.SliceCmd, len(users))
	inv := make([]*redis.StringCmd, len(users))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, u := range users {
			status[i] = p.HMGet(ctx, s.keys.userKey(u, partStatus), "t", "tt", "tl")
			inv[i] = p.HGet(ctx, s.keys.userKey(u, partPrivacy), "inv")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("presence: read true statuses: %w", err)
	}
	gran := s.cfg.LastActiveGranularity.Milliseconds()
	for i := range users {
		if inv[i].Val() != "1" {
			continue
		}
		st := *pub[i]
		st.Invisible = true
		if vals := status[i].Val(); len(vals) == 3 && vals[0] != nil {
			// tl is written only once activity passes what followers saw.
			la := toInt(vals[2])
			st.Status, st.Since, st.LastActiveAt = toString(vals[0]), toInt(vals[1]), max(st.LastActiveAt, la-la%gran)
		}
		pub[i] = &st
	}
	return pub, nil
}

// ping records a session's liveness (or, with closed, its last sign of
// life before the grace period) in its shard's pings stream, and whether
// this gateway serves it (for the gateway's lease: a closed session is no
// longer this gateway's). One call: the keys share the shard's slot.
func (s *stateStore) ping(ctx context.Context, sid, user string, closed bool) error {
	sk := s.keys.shard(s.keys.shardOf(user))
	ttl, kind := s.cfg.PingInterval*time.Duration(s.cfg.MissBudget), "p"
	if closed {
		ttl, kind = s.cfg.Grace, "c"
	}
	mem := member(sid, user)
	var writes []memberWrite
	if s.gateway != "" {
		writes = []memberWrite{{key: sk.gateway(s.gateway), member: mem, remove: closed}}
	}
	err := s.batch.pipelineWith(ctx, func(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
		return []redis.Cmder{p.XAdd(ctx, &redis.XAddArgs{
			Stream: sk.pings, MaxLen: s.cfg.PingsMaxLen, Approx: true,
			Values: []any{"m", mem, "t", ttl.Milliseconds(), "k", kind},
		})}
	}, writes)
	if err != nil {
		return fmt.Errorf("presence: ping: %w", err)
	}
	return nil
}

// pingOpened records the first sign of life of a session that opened:
// its deadline, written directly (lua/ping_open.lua) rather than through
// the pings stream, and this gateway's record of it, with the follower
// sets of the subscriptions its open set (openSubscribing), in one call.
func (s *stateStore) pingOpened(ctx context.Context, sid, user string, change subChange) error {
	sk := s.keys.shard(s.keys.shardOf(user))
	mem := member(sid, user)
	writes := s.followerWrites(user, change.Added, change.Removed)
	if s.gateway != "" {
		writes = append(writes, memberWrite{key: sk.gateway(s.gateway), member: mem})
	}
	ttl := (s.cfg.PingInterval * time.Duration(s.cfg.MissBudget)).Milliseconds()
	if _, err := s.batch.runScriptWith(ctx, pingOpenScript, []string{sk.deadlines, sk.closing}, []any{mem, ttl}, writes); err != nil {
		return fmt.Errorf("presence: first ping: %w", err)
	}
	s.counts.added(change.Added)
	return nil
}

// inactive writes an inactive event for a session directly (an explicit
// disconnect), so the cleanup consumer clears its lifecycle entries.
func (s *stateStore) inactive(ctx context.Context, sid, user, reason string) error {
	sk := s.keys.shard(s.keys.shardOf(user))
	mem := member(sid, user)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{
			Stream: sk.events, MaxLen: s.cfg.EventsMaxLen, Approx: true,
			Values: []any{"m", mem, "r", reason, "d", 0},
		})
		if s.gateway != "" {
			p.SRem(ctx, sk.gateway(s.gateway), mem)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("presence: inactive event: %w", err)
	}
	return nil
}

// setRooms records the rooms of the user's latest token, for the shared
// room rule of the contacts policy, and returns the rooms the previous
// token had and this one has not.
func (s *stateStore) setRooms(ctx context.Context, user string, rooms []string) ([]string, error) {
	argv := make([]any, 0, 1+len(rooms))
	argv = append(argv, s.cfg.OfflineRetention.Milliseconds())
	for _, r := range rooms {
		argv = append(argv, r)
	}
	left, err := roomsScript.Run(ctx, s.rdb, []string{s.keys.user(user).rooms}, argv...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("presence: record rooms: %w", err)
	}
	return left, nil
}

// followers returns the users following user.
func (s *stateStore) followers(ctx context.Context, user string) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.keys.user(user).followers).Result()
	if err != nil {
		return nil, fmt.Errorf("presence: read followers: %w", err)
	}
	return ids, nil
}

// sharesRoom tells, for each subject, whether it is in one of rooms.
func (s *stateStore) sharesRoom(ctx context.Context, rooms []string, subjects []string) ([]bool, error) {
	out := make([]bool, len(subjects))
	if len(rooms) == 0 || len(subjects) == 0 {
		return out, nil
	}
	members := make([]any, len(rooms))
	for i, r := range rooms {
		members[i] = r
	}
	cmds := make([]*redis.BoolSliceCmd, len(subjects))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, subj := range subjects {
			cmds[i] = p.SMIsMember(ctx, s.keys.userKey(subj, partRooms), members...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("presence: shared rooms: %w", err)
	}
	for i, c := range cmds {
		for _, in := range c.Val() {
			if in {
				out[i] = true
				break
			}
		}
	}
	return out, nil
}

// subscriptions returns the users user follows.
func (s *stateStore) subscriptions(ctx context.Context, user string) ([]string, error) {
	var cmd *redis.StringSliceCmd
	err := s.batch.pipeline(ctx, func(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
		cmd = p.SMembers(ctx, s.keys.user(user).subs)
		return []redis.Cmder{cmd}
	})
	if err != nil {
		return nil, fmt.Errorf("presence: read subscriptions: %w", err)
	}
	return cmd.Val(), nil
}

// subscribeOnce asks for a one-time notification when subject next comes
// online. The watcher's own list of waits bounds how many it may hold.
func (s *stateStore) subscribeOnce(ctx context.Context, watcher, sid, subject string) error {
	wk := s.keys.user(watcher)
	txf := func(tx *redis.Tx) error {
		alive, err := tx.HExists(ctx, wk.sessions, sid).Result()
		if err != nil {
			return err
		}
		if !alive {
			return errNoSession
		}
		n, err := tx.SCard(ctx, wk.waiting).Result()
		if err != nil {
			return err
		}
		in, err := tx.SIsMember(ctx, wk.waiting, subject).Result()
		if err != nil {
			return err
		}
		if !in && n >= int64(s.cfg.MaxNotifications) {
			return &limitError{msg: fmt.Sprintf("at most %d pending notifications per user", s.cfg.MaxNotifications)}
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.SAdd(ctx, wk.waiting, subject)
			p.PExpire(ctx, wk.waiting, s.cfg.NotificationTTL)
			return nil
		})
		return err
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = s.rdb.Watch(ctx, txf, wk.waiting, wk.sessions); !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil {
		var le *limitError
		if errors.Is(err, errNoSession) || errors.As(err, &le) {
			return err
		}
		return fmt.Errorf("presence: notification subscribe: %w", err)
	}
	key := s.keys.user(subject).notify
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, key, watcher)
		p.PExpire(ctx, key, s.cfg.NotificationTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("presence: notification subscribe: %w", err)
	}
	return nil
}

// notified removes a fired notification from the watcher's list of waits.
func (s *stateStore) notified(ctx context.Context, watcher, subject string) error {
	return s.rdb.SRem(ctx, s.keys.user(watcher).waiting, subject).Err()
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func toString(v any) string {
	s, _ := v.(string)
	return s
}

func toStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
