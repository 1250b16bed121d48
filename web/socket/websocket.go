package socket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/web/wire"
)

// RealtimeKey marks (in the echo context) a request that became a
// long-lived stream, whose duration says nothing about request latency.
const RealtimeKey = "presenced.realtime"

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
	opened  atomic.Int64  // connections tracked since the start

	open   *prometheus.GaugeVec
	queued prometheus.Gauge
	drops  *prometheus.CounterVec

	// poller parks idle readers (nil: a goroutine reads each connection).
	poller    *poller
	sweepOnce sync.Once
}

// drainer is a live connection that can be told to go away.
type drainer interface {
	drain(reconnect time.Duration)
}

// NewSockets prepares the upgrader with the origin check, and the shared
// epoll set idle readers park in (realtime.park_idle_readers, Linux).
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
	// Only the handshake is gorilla's: the buffers it allocates for its
	// Conn are dropped with it, so the smallest do.
	s.upgrader = websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   64,
		WriteBufferPool:  &sync.Pool{},
		CheckOrigin:      originChecker(cfg.AllowedOrigins),
		Error:            handshakeError,
	}
	if cfg.ParkIdleReaders {
		p, err := sharedPoller()
		if err != nil {
			log.Warn("websocket: idle readers cannot park; one goroutine reads each connection", "err", err)
		}
		s.poller = p
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
	_ = json.NewEncoder(w).Encode(e.Body())
}

// handshakeRefusal names a refused handshake for the client and the log.
func handshakeRefusal(r *http.Request, status int, reason error) *wire.Error {
	switch {
	case status == http.StatusForbidden:
		return wire.Errorf(status, "forbidden", "origin %q may not open WebSockets here (realtime.allowed_origins)", r.Header.Get("Origin"))
	case !websocket.IsWebSocketUpgrade(r):
		return wire.Errorf(http.StatusBadRequest, "bad_request", "this endpoint is a WebSocket: send an upgrade request (Connection: Upgrade, Upgrade: websocket)")
	}
	code := wire.CodeForStatus(status)
	if code == "" {
		code = "bad_request"
	}
	return wire.Errorf(status, code, "WebSocket handshake refused: %s", strings.TrimPrefix(reason.Error(), "websocket: "))
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

// Conn is one WebSocket connection. Nothing runs for it while it is idle:
// Serve parks its reading in a shared epoll set (Read keeps a goroutine
// blocked in it instead), Send queues a message and starts a writer only
// when one is not already running, and one sweep per process pings it and
// drops it when it falls silent.
//
// The handshake is gorilla's (origin check, refusals in the JSON error
// shape). Frames are read by gorilla's frame code forked into this package
// (wsconn_gorilla.go) and written here, on the socket itself: gorilla's
// Conn keeps its own read buffer, which may hold part of the next frame,
// so it cannot be set aside while the connection is idle.
type Conn struct {
	nc   net.Conn
	raw  syscall.RawConn // nil: the socket cannot be parked (TLS, parking off)
	s    *Sockets
	kind string

	limit    atomic.Int64
	lastRead atomic.Int64 // unix ns of the last whole frame from the peer
	nextPing atomic.Int64 // unix ns when the sweep pings next
	wmu      sync.Mutex   // one writer of frames at a time (lockWrite)
	// answer is the handshake's answer of UpgradeHeld, written before the
	// first frame and in the same write (guarded by wmu).
	answer []byte

	mu      sync.Mutex
	queue   [][]byte
	writing bool
	closed  bool
	shut    bool // the socket is closed
	// pull asks the writer to call source once the queue is empty.
	pull    bool
	source  func() []byte
	release func([]byte)
	// ctx is made on the first Context or Done: most connections never
	// ask, and an idle one keeps it for life.
	ctx    context.Context
	cancel context.CancelFunc

	// final, once set, closes the connection after the queue is written.
	final *closeFrame

	// Reading: only the one reader at a time touches r.
	r           frameReader
	onMessage   func([]byte)
	onEnd       func()
	pollSeq     uint32 // tells this registration's epoll events from a reused fd's
	readerState uint8
}

// Declare makes the connection gauge of kind exist at zero before the
// first connection, so dashboards and alerts see the endpoint from the
// start. Parts that serve sockets or streams declare their kind.
func (s *Sockets) Declare(kind string) { s.open.WithLabelValues(kind) }

// Upgrade turns the request into a WebSocket of the given kind (a label for
// metrics: "presence", "viewers", ...). During shutdown it refuses with 503.
//
// Callers read the connection with Serve (or from a goroutine of their own
// with Read) and return from the handler: while the handler runs, net/http
// keeps about 9 KiB of buffers per connection that the WebSocket never
// uses.
func (s *Sockets) Upgrade(c echo.Context, kind string) (*Conn, error) {
	return s.upgrade(c, kind, false)
}

// UpgradeHeld is Upgrade for an endpoint that sends a frame (or closes)
// right after the upgrade, whatever happens: the handshake's answer waits
// and goes out in the same write as that first frame or close frame. A
// connection closed without a frame (closeNow with closeAbnormal) never
// answers the handshake; its client sees the connection drop.
func (s *Sockets) UpgradeHeld(c echo.Context, kind string) (*Conn, error) {
	return s.upgrade(c, kind, true)
}

func (s *Sockets) upgrade(c echo.Context, kind string, hold bool) (*Conn, error) {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return nil, wire.Unavailable(s.cfg.ReconnectMaxWait, "server is restarting")
	}
	var w http.ResponseWriter = c.Response()
	if hold {
		w = holdingWriter{w}
	}
	ws, err := s.upgrader.Upgrade(w, c.Request(), nil)
	if err != nil {
		// handshakeError has answered the client; the error carries the
		// status for the access log and metrics.
		if c.Response().Committed {
			return nil, &wire.Error{Status: c.Response().Status, Code: "handshake", Message: err.Error()}
		}
		return nil, fmt.Errorf("websocket upgrade: %w", err)
	}
	c.Set(RealtimeKey, true)
	// The upgrader wrote 101 on the hijacked connection, past echo.
	c.Response().Status = http.StatusSwitchingProtocols
	// gorilla's Conn has read nothing (it refuses a client that sent data
	// before the handshake's answer), so the socket is all there is. The
	// HTTP server's deadlines stay on a hijacked socket: clear them.
	nc := ws.NetConn()
	var answer []byte
	if h, ok := nc.(*heldConn); ok {
		nc, answer = h.Conn, h.held
	}
	_ = nc.SetDeadline(time.Time{})
	now := time.Now().UnixNano()
	conn := &Conn{nc: nc, s: s, kind: kind, answer: answer}
	conn.limit.Store(s.cfg.MaxMessageBytes)
	conn.lastRead.Store(now)
	conn.nextPing.Store(now + int64(firstPing(s.cfg.PingInterval)))
	if sc, ok := nc.(syscall.Conn); ok && s.poller != nil {
		if raw, err := sc.SyscallConn(); err == nil {
			conn.raw = raw
		}
	}
	if !s.track(conn) {
		conn.closeNow(CloseServiceRestart, reconnectReason(s.cfg))
		return nil, ErrClosed
	}
	s.open.WithLabelValues(kind).Inc()
	s.sweepOnce.Do(func() { go s.sweep() })
	return conn, nil
}

