package booking

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/socket"
)

// Live seat-map messages. Browsers get invalidations, never deltas: "section
// B changed, fetch it again". A lost invalidation is repaired by the next
// one or by the reset every stream opens with (and sent again after a Redis
// reconnect, when invalidations may have been missed).
var (
	resetMessage = []byte(`{"type":"reset"}`)
)

// invalidation is the message published for a changed section.
type invalidation struct {
	Type    string `json:"type"`
	Section string `json:"section"`
}

// RoutesLive mounts GET /v1/events/:event/live: an SSE stream, or a
// WebSocket when the request asks to upgrade. ?section=A,B narrows it.
// admin guards the switch that pauses an event's pushes.
func (s *seatMap) RoutesLive(g *echo.Group, h *hub.Hub, sockets *socket.Sockets, admin echo.MiddlewareFunc) {
	g.GET("/v1/events/:event/live", answered(func(c echo.Context) error { return s.live(c, h, sockets) }))
	g.GET("/v1/admin/events/:event/live", answered(s.getLivePause), admin)
	g.PUT("/v1/admin/events/:event/live", answered(func(c echo.Context) error { return s.putLivePause(c, h) }), admin)
}

func (s *seatMap) live(c echo.Context, h *hub.Hub, sockets *socket.Sockets) error {
	ctx := c.Request().Context()
	l, err := s.layoutOf(ctx, c.Param("event"))
	if err != nil {
		return err
	}
	sections, err := l.selectSections(c.QueryParam("section"))
	if err != nil {
		return err
	}
	topics := make([]string, len(sections))
	for i, sec := range sections {
		topics[i] = s.keys.liveTopic(l.event, sec)
	}
	if websocket.IsWebSocketUpgrade(c.Request()) {
		return s.liveSocket(c, h, sockets, l.event, topics)
	}
	q := h.NewQueue(s.cfg.LiveQueue)
	if err := subscribeAll(ctx, h, topics, q); err != nil {
		return err
	}
	defer unsubscribeAll(h, topics, q)
	st, err := sockets.OpenSSE(c, "seatmap")
	if err != nil {
		return err
	}
	if err := st.Send(socket.SSEEvent{Event: "reset", Data: resetMessage}); err != nil {
		st.Close()
		return nil
	}
	if paused := s.pausedNotice(ctx, l.event); paused != nil {
		if err := st.Send(socket.SSEEvent{Event: "paused", Data: paused}); err != nil {
			st.Close()
			return nil
		}
	}
	return st.Serve(q, func(m hub.Message) (socket.SSEEvent, bool) {
		if m.Resync {
			return socket.SSEEvent{Event: "reset", Data: resetMessage}, true
		}
		return socket.SSEEvent{Event: liveEventName(m.Payload), Data: m.Payload}, true
	})
}

// liveConn forwards invalidations to a WebSocket, turning a resync notice
// into a reset.
type liveConn struct{ *socket.Conn }

func (lc liveConn) Deliver(m hub.Message) {
	if m.Resync {
		lc.Send(resetMessage)
		return
	}
	lc.Send(m.Payload)
}

func (s *seatMap) liveSocket(c echo.Context, h *hub.Hub, sockets *socket.Sockets, event string, topics []string) error {
	conn, err := sockets.Upgrade(c, "seatmap")
	if err != nil {
		return err // a refused handshake is answered already; a draining server's 503 is not
	}
	sub := &liveConn{conn}
	ctx, cancel := context.WithTimeout(conn.Context(), 5*time.Second)
	err = subscribeAll(ctx, h, topics, sub)
	cancel()
	if err != nil {
		conn.Close(websocket.CloseTryAgainLater, "subscription unavailable")
		return nil
	}
	conn.Send(resetMessage)
	if paused := s.pausedNotice(conn.Context(), event); paused != nil {
		conn.Send(paused)
	}
	// The viewer sends nothing we act on; reading keeps pings and the
	// close handshake flowing, with no goroutine while it is idle.
	conn.Serve(func([]byte) {}, func() { unsubscribeAll(h, topics, sub) })
	return nil
}

func subscribeAll(ctx context.Context, h *hub.Hub, topics []string, sub hub.Subscriber) error {
	for i, t := range topics {
		if err := h.Subscribe(ctx, t, sub); err != nil {
			unsubscribeAll(h, topics[:i], sub)
			return refusal.Busy(2*time.Second, "live updates unavailable; retry")
		}
	}
	return nil
}

func unsubscribeAll(h *hub.Hub, topics []string, sub hub.Subscriber) {
	for _, t := range topics {
		h.Unsubscribe(t, sub)
	}
}

func (l *layout) selectSections(filter string) ([]string, error) {
	if filter == "" {
		out := make([]string, len(l.sections))
		for i, sec := range l.sections {
			out[i] = sec.ID
		}
		return out, nil
	}
	var out []string
	for _, id := range strings.Split(filter, ",") {
		if l.sectionIndex(id) < 0 {
			return nil, refusal.New(ErrSectionNotFound, "no section %q in this event", id)
		}
		out = append(out, id)
	}
	return out, nil
}

// invalidator is the outbox relay's derived effect for inventory changes:
// delete the cached seat map first, then tell live viewers, so a viewer
// reacting at once cannot read the snapshot just declared stale.
type invalidator struct {
	rdb  redis.UniversalClient
	hub  *hub.Hub
	keys keys
}

// newInvalidator builds the derived effect.
func newInvalidator(rdb redis.UniversalClient, h *hub.Hub, ks store.Keyspace) *invalidator {
	return &invalidator{rdb: rdb, hub: h, keys: keys{ks: ks}}
}

// Handle applies the inventory.changed events of one relayed batch: each
// section they name once, in one pipelined round trip. A sale's batch of a
// hundred holds names one or two sections; the viewers refetch once.
func (inv *invalidator) Handle(ctx context.Context, events []outbox.Event) error {
	var todo []InventoryChanged
	for _, e := range events {
		var p InventoryChanged
		if err := json.Unmarshal(e.Payload, &p); err != nil || !validEventID(p.Event) || !sectionIDPattern.Valid(p.Section) {
			continue // nothing to invalidate; not worth stopping the relay for
		}
		if !slices.Contains(todo, p) {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	msgs := make([][]byte, len(todo))
	for i, p := range todo {
		msgs[i], _ = json.Marshal(invalidation{Type: "invalidate", Section: p.Section})
	}
	// Each call's keys share its event's hash tag; a retry after NOSCRIPT
	// runs them all again, which an invalidation may.
	err := invalidateScript.Pipelined(ctx, inv.rdb, func(pipe redis.Pipeliner) {
		for i, p := range todo {
			invalidateScript.Queue(ctx, pipe, []string{inv.keys.snapshot(p.Event, allScope), inv.keys.livePause(p.Event)},
				inv.keys.liveTopic(p.Event, p.Section), inv.hub.PublishCommand(), msgs[i])
		}
	})
	if err != nil {
		return errors.Join(errors.New("drop seat-map snapshots and publish the invalidations"), err)
	}
	return nil
}

//go:embed lua/invalidate.lua
var invalidateLua string

var invalidateScript = store.NewScript("booking_invalidate", invalidateLua)
