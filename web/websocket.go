package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/hub"
)

// Close codes presenced sends besides the standard ones.
const (
	// CloseServiceRestart (1012) carries {"reconnectMs":N}: come back after N ms.
	CloseServiceRestart = websocket.CloseServiceRestart
	// CloseSlowConsumer: the client did not read fast enough and was dropped.
	CloseSlowConsumer = 4008
	// CloseTooLarge (1009): a frame exceeded realtime.max_message_bytes.
	CloseTooLarge = websocket.CloseMessageTooBig
	// ClosePolicy (1008): the client broke a rule (auth expired, flooding).
	ClosePolicy = websocket.ClosePolicyViolation
)

// ErrClosed is returned by Read once the connection is closed.
var ErrClosed = errors.New("connection closed")

// Sockets upgrades, tracks and drains the WebSocket and SSE connections of
// one process.
type Sockets struct {
	cfg      config.Realtime
	log      *slog.Logger
	upgrader websocket.Upgrader

	mu      sync.Mutex
	live    map[drainer]struct{}
	closing bool
	allDone chan struct{} // closed when closing and live is empty

	open   *prometheus.GaugeVec
	queued prometheus.Gauge
	drops  *prometheus.CounterVec
}

// drainer is a live connection that can be told to go away.
type drainer interface {
	drain(reconnect time.Duration)
}

// readBufferBytes is the read buffer of each WebSocket connection.
const readBufferBytes = 256

// NewSockets prepares the upgrader with the origin check and buffer sizes
// that keep an idle connection small: a 256-byte read buffer, and write
// buffers taken from a shared pool only while writing.
func NewSockets(cfg config.Realtime, reg prometheus.Registerer, log *slog.Logger) (*Sockets, error) {
	s := &Sockets{
		cfg:     cfg,
		log:     log,
		live:    map[drainer]struct{}{},
		allDone: make(chan struct{}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "presenced_realtime_connections",
			Help: "Open WebSocket and SSE connections by endpoint kind.",
		}, []string{"kind"}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_realtime_send_queue_messages",
			Help: "Messages waiting in WebSocket send queues, summed over connections.",
		}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_realtime_dropped_connections_total",
			Help: "Connections closed by the server, by reason.",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{s.open, s.queued, s.drops} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	s.drops.WithLabelValues("slow_consumer")
	s.drops.WithLabelValues("write_failed")
	s.upgrader = websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		// An idle connection keeps its read buffer for life: a small one
		// (instead of the hijacked 4 KiB reader) saves most of it; larger
		// frames are read straight into the message, past the buffer.
		ReadBufferSize:  readBufferBytes,
		WriteBufferPool: &sync.Pool{},
		CheckOrigin:     originChecker(cfg.AllowedOrigins),
		Error:           handshakeError,
	}
	return s, nil
}

// handshakeError answers a refused WebSocket handshake (foreign origin, a
// plain GET, a bad version) with the JSON error shape of every other
// refusal, instead of the upgrader's plain text.
func handshakeError(w http.ResponseWriter, r *http.Request, status int, reason error) {
	e := handshakeRefusal(r, status, reason)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Sec-WebSocket-Version", "13")
	if status == http.StatusBadRequest && !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Upgrade", "websocket")
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(errorBody{Error: map[string]any{"code": e.Code, "message": e.Message}})
}

// handshakeRefusal names a refused handshake for the client and the log.
func handshakeRefusal(r *http.Request, status int, reason error) *Error {
	switch {
	case status == http.StatusForbidden:
		return Errorf(status, "forbidden", "origin %q may not open WebSockets here (realtime.allowed_origins)", r.Header.Get("Origin"))
	case !websocket.IsWebSocketUpgrade(r):
		return Errorf(http.StatusBadRequest, "bad_request", "this endpoint is a WebSocket: send an upgrade request (Connection: Upgrade, Upgrade: websocket)")
	}
	code := codeForStatus[status]
	if code == "" {
		code = "bad_request"
	}
	return Errorf(status, code, "WebSocket handshake refused: %s", strings.TrimPrefix(reason.Error(), "websocket: "))
}