type closeFrame struct {
	code   int
	reason string
	// now: close the socket once the close frame is written (it answers
	// the peer's), rather than after a grace for the peer's answer.
	now bool
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
func (c *Conn) SetReadLimit(n int64) { c.limit.Store(n) }

// QueueLen is the number of messages waiting to be written.
func (c *Conn) QueueLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Done is closed when the connection is closed.
func (c *Conn) Done() <-chan struct{} { return c.Context().Done() }

// Context ends when the connection closes (the request's context says
// nothing once the connection is hijacked).
func (c *Conn) Context() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithCancel(context.Background())
		if c.closed {
			c.cancel()
		}
	}
	return c.ctx
}

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
			switch {
			case final == nil:
			case final.now:
				c.closeNow(final.code, final.reason)
			default:
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
	if err := c.writeFrame(opText, msg, time.Now().Add(c.s.cfg.WriteTimeout)); err != nil {
		reason := "write_failed"
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, errWriteBusy) {
			// The peer left its socket full for write_timeout: a slow
			// consumer. No close frame can reach it behind the bytes it has
			// not read (and a frame cut short leaves none to send), so the
			// connection just ends.
			reason = "slow_consumer"
		}
		c.s.drops.WithLabelValues(reason).Inc()
		c.closeNow(closeAbnormal, "")
		c.mu.Lock()
		c.writing = false
		c.mu.Unlock()
		return false
	}
	return true
}

