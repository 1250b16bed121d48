package viewers

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// sseMember is one SSE stream following one hotel.
type sseMember struct {
	q     *hub.Queue
	hotel string
}

func (s *sseMember) push(u *update) {
	s.q.Deliver(hub.Message{Topic: s.hotel, Payload: u.res.body})
}

func (s *sseMember) transport() string { return "sse" }

// stream is GET /v1/viewers/{hotel}/stream: Server-Sent Events, opening
// with the current count, then a count:updated event per change.
func (mod *Module) stream(c echo.Context) error {
	hotel := c.Param("hotel")
	if err := mod.checkHotel(hotel); err != nil {
		return err
	}
	mem := &sseMember{q: mod.feeds.hub.NewQueue(16), hotel: hotel}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 5*time.Second)
	err := mod.feeds.join(ctx, hotel, mem)
	cancel()
	if err != nil {
		return refusal.Busy(time.Second, "live counts are not available right now")
	}
	defer mod.feeds.leave(hotel, mem)
	st, err := mod.sock.OpenSSE(c, "viewers")
	if err != nil {
		return err
	}
	if res, err := mod.counter.get(hotel); err == nil {
		if st.Send(socket.SSEEvent{Event: "count:updated", Data: res.body}) != nil {
			st.Close()
			return nil
		}
		mod.m.pushes.WithLabelValues("sse").Inc()
		mod.feeds.note(res)
	}
	return st.Serve(mem.q, func(m hub.Message) (socket.SSEEvent, bool) {
		return socket.SSEEvent{Event: "count:updated", Data: m.Payload}, true
	})
}

// wsClient is one WebSocket following any number of hotels.
type wsClient struct {
	conn *socket.Conn
	mu   sync.Mutex
	subs map[string]bool
}

func (w *wsClient) push(u *update) { w.conn.Send(u.ws) }

func (w *wsClient) transport() string { return "ws" }

type hotelsPayload struct {
	Hotels []string `json:"hotels"`
}

// websocket is GET /v1/viewers/ws. Clients send
// {"v":1,"event":"count:subscribe","payload":{"hotels":[...]}} and
// count:unsubscribe; the server answers a subscribe with the current count
// of each hotel and then pushes count:updated on every change.
func (mod *Module) websocket(c echo.Context) error {
	conn, err := mod.sock.Upgrade(c, "viewers")
	if err != nil {
		return err
	}
	mod.serveSocket(conn)
	return nil
}

// serveSocket reads a count subscriber's frames until the socket closes,
// with no goroutine while the socket is idle.
func (mod *Module) serveSocket(conn *socket.Conn) {
	cl := &wsClient{conn: conn, subs: map[string]bool{}}
	limiter := rate.NewLimiter(rate.Limit(mod.cfg.SocketMessageRate), mod.cfg.SocketMessageBurst)
	conn.Serve(func(msg []byte) {
		env, perr := wire.ParseEnvelope(msg)
		if perr == nil && !limiter.Allow() {
			perr = &wire.ProtocolError{Code: wire.CodeRateLimited, Message: "too many messages"}
		}
		if perr == nil {
			perr = mod.handleFrame(conn.Context(), cl, env)
		}
		if perr != nil {
			conn.Send(wire.ErrorFrame(perr.Code, perr.Message, env.ID))
		}
	}, func() {
		cl.mu.Lock()
		hotels := make([]string, 0, len(cl.subs))
		for h := range cl.subs {
			hotels = append(hotels, h)
		}
		cl.subs = nil
		cl.mu.Unlock()
		for _, h := range hotels {
			mod.feeds.leave(h, cl)
		}
	})
}

func (mod *Module) handleFrame(ctx context.Context, cl *wsClient, env wire.Envelope) *wire.ProtocolError {
	switch env.Event {
	case "count:subscribe", "count:unsubscribe":
	default:
		return &wire.ProtocolError{Code: wire.CodeUnknownEvent, Message: "unknown event " + env.Event + ": want count:subscribe or count:unsubscribe"}
	}
	var p hotelsPayload
	if perr := wire.DecodePayload(env, &p); perr != nil {
		return perr
	}
	if len(p.Hotels) == 0 {
		return &wire.ProtocolError{Code: wire.CodeBadPayload, Message: env.Event + ": hotels must list at least one hotel id"}
	}
	for _, h := range p.Hotels {
		if !validHotel(h) {
			return &wire.ProtocolError{Code: wire.CodeBadPayload, Message: env.Event + ": " + badHotel}
		}
	}
	hotels := slices.Compact(slices.Sorted(slices.Values(p.Hotels)))
	if env.Event == "count:subscribe" {
		for _, h := range hotels {
			if err := mod.checkHotel(h); err != nil {
				code := wire.CodeUnavailable
				if errors.Is(err, ErrHotelNotFound) {
					code = codeHotelNotFound
				}
				return &wire.ProtocolError{Code: code, Message: env.Event + ": " + h + ": " + err.Error()}
			}
		}
	}
	if env.Event == "count:unsubscribe" {
		for _, h := range hotels {
			cl.mu.Lock()
			had := cl.subs[h]
			delete(cl.subs, h)
			cl.mu.Unlock()
			if had {
				mod.feeds.leave(h, cl)
			}
		}
		return nil
	}
	cl.mu.Lock()
	var fresh []string
	for _, h := range hotels {
		if !cl.subs[h] {
			fresh = append(fresh, h)
		}
	}
	if len(cl.subs)+len(fresh) > mod.cfg.MaxSubscriptions {
		cl.mu.Unlock()
		return &wire.ProtocolError{Code: wire.CodeLimitExceeded, Message: "a connection follows at most " + strconv.Itoa(mod.cfg.MaxSubscriptions) + " hotels"}
	}
	for _, h := range fresh {
		cl.subs[h] = true
	}
	cl.mu.Unlock()
	jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for i, h := range fresh {
		if err := mod.feeds.join(jctx, h, cl); err != nil {
			// Undo this request's joins: a refused request changes nothing.
			for _, done := range fresh[:i] {
				mod.feeds.leave(done, cl)
			}
			cl.mu.Lock()
			for _, f := range fresh {
				delete(cl.subs, f)
			}
			cl.mu.Unlock()
			return &wire.ProtocolError{Code: wire.CodeUnavailable, Message: "live counts are not available right now"}
		}
	}
	for _, h := range hotels {
		if res, err := mod.counter.get(h); err == nil {
			cl.conn.Send(wire.EventFrame("count:updated", json.RawMessage(res.body), env.ID))
			mod.m.pushes.WithLabelValues("ws").Inc()
			mod.feeds.note(res)
		}
	}
	return nil
}
