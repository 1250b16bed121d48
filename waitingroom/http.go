package waitingroom

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// Client frames allowed per socket: a ping every 5 s is the protocol; this
// leaves room for bursts without letting a client flood Redis.
const (
	clientFrameRate  = 1
	clientFrameBurst = 5
)

type handlers struct {
	m *Module
}

func (h *handlers) requireEvent(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !validEvent(c.Param("event")) {
			return wire.BadRequest("the event id must be 1 to 64 letters, digits, '.', '_' or '-'")
		}
		return next(c)
	}
}

func (h *handlers) user(c echo.Context) (string, error) {
	u := auth.UserID(c)
	if u == "" || len(u) > maxUserLen {
		return "", wire.Errorf(http.StatusUnauthorized, "unauthorized", "the token's subject is not a usable user id")
	}
	return u, nil
}

func (h *handlers) storeCtx(c echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request().Context(), h.m.cfg.StoreTimeout)
}

// fail maps a store error to the answer: 404 for a missing waiting room,
// otherwise a retryable 503 (fail closed).
func (h *handlers) fail(op string, err error) error {
	if errors.Is(err, errNoRoom) {
		h.m.metrics.requests.WithLabelValues(op, "no_room").Inc()
		return wire.Errorf(http.StatusNotFound, CodeNoRoom, "this event has no waiting room")
	}
	h.m.metrics.requests.WithLabelValues(op, "unavailable").Inc()
	h.m.metrics.storeErrors.WithLabelValues(op).Inc()
	h.m.log.Warn("waitingroom: store failed; answering 503", "op", op, "err", err)
	return wire.Unavailable(h.m.cfg.RetryAfter, "the waiting room is unavailable; retry later")
}

// place answers a join or status with the user's place or pass.
func (h *handlers) place(c echo.Context, op string, room roomState, p placeInLine, user string) error {
	h.m.metrics.requests.WithLabelValues(op, p.State).Inc()
	switch p.State {
	case StateAdmitted:
		a, err := h.m.admitted(c.Param("event"), user, room, p)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, a)
	case StateAbsent:
		return wire.Errorf(http.StatusNotFound, CodeNotInLine, "you are not in line for this event; join first")
	}
	return c.JSON(http.StatusOK, h.m.queuedAnswer(room, p))
}

// POST /v1/waitingroom/:event/join
func (h *handlers) join(c echo.Context) error {
	user, err := h.user(c)
	if err != nil {
		return err
	}
	ctx, cancel := h.storeCtx(c)
	defer cancel()
	room, p, err := h.m.line.Join(ctx, c.Param("event"), user)
	if err != nil {
		return h.fail("join", err)
	}
	return h.place(c, "join", room, p, user)
}

// GET /v1/waitingroom/:event/status
func (h *handlers) status(c echo.Context) error {
	user, err := h.user(c)
	if err != nil {
		return err
	}
	ctx, cancel := h.storeCtx(c)
	defer cancel()
	room, p, err := h.m.line.Status(ctx, c.Param("event"), user)
	if err != nil {
		return h.fail("status", err)
	}
	return h.place(c, "status", room, p, user)
}

// POST /v1/waitingroom/:event/leave: leave the line, or give up the lease
// after checkout.
func (h *handlers) leave(c echo.Context) error {
	user, err := h.user(c)
	if err != nil {
		return err
	}
	ctx, cancel := h.storeCtx(c)
	defer cancel()
	if err := h.m.line.Leave(ctx, c.Param("event"), user); err != nil {
		return h.fail("leave", err)
	}
	h.m.metrics.requests.WithLabelValues("leave", "ok").Inc()
	return c.NoContent(http.StatusNoContent)
}

// GET /v1/waitingroom/keys: the public keys of passes, as a JWKS.
func (h *handlers) keys(c echo.Context) error {
	set, err := h.m.ring.JWKS()
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.JSONBlob(http.StatusOK, set)
}

// GET /v1/waitingroom/:event/ws: joins (or keeps the place), then pushes
// queue:position and finally queue:admitted with the pass.
func (h *handlers) socket(c echo.Context) error {
	user, err := h.user(c)
	if err != nil {
		return err
	}
	event := c.Param("event")
	ctx, cancel := h.storeCtx(c)
	room, p, err := h.m.line.Join(ctx, event, user)
	cancel()
	if err != nil {
		return h.fail("join", err)
	}
	h.m.metrics.requests.WithLabelValues("join", p.State).Inc()
	conn, err := h.m.sockets.Upgrade(c, "waitingroom")
	if err != nil {
		return err
	}
	w := &waiter{conn: conn, user: user, lastRank: p.Rank, lastSent: time.Now()}
	if p.State == StateAdmitted {
		frame, err := h.m.admittedFrame(event, user, room, p, "")
		if err != nil {
			conn.Close(websocket.CloseInternalServerErr, "")
			return nil
		}
		conn.SendAndClose(frame, websocket.CloseNormalClosure, "admitted")
		conn.Serve(func([]byte) {}, nil)
		return nil
	}
	r := h.m.rooms.attach(event, w, h.m.cfg.MaxSocketsPerUser)
	if r == nil {
		// One user's tabs and devices, not a flood of sockets.
		h.m.metrics.requests.WithLabelValues("socket", "refused").Inc()
		conn.SendAndClose(wire.ErrorFrame(wire.CodeLimitExceeded, "too many waiting-room sockets of this user for this event", ""),
			socket.ClosePolicy, "too many sockets")
		conn.Serve(func([]byte) {}, nil)
		return nil
	}
	conn.Send(wire.EventFrame(EventPosition, h.m.queuedAnswer(room, p), ""))
	h.serveSocket(r, w, event)
	return nil
}

