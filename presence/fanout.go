package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/internal/hub"
)

// fanout holds what this process follows: one subject per followed user
// (one hub subscription, shared by every local follower) and one localUser
// per connected user (their subscriptions, shared by their connections).
// Updates reach a connection's pending set, which its socket pulls as one
// frame as soon as it is free to write (client.mark).
type fanout struct {
	hub *hub.Hub
	st  *stateStore
	m   *metrics
	log *slog.Logger

	mu       sync.Mutex
	subjects map[string]*subject
	users    map[string]*localUser

	rmu         sync.Mutex
	refreshQ    map[*subject]struct{}
	refreshWake chan struct{}

	// restrictions answers whose status and whose lastActiveAt a viewer
	// may not see, by the subjects' choice (visibilityPolicy); nil where no
	// users are served.
	restrictions func(ctx context.Context, viewer string, subjects []string) (noStatus, noLastActive []string, err error)
}

func newFanout(h *hub.Hub, st *stateStore, m *metrics, log *slog.Logger) *fanout {
	return &fanout{
		hub: h, st: st, m: m, log: log,
		subjects: map[string]*subject{},
		users:    map[string]*localUser{},
		refreshQ: map[*subject]struct{}{},
		// One pending wake-up is enough: the refresher drains the whole
		// queue each time it wakes.
		refreshWake: make(chan struct{}, 1),
	}
}

// subject is one followed user in this process.
type subject struct {
	id    string
	topic string
	f     *fanout
	cur   atomic.Pointer[state]

	ready chan struct{} // closed once the hub subscription is confirmed (or failed)
	err   error
	// loaded is closed once the follow that created the subject has read
	// its first status (or given up): other followers arriving meanwhile
	// wait for that read instead of each making their own. In a connect
	// burst a new subject gets most of its followers within that read.
	loaded chan struct{}

	mu       sync.Mutex
	watchers map[*localUser]struct{}
}

// Deliver is called by the hub for each status change of the subject; it
// decodes the change once for every local follower.
func (s *subject) Deliver(msg hub.Message) {
	if msg.Resync {
		// Changes may have been missed while Redis was away: reread.
		s.f.queueRefresh(s)
		return
	}
	var st Status
	if err := json.Unmarshal(msg.Payload, &st); err != nil || st.User != s.id {
		s.f.log.Warn("presence: undecodable status change", "topic", msg.Topic)
		return
	}
	if s.offer(&st) {
		s.notify()
	}
}

// offer keeps st if it is newer than what the subject holds.
func (s *subject) offer(st *Status) bool {
	var next *state
	for {
		cur := s.cur.Load()
		if cur != nil && !st.newer(&cur.st) {
			return false
		}
		if next == nil {
			next = newState(st)
		}
		if s.cur.CompareAndSwap(cur, next) {
			return true
		}
	}
}

// notify marks the subject changed for every local follower. It marks with
// the subject's lock held, so once release has taken a follower out of the
// watchers no mark for it is still under way, and unfollow can clear what
// is pending for good: a frame needs no check of what its user follows.
func (s *subject) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for lu := range s.watchers {
		for _, c := range lu.clientList() {
			c.mark(s)
		}
	}
}

// state is the subject's latest known status.
func (s *subject) state() *state {
	if st := s.cur.Load(); st != nil {
		return st
	}
	return offlineState(s.id)
}

// queueRefresh rereads a subject's status after its upstream subscription
// was re-established. After a reconnect every subject of the process comes
// at once: the refresher reads them in batches instead of one read each.
func (f *fanout) queueRefresh(s *subject) {
	f.rmu.Lock()
	f.refreshQ[s] = struct{}{}
	f.rmu.Unlock()
	select {
	case f.refreshWake <- struct{}{}:
	default:
	}
}

const refreshBatch = 500

// runRefresher serves queueRefresh until ctx ends.
func (f *fanout) runRefresher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.refreshWake:
		}
		for ctx.Err() == nil && f.refreshSome(ctx) {
		}
	}
}