// originChecker allows clients without an Origin (servers, CLIs), browsers
// on the same host, and the configured origins ("*" for any).
func originChecker(allowed []string) func(r *http.Request) bool {
	set := map[string]bool{}
	for _, o := range allowed {
		set[strings.ToLower(strings.TrimRight(o, "/"))] = true
	}
	return func(r *http.Request) bool {
		origin := r.Header.Get("Origin")
		if origin == "" || set["*"] {
			return true
		}
		if set[strings.ToLower(origin)] {
			return true
		}
		u, err := url.Parse(origin)
		return err == nil && strings.EqualFold(u.Host, r.Host)
	}
}

// Conn is one WebSocket connection. The handler goroutine that upgraded it
// reads; writes need no goroutine of their own while idle: Send queues the
// message and starts a writer only when one is not already running.
type Conn struct {
	ws   *websocket.Conn
	s    *Sockets
	kind string

	mu      sync.Mutex
	queue   [][]byte
	writing bool
	closed  bool
	// pull asks the writer to call source once the queue is empty.
	pull    bool
	source  func() []byte
	release func([]byte)
	ping    *time.Timer
	done    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc

	// final, once set, closes the connection after the queue is written.
	final *closeFrame
}

// Declare makes the connection gauge of kind exist at zero before the
// first connection, so dashboards and alerts see the endpoint from the
// start. Parts that serve sockets or streams declare their kind.
func (s *Sockets) Declare(kind string) { s.open.WithLabelValues(kind) }

// Upgrade turns the request into a WebSocket of the given kind (a label for
// metrics: "presence", "viewers", ...). During shutdown it refuses with 503.
//
// Callers read the connection from a goroutine of their own and return
// from the handler: while the handler runs, the HTTP server keeps about
// 9 KiB of buffers per connection that the WebSocket never uses.
func (s *Sockets) Upgrade(c echo.Context, kind string) (*Conn, error) {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return nil, Unavailable(s.cfg.ReconnectMaxWait, "server is restarting")
	}
	ws, err := s.upgrader.Upgrade(c.Response(), c.Request(), nil)
	if err != nil {
		// handshakeError has answered the client; the error carries the
		// status for the access log and metrics.
		if c.Response().Committed {
			return nil, &Error{Status: c.Response().Status, Code: "handshake", Message: err.Error()}
		}
		return nil, fmt.Errorf("websocket upgrade: %w", err)
	}
	c.Set(realtimeKey, true)
	// The upgrader wrote 101 on the hijacked connection, past echo.
	c.Response().Status = http.StatusSwitchingProtocols
	ws.SetReadLimit(s.cfg.MaxMessageBytes)
	_ = ws.SetReadDeadline(time.Now().Add(s.cfg.PongTimeout))
	ws.SetPongHandler(func(string) error {
		return ws.SetReadDeadline(time.Now().Add(s.cfg.PongTimeout))
	})
	conn := &Conn{ws: ws, s: s, kind: kind, done: make(chan struct{})}
	conn.ctx, conn.cancel = context.WithCancel(context.Background())
	if !s.track(conn) {
		conn.closeNow(CloseServiceRestart, reconnectReason(s.cfg))
		return nil, ErrClosed
	}
	s.open.WithLabelValues(kind).Inc()
	conn.mu.Lock()
	conn.ping = time.AfterFunc(s.cfg.PingInterval, conn.sendPing)
	conn.mu.Unlock()
	return conn, nil
}

// Read returns the next text or binary message. It fails once the connection
// is closed, the peer goes silent past pong_timeout, or a frame is too large
// (then the peer gets a 1009 close).
func (c *Conn) Read() ([]byte, error) {
	_, msg, err := c.ws.ReadMessage()
	if err != nil {
		if errors.Is(err, websocket.ErrReadLimit) {
			c.Close(CloseTooLarge, "message too large")
		} else {
			c.Close(websocket.CloseNormalClosure, "")
		}
		return nil, fmt.Errorf("%w: %v", ErrClosed, err)
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(c.s.cfg.PongTimeout))
	return msg, nil
}

