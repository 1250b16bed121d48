package presence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// handle answers one client frame. Refusals are error events carrying the
// request id; the connection survives them.
func (c *client) handle(msg []byte) {
	g := c.g
	now := time.Now().UnixNano()
	if !c.msgs.allow(now) {
		// One error a second is enough to tell a flooding client; the
		// frames themselves are dropped unread.
		if now-c.lastLimited >= int64(time.Second) {
			c.lastLimited = now
			c.sendError(wire.CodeRateLimited, fmt.Sprintf("more than %g messages per second; messages are being dropped", g.cfg.MessagesPerSecond), "", nil)
		}
		return
	}
	if int64(len(msg)) > g.cfg.MaxMessageBytes {
		c.sendError(CodeMessageTooLarge, fmt.Sprintf("messages are limited to %d bytes", g.cfg.MaxMessageBytes), "", nil)
		return
	}
	env, perr := wire.ParseEnvelope(msg)
	if perr != nil {
		c.sendError(perr.Code, perr.Message, env.ID, nil)
		return
	}
	if c.exp > 0 && time.Now().Unix() > c.exp {
		c.closeWithError(CodeUnauthorized, "the token expired; reconnect with a fresh one", env.ID, socket.ClosePolicy, "token expired")
		return
	}
	if c.ended.Load() {
		c.endSession(env.ID)
		return
	}
	// Not derived from the connection's context: a child would leave a
	// children map behind in every connection's context.
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	switch env.Event {
	case EventSessionPing:
		c.onPing(ctx, env)
	case EventPresenceUpdate:
		c.onUpdate(ctx, env)
	case EventSubscriptionsSet:
		c.onSubscriptions(ctx, env, subSet)
	case EventSubscriptionsAdd:
		c.onSubscriptions(ctx, env, subAdd)
	case EventSubscriptionsRemove:
		c.onSubscriptions(ctx, env, subRemove)
	case EventNotificationsSubscribe:
		c.onNotify(ctx, env)
	case EventSessionDisconnect:
		c.onDisconnect(ctx, env)
	case EventPrivacySet:
		c.onPrivacy(ctx, env)
	default:
		c.sendError(wire.CodeUnknownEvent, fmt.Sprintf("unknown event %q", env.Event), env.ID, nil)
	}
}

// failed answers a store error: the session ended, or the store is away.
func (c *client) failed(err error, id string) {
	if errors.Is(err, errNoSession) {
		c.endSession(id)
		return
	}
	c.g.mod.log.Warn("presence: request failed", "err", err)
	c.sendError(wire.CodeUnavailable, "presence is unavailable; retry later", id, nil)
}

func hasPayload(env wire.Envelope) bool {
	p := bytes.TrimSpace(env.Payload)
	return len(p) > 0 && !bytes.Equal(p, []byte("null"))
}

// onPing renews the session's deadline and takes the activity it reports.
func (c *client) onPing(ctx context.Context, env wire.Envelope) {
	var p PingPayload
	if hasPayload(env) {
		if perr := wire.DecodePayload(env, &p); perr != nil {
			c.sendError(perr.Code, perr.Message, env.ID, nil)
			return
		}
	}
	kind, idleMs := "none", int64(0)
	switch {
	case p.Active != nil && p.IdleMs != nil:
		c.sendError(wire.CodeBadPayload, "session:ping: send active or idleMs, not both", env.ID, nil)
		return
	case p.Active != nil:
		kind = "inactive"
		if *p.Active {
			kind = "active"
		}
	case p.IdleMs != nil:
		if *p.IdleMs < 0 || *p.IdleMs > int64(365*24*time.Hour/time.Millisecond) {
			c.sendError(wire.CodeBadPayload, "session:ping: idleMs must be between 0 and a year", env.ID, nil)
			return
		}
		kind, idleMs = "idle_ms", *p.IdleMs
	}
	if !c.reportsActivity(kind, idleMs) {
		c.g.pings.add(c, env.ID, true)
		return
	}
	res, err := c.g.mod.st.step(ctx, c.user, "update", c.sid, kind, idleMs, "")
	if err != nil {
		c.failed(err, env.ID)
		return
	}
	c.g.pings.add(c, env.ID, false)
	c.noteActivity(kind, idleMs)
	c.g.mod.changed(ctx, res)
	c.armIdle(res.IdleIn)
}

