package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/web/wire"
)

// Control messages reach every gateway holding connections of a user,
// through one channel per lifecycle shard (a process subscribes to all of
// them once, whatever its number of users).
type controlMsg struct {
	// T is the kind: "subs" (the user's subscriptions changed elsewhere),
	// "contacts" (what they may see changed: their contact list, or the
	// rooms of someone they follow; revalidate), "notify" (a
	// user they wait for came online), "self" (the user's own status, S,
	// or privacy settings, P, changed: tell their sessions but Skip).
	T    string             `json:"t"`
	U    string             `json:"u"`
	From string             `json:"from,omitempty"`
	S    *Status            `json:"s,omitempty"`
	P    *VisibilityPayload `json:"p,omitempty"`
	Skip string             `json:"skip,omitempty"`
}

// tellSelf sends the user's sessions (but skip, the one that asked) their
// own status or privacy settings after a change made elsewhere: their
// followers' view is not theirs, so they would not learn it otherwise.
func (m *Module) tellSelf(ctx context.Context, user, skip string, own *Status, vis *VisibilityPayload) {
	if err := m.sendControl(ctx, controlMsg{T: "self", U: user, S: own, P: vis, Skip: skip}); err != nil {
		m.log.Warn("presence: tell the user's sessions", "err", err)
	}
}

func (m *Module) sendControl(ctx context.Context, msg controlMsg) error {
	out, err := m.controlOut(msg)
	if err != nil {
		return err
	}
	return m.hub.Publish(ctx, out.Topic, out.Payload)
}

// controlOut is msg addressed to the control channel of its user's shard.
func (m *Module) controlOut(msg controlMsg) (hub.Outgoing, error) {
	b, err := json.Marshal(msg)
	if err != nil {
		return hub.Outgoing{}, fmt.Errorf("presence: control message: %w", err)
	}
	return hub.Outgoing{Topic: m.keys.shard(m.keys.shardOf(msg.U)).control, Payload: b}, nil
}

// fireNotifications tells each watcher that subject came online; the
// one-time subscriptions were consumed by the status change itself.
func (m *Module) fireNotifications(ctx context.Context, st Status, watchers []string) {
	pub := st.public()
	for _, w := range watchers {
		m.m.notifications.Inc()
		// Free the watcher's place first: once told, it may ask again.
		if err := m.st.notified(ctx, w, st.User); err != nil {
			m.log.Warn("presence: clear notification", "err", err)
		}
		if err := m.sendControl(ctx, controlMsg{T: "notify", U: w, S: &pub}); err != nil {
			m.log.Warn("presence: route notification", "err", err)
		}
	}
}

// controlSub receives the control channels in a gateway process.
type controlSub struct{ g *gateway }

func (cs controlSub) Deliver(msg hub.Message) {
	if msg.Resync {
		// Messages may have been missed: a subscription change among them.
		cs.g.subsNews.Add(1)
		return
	}
	var cm controlMsg
	if err := json.Unmarshal(msg.Payload, &cm); err != nil {
		return
	}
	if cm.T == "subs" {
		// Counted before the user is looked up: a connection still
		// opening is not attached yet, and must not miss it (see open).
		cs.g.subsNews.Add(1)
	}
	lu := cs.g.f.user(cm.U)
	if lu == nil {
		return
	}
	switch cm.T {
	case "notify":
		if cm.S == nil {
			return
		}
		go cs.g.notify(lu, *cm.S)
	case "subs":
		if cm.From != cs.g.mod.id {
			go cs.g.resyncSubscriptions(lu)
		}
	case "contacts":
		go cs.g.revalidate(lu)
	case "self":
		var frame []byte
		switch {
		case cm.S != nil:
			frame = wire.EventFrame(EventPresenceUpdated, UpdatedPayload{Users: []Status{*cm.S}, Self: true}, "")
		case cm.P != nil:
			frame = wire.EventFrame(EventPrivacyUpdated, *cm.P, "")
		default:
			return
		}
		for _, c := range lu.clientList() {
			if c.sid != cm.Skip {
				c.conn.Send(frame)
			}
		}
	}
}

// notify tells the user's connections here that st's user came online,
// without lastActiveAt when that user keeps it from them.
func (g *gateway) notify(lu *localUser, st Status) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hidden, err := g.mod.hidesLastActive(ctx, lu.id, []string{st.User})
	if err != nil || len(hidden) > 0 {
		// Unsure: leave it out.
		st.LastActiveAt = 0
	}
	frame := wire.EventFrame(EventNotificationReceived, NotificationPayload{User: st.User, On: StatusOnline, Status: st}, "")
	for _, c := range lu.clientList() {
		c.conn.Send(frame)
	}
}