// serveSocket reads a queued user's frames until the socket closes, with
// no goroutine while the socket is idle.
func (h *handlers) serveSocket(r *room, w *waiter, event string) {
	conn, user := w.conn, w.user
	limit := rate.NewLimiter(clientFrameRate, clientFrameBurst)
	refused := 0
	conn.Serve(func(msg []byte) {
		if !limit.Allow() {
			// A client that keeps flooding is closed rather than answered.
			if refused++; refused > clientFrameBurst*2 {
				conn.Close(socket.ClosePolicy, "too many frames")
				return
			}
			conn.Send(wire.ErrorFrame(wire.CodeRateLimited, "at most one frame a second", ""))
			return
		}
		refused = 0
		h.clientFrame(conn, event, user, msg)
	}, func() { h.m.rooms.detach(r, w) })
}

func (h *handlers) clientFrame(conn *socket.Conn, event, user string, msg []byte) {
	env, perr := wire.ParseEnvelope(msg)
	if perr != nil {
		conn.Send(wire.ErrorFrame(perr.Code, perr.Message, env.ID))
		return
	}
	if env.Event != EventPing {
		conn.Send(wire.ErrorFrame(wire.CodeUnknownEvent, "the waiting room accepts queue:ping", env.ID))
		return
	}
	if len(env.Payload) > 0 && string(env.Payload) != "null" {
		// The payload is optional and has no fields: anything in it is a
		// client mistake worth telling.
		var none struct{}
		if perr := wire.DecodePayload(env, &none); perr != nil {
			conn.Send(wire.ErrorFrame(perr.Code, perr.Message, env.ID))
			return
		}
	}
	ctx, cancel := context.WithTimeout(conn.Context(), h.m.cfg.StoreTimeout)
	room, p, err := h.m.line.Status(ctx, event, user)
	cancel()
	switch {
	case errors.Is(err, errNoRoom):
		conn.SendAndClose(wire.ErrorFrame(CodeNoRoom, "this event has no waiting room", env.ID), websocket.CloseNormalClosure, CodeNoRoom)
	case err != nil:
		h.m.metrics.storeErrors.WithLabelValues("status").Inc()
		conn.Send(wire.ErrorFrame(wire.CodeUnavailable, "the waiting room is unavailable; your place is kept, ping again later", env.ID))
	case p.State == StateAdmitted:
		frame, err := h.m.admittedFrame(event, user, room, p, env.ID)
		if err == nil {
			conn.SendAndClose(frame, websocket.CloseNormalClosure, "admitted")
		}
	case p.State == StateAbsent:
		conn.SendAndClose(wire.ErrorFrame(CodeNotInLine, "you are no longer in line; join again", env.ID), websocket.CloseNormalClosure, CodeNotInLine)
	default:
		conn.Send(wire.EventFrame(EventPosition, h.m.queuedAnswer(room, p), env.ID))
	}
}

// PUT /v1/admin/waitingrooms/:event: create or change the settings.
func (h *handlers) putSettings(c echo.Context) error {
	var patch settingsPatch
	if err := wire.DecodeBody(c, &patch); err != nil {
		return err
	}
	event := c.Param("event")
	ctx, cancel := h.storeCtx(c)
	defer cancel()
	next, created, err := h.m.line.UpdateSettings(ctx, event, h.m.defaults(), patch.apply)
	var invalid *invalidSettingsError
	if errors.As(err, &invalid) {
		return wire.Errorf(http.StatusUnprocessableEntity, "invalid_settings", "%v", invalid.Err)
	}
	if err != nil {
		return h.fail("settings", err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	h.m.log.Info("waitingroom: settings changed", "event", event, "created", created,
		"capacity", next.Capacity, "batch", next.Batch, "mode", next.Mode, "paused", next.Paused)
	return c.JSON(status, next)
}

func (m *Module) defaults() Settings {
	return Settings{
		Capacity:                m.cfg.DefaultCapacity,
		Batch:                   m.cfg.DefaultBatch,
		LeaseSeconds:            int(m.cfg.DefaultLease / time.Second),
		HeartbeatTimeoutSeconds: int(m.cfg.DefaultHeartbeatTimeout / time.Second),
		Mode:                    ModeFIFO,
	}
}

// GET /v1/admin/waitingrooms/:event: settings and live statistics.
func (h *handlers) getRoom(c echo.Context) error {
	event := c.Param("event")
	ctx, cancel := h.storeCtx(c)
	defer cancel()
	s, err := h.m.line.Settings(ctx, event)
	if err != nil {
		return h.fail("settings", err)
	}
	st, err := h.m.line.Stats(ctx, event)
	if err != nil {
		return h.fail("stats", err)
	}
	st.Capacity = s.Capacity
	if n, err := h.m.line.MemoryUsage(ctx, event); err == nil {
		st.MemoryBytes = &n
	}
	return c.JSON(http.StatusOK, RoomView{Event: event, Settings: s, Stats: st})
}

// DELETE /v1/admin/waitingrooms/:event: remove the waiting room, its line
// and its leases (every pass of the event stops verifying).
func (h *handlers) deleteRoom(c echo.Context) error {
	ctx, cancel := h.storeCtx(c)
	defer cancel()
	if err := h.m.line.Delete(ctx, c.Param("event")); err != nil {
		return h.fail("delete", err)
	}
	return c.NoContent(http.StatusNoContent)
}