type closeFrame struct {
	code   int
	reason string
}

// Send queues msg without blocking. A client whose queue is full is too slow
// and is dropped with close code 4008; Send then returns false.
func (c *Conn) Send(msg []byte) bool {
	return c.enqueue(msg, nil)
}

// SendAndClose queues msg as the last message and closes the connection
// with code and reason once everything queued is written, so a final event
// (an admission, a verdict) is not cut off by its own close frame. Later
// sends are refused.
func (c *Conn) SendAndClose(msg []byte, code int, reason string) bool {
	return c.enqueue(msg, &closeFrame{code: code, reason: reason})
}

func (c *Conn) enqueue(msg []byte, final *closeFrame) bool {
	c.mu.Lock()
	if c.closed || c.final != nil {
		c.mu.Unlock()
		return false
	}
	if len(c.queue) >= c.s.cfg.SendQueue {
		c.mu.Unlock()
		c.s.drops.WithLabelValues("slow_consumer").Inc()
		c.Close(CloseSlowConsumer, "slow consumer")
		return false
	}
	c.queue = append(c.queue, msg)
	c.final = final
	c.s.queued.Inc()
	start := !c.writing
	c.writing = true
	c.mu.Unlock()
	if start {
		go c.flush()
	}
	return true
}

// SetSource gives the connection a producer of frames built at the moment
// the socket is free to take them: after Pull, the writer writes whatever
// is queued, then calls src and writes the frame it returns (nil: nothing
// to send). A producer that coalesces what it is asked to send while a
// write is in flight thus batches only under backpressure, and an idle
// connection gets its frame at once. Set it before the first Pull.
//
// release, if not nil, gets each frame of src back once it is written (or
// the write failed): the socket holds no reference to it any more, so the
// producer may reuse its buffer for the next frame instead of leaving one
// allocation per delivery to the garbage collector.
func (c *Conn) SetSource(src func() []byte, release func([]byte)) {
	c.mu.Lock()
	c.source = src
	c.release = release
	c.mu.Unlock()
}

// Pull asks the writer to take a frame from the source as soon as the
// socket is free, starting it when it is not running. Calls while a pull
// is pending are merged into it; the source then builds one frame.
func (c *Conn) Pull() {
	c.mu.Lock()
	if c.closed || c.final != nil || c.source == nil {
		c.mu.Unlock()
		return
	}
	c.pull = true
	start := !c.writing
	c.writing = true
	c.mu.Unlock()
	if start {
		go c.flush()
	}
}

// SendJSON marshals v and queues it.
func (c *Conn) SendJSON(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		c.s.log.Error("websocket: marshal", "err", err)
		return false
	}
	return c.Send(b)
}

// Deliver makes a Conn a hub subscriber: each message's payload is sent as
// is. Resync notices are ignored; modules that mirror state wrap the Conn.
func (c *Conn) Deliver(m hub.Message) {
	if !m.Resync {
		c.Send(m.Payload)
	}
}

// SetReadLimit replaces realtime.max_message_bytes for this connection, for
// protocols whose requests are legitimately larger (a subscription list).
func (c *Conn) SetReadLimit(n int64) { c.ws.SetReadLimit(n) }