// refreshSome rereads one batch of queued subjects and reports whether
// there may be more. A failed read puts the batch back and waits a second.
func (f *fanout) refreshSome(ctx context.Context) bool {
	f.rmu.Lock()
	batch := make([]*subject, 0, min(len(f.refreshQ), refreshBatch))
	for s := range f.refreshQ {
		if len(batch) == refreshBatch {
			break
		}
		batch = append(batch, s)
		delete(f.refreshQ, s)
	}
	f.rmu.Unlock()
	if len(batch) == 0 {
		return false
	}
	ids := make([]string, len(batch))
	for i, s := range batch {
		ids[i] = s.id
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	sts, err := f.st.statuses(rctx, ids)
	cancel()
	if err != nil {
		f.log.Warn("presence: refresh after resubscribe", "users", len(ids), "err", err)
		f.rmu.Lock()
		for _, s := range batch {
			f.refreshQ[s] = struct{}{}
		}
		f.rmu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		return true
	}
	for i, s := range batch {
		if s.offer(sts[i]) {
			f.m.resyncs.Inc()
			s.notify()
		}
	}
	return true
}

// localUser is a user with connections in this process.
type localUser struct {
	id string
	// changeMu serialises subscription changes of this user in this
	// process, so snapshots and the followed set agree.
	changeMu sync.Mutex
	hydrated bool

	mu       sync.Mutex
	clients  []*client
	subjects map[string]*subject
	// shared is clients as of its last change, never modified in place:
	// notify reads it under a subject's lock, which must not wait for mu
	// (follow takes mu, then a subject's lock).
	shared atomic.Pointer[[]*client]
	// noLastActive holds the subjects whose lastActiveAt this user may not
	// see (their choice); replaced, never modified in place: every frame
	// reads it.
	noLastActive atomic.Pointer[map[string]bool]
}

func (lu *localUser) hidesLastActive(id string) bool {
	if p := lu.noLastActive.Load(); p != nil {
		return (*p)[id]
	}
	return false
}

// setHidesLastActive records, for each of ids, whether it is in hidden,
// and returns the ids whose record changed. The caller holds lu.changeMu.
func (lu *localUser) setHidesLastActive(ids, hidden []string) []string {
	var next map[string]bool
	if p := lu.noLastActive.Load(); p != nil {
		next = maps.Clone(*p)
	}
	if next == nil && len(hidden) > 0 {
		next = map[string]bool{}
	}
	var changed []string
	for _, id := range ids {
		h := slices.Contains(hidden, id)
		if next[id] != h {
			changed = append(changed, id)
		}
		if h {
			next[id] = true
		} else {
			delete(next, id)
		}
	}
	if len(next) == 0 {
		// Almost every user hides nothing from anyone: no map each.
		lu.noLastActive.Store(nil)
		return changed
	}
	lu.noLastActive.Store(&next)
	return changed
}

// clientList is the user's connections here. The slice is shared: callers
// must not modify it.
func (lu *localUser) clientList() []*client {
	if p := lu.shared.Load(); p != nil {
		return *p
	}
	return nil
}

// setClients replaces the connection list; the caller holds lu.mu.
func (lu *localUser) setClients(cs []*client) {
	lu.clients = cs
	shared := slices.Clone(cs)
	lu.shared.Store(&shared)
}

func (lu *localUser) follows(s *subject) bool {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	return lu.subjects[s.id] == s
}

func (lu *localUser) followed() []*subject {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	out := make([]*subject, 0, len(lu.subjects))
	for _, s := range lu.subjects {
		out = append(out, s)
	}
	return out
}

// lookup returns the subjects of ids this user follows here.
func (lu *localUser) lookup(ids []string) []*subject {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	out := make([]*subject, 0, len(ids))
	for _, id := range ids {
		if s := lu.subjects[id]; s != nil {
			out = append(out, s)
		}
	}
	return out
}

// attach registers a connection of its user.
func (f *fanout) attach(c *client) *localUser {
	f.mu.Lock()
	defer f.mu.Unlock()
	lu := f.users[c.user]
	if lu == nil {
		lu = &localUser{id: c.user, subjects: map[string]*subject{}}
		f.users[c.user] = lu
	}
	// Set before c is reachable through lu: a change arriving right away
	// flushes c, which needs its user.
	c.lu = lu
	lu.mu.Lock()
	lu.setClients(append(lu.clients, c))
	lu.mu.Unlock()
	return lu
}

// detach removes a connection; the user's last connection leaving releases
// every subject they followed here.
func (f *fanout) detach(c *client) {
	lu := c.lu
	f.mu.Lock()
	lu.mu.Lock()
	for i, x := range lu.clients {
		if x == c {
			lu.setClients(append(lu.clients[:i], lu.clients[i+1:]...))
			break
		}
	}
	last := len(lu.clients) == 0
	var drop []*subject
	if last {
		if f.users[lu.id] == lu {
			delete(f.users, lu.id)
		}
		for _, s := range lu.subjects {
			drop = append(drop, s)
		}
		lu.subjects = map[string]*subject{}
	}
	lu.mu.Unlock()
	f.mu.Unlock()
	for _, s := range drop {
		f.release(s, lu)
	}
}

// user returns the local user with id, if connected here.
func (f *fanout) user(id string) *localUser {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.users[id]
}

// setFollowing makes lu follow exactly ids here, and returns the subjects
// added and the ids to withdraw, as follow does. The caller holds
// lu.changeMu.
func (f *fanout) setFollowing(ctx context.Context, lu *localUser, ids []string, pre *visibilityRead) (added []*subject, hidden []string, err error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	lu.mu.Lock()
	var drop []string
	for id := range lu.subjects {
		if !want[id] {
			drop = append(drop, id)
		}
	}
	lu.mu.Unlock()
	f.unfollow(lu, drop)
	return f.follow(ctx, lu, ids, pre)
}

// follow adds ids to what lu follows here, subscribing upstream once per
// subject, and returns the subjects newly followed, with a current status.
// Once they are followed, it checks whose lastActiveAt lu may see, and
// returns the ids whose status lu may not see, for the caller to withdraw:
// the check before (at the upgrade, or the request's) may predate a change
// of theirs that, made before the follower sets named lu, found no one to
// tell. pre, if not nil, is what the connect's check read, used when no
// visibility changed since. The caller holds lu.changeMu.
func (f *fanout) follow(ctx context.Context, lu *localUser, ids []string, pre *visibilityRead) (added []*subject, hidden []string, err error) {
	added, err = f.followSubjects(ctx, lu, ids)
	if len(added) > 0 {
		_, hidden = f.checkVisibility(ctx, lu, ids, pre)
	}
	return added, hidden, err
}

// checkVisibility records whose lastActiveAt, among ids, lu may not see,
// and returns the ids whose record changed and those whose status lu may
// not see. Unsure (the check failed), it hides every lastActiveAt and
// withdraws no status, which the check before the follow allowed.
func (f *fanout) checkVisibility(ctx context.Context, lu *localUser, ids []string, pre *visibilityRead) (changed, noStatus []string) {
	if f.restrictions == nil {
		return nil, nil
	}
	noStatus, noLastActive, err := f.restrictionsSince(ctx, lu.id, ids, pre)
	if err != nil {
		f.log.Warn("presence: check visibility", "err", err)
		noStatus, noLastActive = nil, ids
	}
	return lu.setHidesLastActive(ids, noLastActive), noStatus
}

// restrictionsSince is restrictions, answered from pre when it read every
// one of ids and the visibility epoch has not moved since: then nothing
// that decides what viewer may see of them changed, and the connect's
// check, which let viewer see them all, still holds.
func (f *fanout) restrictionsSince(ctx context.Context, viewer string, ids []string, pre *visibilityRead) (noStatus, noLastActive []string, err error) {
	if pre != nil && pre.covers(ids) {
		if epoch, err := f.st.visibilityEpoch(ctx); err == nil && epoch == pre.epoch {
			return nil, pre.noLastActive, nil
		}
	}
	return f.restrictions(ctx, viewer, ids)
}

func (f *fanout) followSubjects(ctx context.Context, lu *localUser, ids []string) ([]*subject, error) {
	added := make([]*subject, 0, len(ids))
	var created []*subject
	f.mu.Lock()
	lu.mu.Lock()
	if len(lu.subjects) == 0 {
		// A connection's first follow names most of what it follows:
		// sized once instead of grown through every power of two.
		lu.subjects = make(map[string]*subject, len(ids))
	}
	for _, id := range ids {
		if lu.subjects[id] != nil {
			continue
		}
		s := f.subjects[id]
		if s == nil {
			s = &subject{id: id, topic: f.st.keys.userKey(id, partChannel), f: f, ready: make(chan struct{}),
				loaded: make(chan struct{}), watchers: map[*localUser]struct{}{}}
			f.subjects[id] = s
			created = append(created, s)
			f.m.subjects.Inc()
		}
		s.mu.Lock()
		s.watchers[lu] = struct{}{}
		s.mu.Unlock()
		lu.subjects[id] = s
		added = append(added, s)
	}
	lu.mu.Unlock()
	f.mu.Unlock()

	// Closed as soon as this follow's own reads are done, before it waits
	// for other follows' reads: two follows each waiting for a subject the
	// other created must not wait for each other.
	doneLoading := sync.OnceFunc(func() {
		for _, s := range created {
			close(s.loaded)
		}
	})
	defer doneLoading()
	f.subscribe(created)
	var failed []string
	var fresh, others []*subject
	mine := 0 // created is added's subsequence of new subjects, in order
	for _, s := range added {
		isMine := mine < len(created) && created[mine] == s
		if isMine {
			mine++
		}
		waitClosed(ctx, s.ready)
		if s.err != nil || ctx.Err() != nil {
			failed = append(failed, s.id)
			continue
		}
		switch {
		case s.cur.Load() != nil:
		case isMine:
			fresh = append(fresh, s)
		default:
			others = append(others, s)
		}
	}
	if len(failed) > 0 {
		f.unfollow(lu, failed)
		return nil, fmt.Errorf("presence: subscribe %d users: %w", len(failed), firstErr(ctx, added))
	}
	err := f.load(ctx, fresh)
	doneLoading()
	if err != nil {
		return added, err
	}
	// Subjects another follow created: their creator reads them. Those
	// still without a status after its read (it failed) are read here.
	var again []*subject
	for _, s := range others {
		waitClosed(ctx, s.loaded)
		if s.cur.Load() == nil {
			again = append(again, s)
		}
	}
	if err := f.load(ctx, again); err != nil {
		return added, err
	}
	return added, nil
}

// waitClosed waits for ch to be closed or ctx to end. Most channels it is
// given are closed already (the subject was followed before): that costs a
// plain receive, not a select.
func waitClosed(ctx context.Context, ch <-chan struct{}) {
	select {
	case <-ch:
		return
	default:
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func firstErr(ctx context.Context, subs []*subject) error {
	for _, s := range subs {
		select {
		case <-s.ready:
			if s.err != nil {
				return s.err
			}
		default:
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("not confirmed")
}

// subscribe takes the hub subscriptions of new subjects in one call: the
// hub sends them to Redis together, and with those of other connections
// opening at the same moment.
func (f *fanout) subscribe(created []*subject) {
	if len(created) == 0 {
		return
	}
	reqs := make([]hub.Subscription, len(created))
	for i, s := range created {
		reqs[i] = hub.Subscription{Topic: s.topic, Sub: s}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := f.hub.SubscribeMany(ctx, reqs)
	for i, s := range created {
		s.err = errs[i]
		if s.err != nil {
			f.mu.Lock()
			if f.subjects[s.id] == s {
				delete(f.subjects, s.id)
				f.m.subjects.Dec()
			}
			f.mu.Unlock()
		}
		close(s.ready)
	}
}

// load reads the current status of subjects just subscribed. It runs after
// the subscription is confirmed, so no change falls between the two.
func (f *fanout) load(ctx context.Context, subs []*subject) error {
	if len(subs) == 0 {
		return nil
	}
	ids := make([]string, len(subs))
	for i, s := range subs {
		ids[i] = s.id
	}
	sts, err := f.st.statuses(ctx, ids)
	if err != nil {
		return err
	}
	for i, s := range subs {
		s.offer(sts[i])
	}
	return nil
}

// unfollow removes ids from what lu follows here. The caller holds
// lu.changeMu.
func (f *fanout) unfollow(lu *localUser, ids []string) {
	var drop []*subject
	lu.mu.Lock()
	for _, id := range ids {
		if s := lu.subjects[id]; s != nil {
			delete(lu.subjects, id)
			drop = append(drop, s)
		}
	}
	lu.mu.Unlock()
	if len(drop) == 0 {
		return
	}
	for _, s := range drop {
		f.release(s, lu)
	}
	// No mark of these subjects for lu can come any more (see notify):
	// what is pending of them now is all there will be.
	for _, c := range lu.clientList() {
		c.unmark(drop)
	}
}

// release drops lu from a subject's watchers; the last one unsubscribes.
// It returns once no notify of s marks lu's connections any more.
func (f *fanout) release(s *subject, lu *localUser) {
	s.mu.Lock()
	delete(s.watchers, lu)
	empty := len(s.watchers) == 0
	s.mu.Unlock()
	if !empty {
		return
	}
	// Taken again with the process's lock: a follow may have come in
	// between.
	f.mu.Lock()
	s.mu.Lock()
	empty = len(s.watchers) == 0 && f.subjects[s.id] == s
	if empty {
		delete(f.subjects, s.id)
		f.m.subjects.Dec()
	}
	s.mu.Unlock()
	f.mu.Unlock()
	if empty {
		f.hub.Unsubscribe(s.topic, s)
	}
}