// activitySlack: an idle report placing the last interaction at most this
// much after the one recorded is taken as the same interaction (the
// client's idle clock and the network's delay move it by milliseconds):
// a second, or a twentieth of the idle threshold when that is shorter.
func (c *client) activitySlack() int64 {
	return int64(min(time.Second, c.g.cfg.IdleThreshold/20))
}

// reportsActivity says whether a ping changes the session's record: a
// bare ping, or an idle report of no interaction since the one recorded,
// changes nothing, and costs no session step: the idle timer turns the
// user idle, and the ping batch checks the session still exists.
func (c *client) reportsActivity(kind string, idleMs int64) bool {
	switch kind {
	case "none":
		return false
	case "idle_ms":
		seen := time.Now().UnixNano() - idleMs*int64(time.Millisecond)
		return c.inactive.Load() || seen > c.lastAct.Load()+c.activitySlack()
	}
	return true
}

func (c *client) noteActivity(kind string, idleMs int64) {
	now := time.Now().UnixNano()
	switch kind {
	case "active":
		c.lastAct.Store(now)
		c.inactive.Store(false)
	case "inactive":
		c.inactive.Store(true)
	case "idle_ms":
		at := now - idleMs*int64(time.Millisecond)
		if at > c.lastAct.Load() {
			c.lastAct.Store(at)
			c.inactive.Store(false)
		}
	}
}

// onUpdate sets or clears the manual status and takes activity reports.
func (c *client) onUpdate(ctx context.Context, env wire.Envelope) {
	var p UpdatePayload
	if perr := wire.DecodePayload(env, &p); perr != nil {
		c.sendError(perr.Code, perr.Message, env.ID, nil)
		return
	}
	if len(p.Status) == 0 && p.Active == nil {
		c.sendError(wire.CodeBadPayload, "presence:update: status or active is required", env.ID, nil)
		return
	}
	kind, manual, invisible := "none", "", ""
	if p.Active != nil {
		kind = "inactive"
		if *p.Active {
			kind = "active"
		}
	}
	if len(p.Status) > 0 {
		if bytes.Equal(bytes.TrimSpace(p.Status), []byte("null")) {
			// Clears invisible too: null is "back to what I really am".
			manual, invisible = "-", "-"
		} else {
			var s string
			if err := wire.StrictJSON(p.Status, &s); err != nil {
				c.sendError(wire.CodeBadPayload, "presence:update: status must be a string or null", env.ID, nil)
				return
			}
			switch {
			case s == StatusOffline:
				c.sendError(CodeInvalidTransition, "offline is not a status to set: send session:disconnect to leave", env.ID, nil)
				return
			case s == StatusInvisible:
				// An overlay: the manual status, if any, stays the user's own.
				invisible = "+"
			case s == StatusOnline || s == StatusIdle:
				// Back to automatic, with this device active or not, and
				// visible.
				if p.Active != nil && *p.Active != (s == StatusOnline) {
					c.sendError(wire.CodeBadPayload, "presence:update: status and active disagree", env.ID, nil)
					return
				}
				manual, invisible, kind = "-", "-", "active"
				if s == StatusIdle {
					kind = "inactive"
				}
			case slices.Contains(c.g.cfg.ManualStatuses, s):
				manual = "=" + s
			default:
				c.sendError(CodeInvalidStatus, fmt.Sprintf("%q is not a status; manual statuses are %v", s, c.g.cfg.ManualStatuses), env.ID, nil)
				return
			}
		}
	}
	res, err := c.g.mod.st.step(ctx, c.user, "update", c.sid, kind, 0, manual, invisible)
	if err != nil {
		c.failed(err, env.ID)
		return
	}
	c.noteActivity(kind, 0)
	c.g.mod.changed(ctx, res)
	c.g.mod.audit.auditStep(c.auditRecord(env.ID), res, manual, invisible)
	if res.Sessions > 1 && (manual != "" || invisible != "") {
		own := res.Own.public()
		c.g.mod.tellSelf(ctx, c.user, c.sid, &own, nil)
	}
	c.armIdle(res.IdleIn)
	// The user's own status, not what followers see of it.
	c.conn.Send(wire.EventFrame(EventPresenceUpdated, UpdatedPayload{Users: []Status{res.Own.public()}}, env.ID))
}