// QueueLen is the number of messages waiting to be written.
func (c *Conn) QueueLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Done is closed when the connection is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Context ends when the connection closes (the request's context says
// nothing once the connection is hijacked).
func (c *Conn) Context() context.Context { return c.ctx }

func (c *Conn) flush() {
	for {
		c.mu.Lock()
		pull := c.pull && c.final == nil
		if c.closed || (len(c.queue) == 0 && !pull) {
			c.s.queued.Sub(float64(len(c.queue)))
			c.queue = nil
			c.writing = false
			c.pull = false
			final := c.final
			if c.closed {
				final = nil
			}
			c.mu.Unlock()
			if final != nil {
				c.Close(final.code, final.reason)
			}
			return
		}
		if len(c.queue) == 0 {
			// Queued frames first: they were decided before this one.
			c.pull = false
			src, release := c.source, c.release
			c.mu.Unlock()
			if msg := src(); msg != nil {
				ok := c.write(msg)
				if release != nil {
					release(msg)
				}
				if !ok {
					return
				}
			}
			continue
		}
		batch := c.queue
		c.queue = nil
		c.mu.Unlock()
		c.s.queued.Sub(float64(len(batch)))
		for _, msg := range batch {
			if !c.write(msg) {
				return
			}
		}
	}
}

// write writes one message from the writer; on failure it closes the
// connection, ends the writer and reports false.
func (c *Conn) write(msg []byte) bool {
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	if err := c.ws.WriteMessage(websocket.TextMessage, msg); err != nil {
		c.s.drops.WithLabelValues("write_failed").Inc()
		c.closeNow(websocket.CloseAbnormalClosure, "")
		c.mu.Lock()
		c.writing = false
		c.mu.Unlock()
		return false
	}
	return true
}

func (c *Conn) sendPing() {
	err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.s.cfg.WriteTimeout))
	if err != nil {
		c.closeNow(websocket.CloseAbnormalClosure, "")
		return
	}
	c.mu.Lock()
	if !c.closed {
		c.ping.Reset(c.s.cfg.PingInterval)
	}
	c.mu.Unlock()
}

// Close sends a close frame with code and reason, then closes the
// connection after a short grace for the peer's reply. Safe to call twice.
func (c *Conn) Close(code int, reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.stop()
	if code != websocket.CloseAbnormalClosure {
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	}
	// Unblock the reader soon; it sees the peer's close reply or a timeout.
	_ = c.ws.SetReadDeadline(time.Now().Add(time.Second))
	time.AfterFunc(time.Second, func() { _ = c.ws.Close() })
}

// closeNow closes without waiting for the peer.
func (c *Conn) closeNow(code int, reason string) {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	if already {
		return
	}
	c.stop()
	if code != websocket.CloseAbnormalClosure {
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	}
	_ = c.ws.Close()
}

func (c *Conn) stop() {
	c.mu.Lock()
	if c.ping != nil {
		c.ping.Stop()
	}
	c.mu.Unlock()
	c.cancel()
	close(c.done)
	c.s.untrack(c)
	c.s.open.WithLabelValues(c.kind).Dec()
}

func (c *Conn) drain(reconnect time.Duration) {
	c.Close(CloseServiceRestart, reconnectJSON(reconnect))
}

func (s *Sockets) track(d drainer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.live[d] = struct{}{}
	return true
}

func (s *Sockets) untrack(d drainer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, d)
	if s.closing && len(s.live) == 0 {
		select {
		case <-s.allDone:
		default:
			close(s.allDone)
		}
	}
}

// Live is the number of open connections.
func (s *Sockets) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// CloseAll refuses new connections and tells every live one to reconnect
// after its own random delay within [reconnect_min_wait, reconnect_max_wait],
// so a restart does not become a reconnect storm. It returns when all are
// closed or ctx ends.
func (s *Sockets) CloseAll(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	live := make([]drainer, 0, len(s.live))
	for d := range s.live {
		live = append(live, d)
	}
	if len(s.live) == 0 {
		select {
		case <-s.allDone:
		default:
			close(s.allDone)
		}
	}
	s.mu.Unlock()
	for _, d := range live {
		d.drain(reconnectDelay(s.cfg))
	}
	select {
	case <-s.allDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close realtime connections: %d still open: %w", s.Live(), ctx.Err())
	}
}

func reconnectDelay(cfg config.Realtime) time.Duration {
	lo, hi := cfg.ReconnectMinWait, cfg.ReconnectMaxWait
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rand.Int64N(int64(hi-lo)))
}

func reconnectReason(cfg config.Realtime) string {
	return reconnectJSON(reconnectDelay(cfg))
}

// reconnectJSON is the close reason of a restart: {"reconnectMs":N}.
func reconnectJSON(d time.Duration) string {
	return fmt.Sprintf(`{"reconnectMs":%d}`, d.Milliseconds())
}
