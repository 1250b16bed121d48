package presence

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/wire"
)

// The gateway's HTTP side: the upgrade handler, and what it refuses before
// the connection becomes a socket.

// handle authenticates, upgrades and opens the session on the HTTP
// handler's goroutine, then hands the connection to a reader goroutine of
// its own and returns: the handler's deep stack does not stay with every
// idle connection.
func (g *gateway) handle(c echo.Context) error {
	tok := auth.TokenFromRequest(c.Request())
	if tok == "" {
		return wire.Errorf(http.StatusUnauthorized, "unauthorized", "a bearer token is required (Authorization header or ?token=)")
	}
	claims, err := g.mod.users.Verify(tok)
	if err != nil {
		return wire.Errorf(http.StatusUnauthorized, "unauthorized", "the token is not valid")
	}
	if !validUserID(claims.Subject) {
		return wire.Errorf(http.StatusUnauthorized, "unauthorized", "the token's subject is not a usable user id")
	}
	subscribe, pre, err := g.subscriptionsNamed(c, viewer{User: claims.Subject, Rooms: claims.Rooms})
	if err != nil {
		return err
	}
	if !g.awaitListening() {
		return wire.Unavailable(time.Second, "the gateway is starting; retry after the delay")
	}
	if !g.admit(c.Request().Context()) {
		g.m.protocolErrs.WithLabelValues("busy").Inc()
		return wire.Unavailable(time.Second, "too many connections opening at once; retry after the delay")
	}
	defer func() { <-g.opening }()
	// Counted before the upgrade, so shutdown, which waits for the
	// connections after the sockets are drained, cannot miss this one.
	g.wg.Add(1)
	// Held: open always sends a frame next (the snapshot, or an error
	// and close), which carries the handshake's answer with it.
	conn, err := g.mod.sockets.UpgradeHeld(c, "presence")
	if err != nil {
		g.wg.Done()
		return err
	}
	conn.SetReadLimit(g.cfg.MaxFrameBytes)
	cl := &client{
		g: g, conn: conn, user: claims.Subject, sid: store.NewToken()[:16], rooms: claims.Rooms,
		msgs:       newBucket(g.cfg.MessagesPerSecond, g.cfg.MessageBurst),
		subChanges: newBucket(float64(g.cfg.SubscriptionChangesPerMinute)/60, g.cfg.SubscriptionChangesPerMinute),
	}
	if claims.ExpiresAt != nil {
		cl.exp = claims.ExpiresAt.Unix()
	}
	conn.SetSource(cl.nextFrame, putFrameBuf)
	if subscribe != nil {
		// The set made as the session opens is a subscription change.
		cl.subChanges.allow(time.Now().UnixNano())
	}
	if !cl.open(subscribe, pre) {
		g.wg.Done()
		return nil
	}
	cl.serve()
	return nil
}

// subscriptionsNamed reads the subscriptions a connection names as it
// connects (?subscribe=, once per user): checked as a subscriptions:set
// is, and refused before the upgrade, so a connection that opens follows
// them. nil when none are named: the session keeps the user's set. It
// also returns what the check read, for the follow (nil: nothing kept).
func (g *gateway) subscriptionsNamed(c echo.Context, v viewer) ([]string, *visibilityRead, error) {
	named, ok, err := wire.QueryValues(c.Request().URL.RawQuery, "subscribe")
	if err != nil {
		return nil, nil, wire.BadRequest("subscribe: %v", err)
	}
	if !ok {
		return nil, nil, nil
	}
	if len(named) > g.cfg.MaxSubscriptions {
		return nil, nil, wire.Errorf(http.StatusBadRequest, wire.CodeLimitExceeded, "at most %d subscriptions per user", g.cfg.MaxSubscriptions)
	}
	ids, bad, ok := cleanIDs(named)
	if !ok {
		return nil, nil, wire.BadRequest("subscribe: %q is not a valid user id", truncate(bad, 40))
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), opTimeout)
	defer cancel()
	forbidden, pre, err := g.checkFollows(ctx, v, ids)
	if err != nil {
		g.mod.log.Warn("presence: check subscriptions named at connect", "err", err)
		return nil, nil, wire.Unavailable(time.Second, "presence is unavailable; reconnect later")
	}
	if len(forbidden) > 0 {
		e := wire.Errorf(http.StatusForbidden, wire.CodeForbidden, "not visible to you: not a contact and no shared room")
		e.Details = map[string]any{"users": forbidden}
		return nil, nil, e
	}
	return ids, pre, nil
}

// checkFollows is the policy's Forbidden for subjects v is about to follow,
// with what the check read of their settings, for the follow's own check
// (nil: nothing kept).
func (g *gateway) checkFollows(ctx context.Context, v viewer, subjects []string) ([]string, *visibilityRead, error) {
	if vp, ok := g.mod.policy.(*visibilityPolicy); ok {
		return vp.checkFollows(ctx, v, subjects)
	}
	forbidden, err := g.mod.policy.Forbidden(ctx, v, subjects)
	return forbidden, nil, err
}
