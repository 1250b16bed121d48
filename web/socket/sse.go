package socket

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/web/wire"
)

// SSEEvent is one Server-Sent Event.
type SSEEvent struct {
	Event string
	Data  []byte
}

// SSE is one Server-Sent Events stream. Like a WebSocket it is tracked so
// that shutdown can tell the client when to come back.
type SSE struct {
	c       echo.Context
	s       *Sockets
	kind    string
	flusher http.Flusher
	gone    chan time.Duration // receives the reconnect delay on drain
	once    sync.Once
}

// OpenSSE starts an event stream on the response; during shutdown it refuses
// with 503.
func (s *Sockets) OpenSSE(c echo.Context, kind string) (*SSE, error) {
	flusher, ok := c.Response().Writer.(http.Flusher)
	if !ok {
		return nil, fmt.Errorf("sse: response cannot be flushed")
	}
	st := &SSE{c: c, s: s, kind: kind, flusher: flusher, gone: make(chan time.Duration, 1)}
	if !s.track(st) {
		return nil, wire.Unavailable(s.cfg.ReconnectMaxWait, "server is restarting")
	}
	c.Set(RealtimeKey, true)
	s.open.WithLabelValues(kind).Inc()
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set(echo.HeaderCacheControl, "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // nginx must not buffer the stream
	c.Response().WriteHeader(http.StatusOK)
	flusher.Flush()
	return st, nil
}

// Send writes one event and flushes it.
func (st *SSE) Send(ev SSEEvent) error {
	var b bytes.Buffer
	if ev.Event != "" {
		b.WriteString("event: " + ev.Event + "\n")
	}
	for _, line := range strings.Split(string(ev.Data), "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
	w := st.c.Response()
	if err := http.NewResponseController(w.Writer).SetWriteDeadline(time.Now().Add(st.s.cfg.WriteTimeout)); err != nil && err != http.ErrNotSupported {
		return err
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("sse: write: %w", err)
	}
	st.flusher.Flush()
	return nil
}

// Serve streams q until the client leaves, the queue is evicted (the client
// was too slow) or the server drains. render turns a hub message into an
// event; returning false skips it. Idle streams get a comment line every
// sse_keepalive so proxies keep them open.
func (st *SSE) Serve(q *hub.Queue, render func(hub.Message) (SSEEvent, bool)) error {
	defer st.Close()
	keepalive := time.NewTicker(st.s.cfg.SSEKeepalive)
	defer keepalive.Stop()
	ctx := st.c.Request().Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-q.Evicted():
			st.s.drops.WithLabelValues("slow_consumer").Inc()
			return nil
		case d := <-st.gone:
			// retry: tells EventSource how long to wait before reconnecting.
			_, _ = fmt.Fprintf(st.c.Response(), "retry: %d\nevent: reconnect\ndata: %s\n\n", d.Milliseconds(), reconnectJSON(d))
			st.flusher.Flush()
			return nil
		case m := <-q.C():
			ev, ok := render(m)
			if !ok {
				continue
			}
			if err := st.Send(ev); err != nil {
				return nil
			}
		case <-keepalive.C:
			if _, err := st.c.Response().Write([]byte(": keepalive\n\n")); err != nil {
				return nil
			}
			st.flusher.Flush()
		}
	}
}

func (st *SSE) drain(reconnect time.Duration) {
	select {
	case st.gone <- reconnect:
	default:
	}
}

// Close ends tracking of the stream; Serve calls it, handlers that return
// without serving must.
func (st *SSE) Close() {
	st.once.Do(func() {
		st.s.untrack(st)
		st.s.open.WithLabelValues(st.kind).Dec()
	})
}