// errWriteBusy: another write held the socket past the deadline.
var errWriteBusy = errors.New("websocket: write timed out behind another write")

// writeFrame writes one frame, header and payload in one system call. A
// write in progress (the writer's message, a pong, a ping) is waited for
// until deadline.
//
// The socket almost always has room for a frame, so the write is first
// tried without waiting, and without a deadline: setting one is a timer
// change per frame, about a tenth of the cost of a delivery. Only a frame
// the socket cannot take at once waits, bounded by deadline.
func (c *Conn) writeFrame(op byte, p []byte, deadline time.Time) error {
	if !c.lockWrite(deadline) {
		return errWriteBusy
	}
	defer c.wmu.Unlock()
	b := appendFrame(append(getBuf(), c.answer...), op, p)
	c.answer = nil
	defer putBuf(b)
	rest := b
	if c.raw != nil {
		n, err := c.writeNonBlocking(b)
		if err != nil {
			return err
		}
		if rest = b[n:]; len(rest) == 0 {
			return nil
		}
	}
	_ = c.nc.SetWriteDeadline(deadline)
	_, err := c.nc.Write(rest)
	if c.raw != nil {
		// A deadline left behind would fail the next non-blocking write
		// once it passes.
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	return err
}

// writeNonBlocking writes what the socket takes of b at once and reports
// how much that was (0 when its buffer is full).
func (c *Conn) writeNonBlocking(b []byte) (int, error) {
	var n int
	var werr error
	err := c.raw.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), b)
			if werr != syscall.EINTR {
				return true
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case werr == syscall.EAGAIN:
		return 0, nil
	case werr != nil:
		return 0, werr
	}
	return max(n, 0), nil
}

// lockWrite takes the write lock, waiting for it until deadline. Writes
// rarely overlap (a pong or ping beside the writer's message), so a wait
// polls: a channel, the usual lock with a deadline, would cost every idle
// connection 96 bytes for the rare wait.
func (c *Conn) lockWrite(deadline time.Time) bool {
	for wait := 20 * time.Microsecond; !c.wmu.TryLock(); wait = min(2*wait, 5*time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
	return true
}

func (c *Conn) sendPing() {
	if err := c.writeFrame(opPing, nil, time.Now().Add(c.s.cfg.WriteTimeout)); err != nil {
		c.closeNow(closeAbnormal, "")
	}
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
	if code != closeAbnormal {
		_ = c.writeFrame(opClose, closePayload(code, reason), time.Now().Add(time.Second))
	}
	// The peer's close reply, read by the reader, closes it sooner.
	time.AfterFunc(time.Second, c.shutdown)
}

// closeAfterQueue closes the connection with code once the writer has
// written what is queued, so the replies to messages read before a
// failure, or before the peer's close, are not cut off by the close
// frame. now: close the socket at once after the close frame.
func (c *Conn) closeAfterQueue(code int, reason string, now bool) {
	c.mu.Lock()
	if !c.closed && c.writing {
		if c.final == nil {
			c.final = &closeFrame{code: code, reason: reason}
		}
		c.final.now = c.final.now || now
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if now {
		c.closeNow(code, reason)
	} else {
		c.Close(code, reason)
	}
}

// closeNow closes the socket without waiting for the peer, after a close
// frame with code unless the connection was closing already.
func (c *Conn) closeNow(code int, reason string) {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	if !already {
		c.stop()
		if code != closeAbnormal {
			_ = c.writeFrame(opClose, closePayload(code, reason), time.Now().Add(time.Second))
		}
	}
	c.shutdown()
}

// shutdown closes the socket, taking it out of the epoll set first (the
// number of a closed descriptor is reused at once), and ends a parked
// reader.
func (c *Conn) shutdown() {
	c.mu.Lock()
	if c.shut {
		c.mu.Unlock()
		return
	}
	c.shut = true
	parked := c.readerState == readerParked
	if parked {
		c.readerState = readerRunning
	}
	c.mu.Unlock()
	if c.raw != nil {
		c.s.poller.remove(c)
	}
	_ = c.nc.Close()
	if parked {
		go c.endServe(ErrClosed)
	}
}

func (c *Conn) stop() {
	c.mu.Lock()
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
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
	s.opened.Add(1)
	return true
}

// Opened is the number of connections opened since the process started,
// of every kind: the garbage collector's tuner reads connect bursts from it.
func (s *Sockets) Opened() int64 { return s.opened.Load() }

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