// onSubscriptions applies subscriptions:set|add|remove.
func (c *client) onSubscriptions(ctx context.Context, env wire.Envelope, op subOp) {
	g := c.g
	var p SubscriptionsPayload
	if perr := wire.DecodePayload(env, &p); perr != nil {
		c.sendError(perr.Code, perr.Message, env.ID, nil)
		return
	}
	if p.Users == nil {
		c.sendError(wire.CodeBadPayload, env.Event+": users is required", env.ID, nil)
		return
	}
	if !c.subChanges.allow(time.Now().UnixNano()) {
		c.sendError(wire.CodeRateLimited, fmt.Sprintf("at most %d subscription changes per minute", g.cfg.SubscriptionChangesPerMinute), env.ID, nil)
		return
	}
	if len(p.Users) > g.cfg.MaxSubscriptions {
		c.sendError(wire.CodeLimitExceeded, fmt.Sprintf("at most %d subscriptions per user", g.cfg.MaxSubscriptions), env.ID, nil)
		return
	}
	ids, bad, ok := cleanIDs(p.Users)
	if !ok {
		c.sendError(wire.CodeBadPayload, fmt.Sprintf("%s: %q is not a valid user id", env.Event, truncate(bad, 40)), env.ID, nil)
		return
	}
	var pre *visibilityRead
	if op != subRemove {
		var forbidden []string
		var err error
		forbidden, pre, err = g.checkFollows(ctx, viewer{User: c.user, Rooms: c.rooms}, ids)
		if err != nil {
			c.failed(err, env.ID)
			return
		}
		if len(forbidden) > 0 {
			c.sendError(wire.CodeForbidden, "not visible to you: not a contact and no shared room", env.ID, forbidden)
			return
		}
	}

	lu := c.lu
	lu.changeMu.Lock()
	defer lu.changeMu.Unlock()
	change, err := g.mod.st.changeSubscriptions(ctx, c.user, c.sid, op, ids)
	var le *limitError
	if errors.As(err, &le) {
		c.sendError(wire.CodeLimitExceeded, le.msg, env.ID, le.users)
		return
	}
	if err != nil {
		c.failed(err, env.ID)
		return
	}
	if err := c.applyChange(ctx, change, pre); err != nil {
		c.failed(err, env.ID)
		return
	}
	// A set or add answers with the statuses of the users named (a set's
	// are now all followed, in the order asked).
	if op != subRemove {
		c.sendSubjects(lu.lookup(ids), env.ID, false)
	}
}

// announce tells the user's connections on other gateways to reread the
// committed set. With this session the only one (the usual connect), there
// are none: a session opening after the change reads the set as it opens,
// and the publish, with every gateway's read of it, is saved.
func (c *client) announce(ctx context.Context, change subChange) {
	if (len(change.Added) == 0 && len(change.Removed) == 0) || change.Sessions <= 1 {
		return
	}
	if err := c.g.mod.sendControl(ctx, controlMsg{T: "subs", U: c.user, From: c.g.mod.id}); err != nil {
		c.g.mod.log.Warn("presence: announce subscription change", "err", err)
	}
}

// applyChange follows a committed change of the user's subscriptions here
// and announces it elsewhere; the user's other connections here get the
// statuses of the users added; pre is as follow takes it. The caller
// holds lu.changeMu.
func (c *client) applyChange(ctx context.Context, change subChange, pre *visibilityRead) error {
	c.announce(ctx, change)
	lu := c.lu
	// Unfollowing also clears what the user's connections were sent of them.
	c.g.f.unfollow(lu, change.Removed)
	_, hidden, err := c.g.f.follow(ctx, lu, change.Added, pre)
	c.g.withdraw(ctx, lu, hidden)
	if err != nil {
		// Committed but not followed here yet: the next connection of the
		// user rereads the set.
		lu.hydrated = false
		return err
	}
	if added := lu.lookup(change.Added); len(added) > 0 {
		for _, other := range lu.clientList() {
			if other != c {
				other.sendSubjects(added, "", false)
			}
		}
	}
	return nil
}