// resyncSubscriptions makes this process follow what the user's forward set
// says after a change made through another gateway, and sends the user's
// connections here the status of the users added.
func (g *gateway) resyncSubscriptions(lu *localUser) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lu.changeMu.Lock()
	defer lu.changeMu.Unlock()
	ids, err := g.mod.st.subscriptions(ctx, lu.id)
	if err != nil {
		g.mod.log.Warn("presence: resync subscriptions", "err", err)
		return
	}
	added, hidden, err := g.f.setFollowing(ctx, lu, ids, nil)
	if err != nil {
		g.mod.log.Warn("presence: resync subscriptions", "err", err)
	}
	g.withdraw(ctx, lu, hidden)
	if added = slices.DeleteFunc(added, func(s *subject) bool { return slices.Contains(hidden, s.id) }); len(added) == 0 {
		return
	}
	for _, c := range lu.clientList() {
		c.sendSubjects(added, "", false)
	}
}

// revalidate drops the subscriptions the user may no longer see after their
// contact list, or the rooms of someone they follow, changed.
func (g *gateway) revalidate(lu *localUser) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lu.changeMu.Lock()
	defer lu.changeMu.Unlock()
	clients := lu.clientList()
	if len(clients) == 0 {
		return
	}
	// The newest connection carries the user's latest token.
	g.revalidateLocked(ctx, lu, clients[len(clients)-1].rooms)
}

// revalidateLocked is revalidate with lu.changeMu held and the viewer's
// rooms given.
func (g *gateway) revalidateLocked(ctx context.Context, lu *localUser, rooms []string) {
	clients := lu.clientList()
	if len(clients) == 0 {
		return
	}
	subs := lu.followed()
	ids := make([]string, len(subs))
	for i, s := range subs {
		ids[i] = s.id
	}
	forbidden, err := g.mod.policy.Forbidden(ctx, viewer{User: lu.id, Rooms: rooms}, ids)
	if err != nil {
		g.mod.log.Warn("presence: revalidate subscriptions", "err", err)
		return
	}
	if changed, _ := g.f.checkVisibility(ctx, lu, ids, nil); len(changed) > 0 {
		// Shown or withdrawn: the followers get the status as they may
		// now see it (a status replaces the one held, lastActiveAt and all).
		changed = slices.DeleteFunc(changed, func(id string) bool { return slices.Contains(forbidden, id) })
		if subs := lu.lookup(changed); len(subs) > 0 {
			for _, c := range clients {
				c.sendSubjects(subs, "", false)
			}
		}
	}
	g.withdraw(ctx, lu, forbidden)
}

// withdraw drops the subjects ids, which lu may no longer see, from the
// user's subscriptions and from what this process follows for them, and
// tells their connections here. The caller holds lu.changeMu.
func (g *gateway) withdraw(ctx context.Context, lu *localUser, ids []string) {
	clients := lu.clientList()
	if len(ids) == 0 || len(clients) == 0 {
		return
	}
	if _, err := g.mod.st.changeSubscriptions(ctx, lu.id, clients[len(clients)-1].sid, subRemove, ids); err != nil {
		g.mod.log.Warn("presence: withdraw subscriptions", "err", err)
	}
	g.f.unfollow(lu, ids)
	frame := wire.EventFrame(EventError, ErrorPayload{
		Code: wire.CodeForbidden, Message: "no longer visible: removed from your subscriptions", Users: ids,
	}, "")
	for _, c := range clients {
		c.conn.Send(frame)
	}
}

// recheckFollowers tells the gateways of everyone following user to check
// again what they may see: user left rooms that may have been the only
// thing they shared, or changed who may see them.
func (m *Module) recheckFollowers(user string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Counted before the followers are read: a connection whose follow
	// is not among them yet sees the count move and reads again.
	if err := m.st.bumpVisibilityEpoch(ctx); err != nil {
		m.log.Warn("presence: recheck followers", "err", err)
	}
	followers, err := m.st.followers(ctx, user)
	if err != nil {
		m.log.Warn("presence: recheck followers", "err", err)
		return
	}
	// In batches, each one round trip: a user with thousands of followers
	// used to wait a round trip per follower before their change answered.
	for len(followers) > 0 {
		n := min(len(followers), controlBatch)
		msgs := make([]hub.Outgoing, 0, n)
		for _, f := range followers[:n] {
			out, err := m.controlOut(controlMsg{T: "contacts", U: f})
			if err != nil {
				m.log.Error("presence: recheck followers", "err", err)
				return
			}
			msgs = append(msgs, out)
		}
		if err := m.hub.PublishMany(ctx, msgs); err != nil {
			m.log.Warn("presence: recheck followers", "err", err)
			return
		}
		followers = followers[n:]
	}
}

// controlBatch bounds the control messages sent in one round trip.
const controlBatch = 1000