// onNotify records a one-time notification for when a user comes online.
func (c *client) onNotify(ctx context.Context, env wire.Envelope) {
	var p NotifyPayload
	if perr := wire.DecodePayload(env, &p); perr != nil {
		c.sendError(perr.Code, perr.Message, env.ID, nil)
		return
	}
	if p.On != StatusOnline {
		c.sendError(wire.CodeBadPayload, `notifications:subscribe: on must be "online"`, env.ID, nil)
		return
	}
	if !validUserID(p.User) {
		c.sendError(wire.CodeBadPayload, "notifications:subscribe: user is not a valid user id", env.ID, nil)
		return
	}
	if !c.subChanges.allow(time.Now().UnixNano()) {
		c.sendError(wire.CodeRateLimited, fmt.Sprintf("at most %d subscription changes per minute", c.g.cfg.SubscriptionChangesPerMinute), env.ID, nil)
		return
	}
	forbidden, err := c.g.mod.policy.Forbidden(ctx, viewer{User: c.user, Rooms: c.rooms}, []string{p.User})
	if err != nil {
		c.failed(err, env.ID)
		return
	}
	if len(forbidden) > 0 {
		c.sendError(wire.CodeForbidden, "not visible to you: not a contact and no shared room", env.ID, forbidden)
		return
	}
	err = c.g.mod.st.subscribeOnce(ctx, c.user, c.sid, p.User)
	var le *limitError
	if errors.As(err, &le) {
		c.sendError(wire.CodeLimitExceeded, le.msg, env.ID, nil)
		return
	}
	if err != nil {
		c.failed(err, env.ID)
	}
}

// onPrivacy changes who may see the user's status and lastActiveAt.
func (c *client) onPrivacy(ctx context.Context, env wire.Envelope) {
	var p VisibilityPayload
	if perr := wire.DecodePayload(env, &p); perr != nil {
		c.sendError(perr.Code, perr.Message, env.ID, nil)
		return
	}
	if err := checkVisibility(p); err != nil {
		c.sendError(wire.CodeBadPayload, "privacy:set: "+err.Error(), env.ID, nil)
		return
	}
	if !c.subChanges.allow(time.Now().UnixNano()) {
		c.sendError(wire.CodeRateLimited, fmt.Sprintf("at most %d subscription changes per minute", c.g.cfg.SubscriptionChangesPerMinute), env.ID, nil)
		return
	}
	after, err := c.g.mod.setVisibility(ctx, c.user, p, c.auditRecord(env.ID))
	if err != nil {
		c.failed(err, env.ID)
		return
	}
	c.conn.Send(wire.EventFrame(EventPrivacyUpdated, after.payload(), env.ID))
}

// auditRecord is the audit record of a change this session asks for.
func (c *client) auditRecord(requestID string) AuditRecord {
	return AuditRecord{User: c.user, Actor: userActor(c.user), Device: c.sid, RequestID: requestID}
}

// onDisconnect ends the session at once: no grace period.
func (c *client) onDisconnect(ctx context.Context, env wire.Envelope) {
	c.stopIdle()
	res, err := c.g.mod.st.step(ctx, c.user, "close", c.sid)
	if err != nil {
		// Not ended here: closing the socket starts the grace period, and
		// failing that the session ends at its deadline.
		c.g.mod.log.Warn("presence: disconnect", "err", err)
		c.conn.Close(1000, "session ended")
		return
	}
	c.ended.Store(true)
	c.g.mod.changed(ctx, res)
	if err := c.g.mod.st.inactive(ctx, c.sid, c.user, "disconnect"); err != nil {
		c.g.mod.log.Warn("presence: disconnect event", "err", err)
	}
	c.conn.Close(1000, "session ended")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
