package web

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"golang.org/x/net/http/httpguts"

	"github.com/presenced/presenced/web/socket"
)

// upgrades serves WebSocket handshakes itself, ahead of net/http. Every new
// connection's first request head is read here: an upgrade to a WebSocket
// endpoint (Sockets.Endpoint) goes through the same echo handler (routes,
// middleware, access log), on a response writer that hands over the socket
// (upgradeResponse); any other connection goes to net/http with the bytes
// read so far put back in front of its reads. So does anything unusual in
// an upgrade's head (a body, bytes after the head, a head over
// headBufSize, a malformed line): net/http's checks and answers still
// decide those.
//
// A connect burst skips what net/http does per connection and a hijacked
// connection never uses: two 4 KiB buffers it never gets back, the
// connection's context, its state tracking, and the read in the background
// started while the handler runs and aborted by the hijack: about a tenth
// of the server's samples in a profile of a connect burst, and 10 KB of
// the 50 KB it allocated per connect.
//
// An upgrade's request has no connection context: a client that leaves
// during its handshake is seen when the first frame is written, not by the
// handler's context.
type upgrades struct {
	echo        *echo.Echo
	sockets     *socket.Sockets
	headTimeout time.Duration // http.read_header_timeout (0: none)
	log         *slog.Logger

	mu      sync.Mutex
	closed  bool
	reading map[net.Conn]struct{} // heads being read; closed by close
	serving sync.WaitGroup        // handshakes in their handler
}

func newUpgrades(e *echo.Echo, sockets *socket.Sockets, headTimeout time.Duration, log *slog.Logger) *upgrades {
	return &upgrades{echo: e, sockets: sockets, headTimeout: headTimeout, log: log, reading: map[net.Conn]struct{}{}}
}

// endpoint tells whether req is routed to a WebSocket endpoint.
func (u *upgrades) endpoint(req *http.Request) bool {
	c := u.echo.AcquireContext()
	c.Reset(req, nil)
	u.echo.Router().Find(http.MethodGet, echo.GetPath(req), c)
	ok := u.sockets.IsEndpoint(c.Path())
	c.Reset(nil, nil)
	u.echo.ReleaseContext(c)
	return ok
}

// headBufSize bounds the head read here; a longer one (big cookies) goes
// to net/http, whose http.max_header_bytes limit applies.
const headBufSize = 4 << 10

// headBuf is the pooled memory a head is read into.
type headBuf [headBufSize]byte

var headBufs = sync.Pool{New: func() any { return new(headBuf) }}

// headParser parses a head read into a headBuf; held only while parsing.
type headParser struct {
	src bytes.Reader
	br  *bufio.Reader
}

var headParsers = sync.Pool{New: func() any {
	p := &headParser{}
	p.br = bufio.NewReaderSize(&p.src, headBufSize)
	return p
}}

// listen wraps ln: net/http accepts from the result, and gets every
// connection that is not served here.
func (u *upgrades) listen(ln net.Listener) net.Listener {
	l := &handoffListener{Listener: ln, u: u, conns: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

// close closes the connections whose head is still being read, and makes
// those read from now on close at once. Handshakes in their handler go on.
func (u *upgrades) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for c := range u.reading {
		_ = c.Close()
	}
	clear(u.reading)
}

// wait returns when every handshake in its handler has returned, or ctx
// ends; then its waiting goroutine stays until they return (the process is
// on its way out).
func (u *upgrades) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		u.serving.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("websocket handshakes still running: %w", ctx.Err())
	}
}

// track records a connection whose head is about to be read; false once
// closed.
func (u *upgrades) track(c net.Conn) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return false
	}
	u.reading[c] = struct{}{}
	return true
}

// untrack ends the head's read; serve counts the connection as a
// handshake in its handler. False when closed meanwhile.
func (u *upgrades) untrack(c net.Conn, serve bool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return false
	}
	delete(u.reading, c)
	if serve {
		u.serving.Add(1)
	}
	return true
}

// handoffListener is what net/http serves: the connections the upgrades
// did not take.
type handoffListener struct {
	net.Listener
	u     *upgrades
	conns chan net.Conn

	closeOnce sync.Once
	done      chan struct{} // closed by Close or when accepting fails
	err       error         // why accepting failed, set before done closes
	errOnce   sync.Once
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		err = l.Listener.Close()
		l.fail(nil)
		l.u.close()
	})
	return err
}

func (l *handoffListener) fail(err error) {
	l.errOnce.Do(func() {
		l.err = err
		close(l.done)
	})
}

// temporary is what a transient accept failure (out of file descriptors)
// reports; the accept loop waits and goes on, as net/http's does.
type temporary interface{ Temporary() bool }

func (l *handoffListener) acceptLoop() {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var te temporary
			if errors.As(err, &te) && te.Temporary() && !errors.Is(err, net.ErrClosed) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				l.u.log.Error("http: accept failed; retrying", "err", err, "in", delay)
				select {
				case <-time.After(delay):
					continue
				case <-l.done:
					return
				}
			}
			l.fail(err)
			return
		}
		delay = 0
		if !l.u.track(c) {
			_ = c.Close()
			continue
		}
		go l.first(c)
	}
}

// first reads the connection's first head and either serves it as an
// upgrade or hands the connection to net/http.
func (l *handoffListener) first(c net.Conn) {
	buf := headBufs.Get().(*headBuf)
	var deadline time.Time
	if l.u.headTimeout > 0 {
		deadline = time.Now().Add(l.u.headTimeout)
	}
	n, end, err := readHead(c, buf[:], deadline)
	if err != nil {
		// Nothing complete came before the deadline or the peer's close;
		// net/http closes such a connection without an answer too.
		headBufs.Put(buf)
		l.u.untrack(c, false)
		_ = c.Close()
		return
	}
	var req *http.Request
	if end == n && looksLikeUpgrade(buf[:end]) {
		p := headParsers.Get().(*headParser)
		p.src.Reset(buf[:end])
		p.br.Reset(&p.src)
		req = upgradeRequest(p.br)
		headParsers.Put(p)
		if req != nil && !l.u.endpoint(req) {
			req = nil
		}
	}
	if req == nil {
		if !l.u.untrack(c, false) {
			headBufs.Put(buf)
			_ = c.Close()
			return
		}
		l.hand(&replayConn{Conn: c, head: buf, rest: buf[:n], deadline: deadline, log: l.u.log})
		return
	}
	headBufs.Put(buf)
	if !l.u.untrack(c, true) {
		_ = c.Close()
		return
	}
	defer l.u.serving.Done()
	serveUpgrade(l.u.echo, c, req, l.u.headTimeout, l.u.log)
}

// hand gives a connection to net/http, or closes it when net/http has
// stopped accepting.
func (l *handoffListener) hand(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// readHead reads into buf until a whole request head is there (end is the
// offset after its blank line), until the bytes cannot begin a handshake
// (end -1, at once: net/http answers a bad request line as soon as it
// would have), or until buf is full (end -1). An error means the head did
// not come whole before the deadline or the peer's close.
func readHead(c net.Conn, buf []byte, deadline time.Time) (n, end int, err error) {
	if !deadline.IsZero() {
		_ = c.SetReadDeadline(deadline)
	}
	for n < len(buf) {
		var m int
		m, err = c.Read(buf[n:])
		from := max(n-3, 0)
		n += m
		if !handshakeSoFar(buf[:n]) {
			return n, -1, nil
		}
		if i := headEnd(buf[from:n]); i >= 0 {
			// As net/http does once a head is read: a deadline left on
			// the socket through the handler cost a connect burst about
			// a tenth more server time (timer and scheduler work).
			if !deadline.IsZero() {
				_ = c.SetReadDeadline(time.Time{})
			}
			return n, from + i, nil
		}
		if err != nil {
			return n, -1, err
		}
	}
	return n, -1, nil
}

// handshakeSoFar tells whether b can still begin a handshake: a GET whose
// request line, once complete, is HTTP/1.1.
func handshakeSoFar(b []byte) bool {
	const get = "GET "
	if len(b) < len(get) {
		return bytes.HasPrefix([]byte(get), b)
	}
	if !bytes.HasPrefix(b, []byte(get)) {
		return false
	}
	line, _, complete := bytes.Cut(b, []byte("\n"))
	return !complete || bytes.HasSuffix(bytes.TrimSuffix(line, []byte("\r")), []byte(" HTTP/1.1"))
}

// headEnd finds the blank line that ends a head, with CRLF or bare LF line
// ends as net/http accepts them: the offset after it, or -1.
func headEnd(b []byte) int {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		rest := b[i+1:]
		switch {
		case len(rest) > 0 && rest[0] == '\n':
			return i + 2
		case len(rest) > 1 && rest[0] == '\r' && rest[1] == '\n':
			return i + 3
		}
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			return -1
		}
		i += 1 + j
	}
	return -1
}

// looksLikeUpgrade is a cheap look at a GET's head before parsing it: an
// Upgrade header naming websocket. Ordinary requests are never parsed
// twice.
func looksLikeUpgrade(head []byte) bool {
	const name, token = "upgrade:", "websocket"
	for line := range bytes.Lines(head) {
		if len(line) > len(name) && bytes.EqualFold(line[:len(name)], []byte(name)) {
			v := line[len(name):]
			for i := 0; i+len(token) <= len(v); i++ {
				if bytes.EqualFold(v[i:i+len(token)], []byte(token)) {
					return true
				}
			}
			return false
		}
	}
	return false
}

// upgradeRequest parses a head, or returns nil when net/http should answer
// it: not a WebSocket handshake (the endpoint's handler would not
// upgrade), a parse error, a body, an absolute-form target, or what
// net/http's server refuses beyond http.ReadRequest (Host and header field
// checks).
func upgradeRequest(br *bufio.Reader) *http.Request {
	req, err := http.ReadRequest(br)
	if err != nil || !websocket.IsWebSocketUpgrade(req) || req.ProtoMajor != 1 || req.ProtoMinor < 1 ||
		req.ContentLength != 0 || len(req.TransferEncoding) > 0 {
		return nil
	}
	// http.ReadRequest takes the Host header out (and refuses two): an
	// origin-form target leaves it in req.Host.
	if req.URL.Host != "" || req.Host == "" || !httpguts.ValidHostHeader(req.Host) {
		return nil
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil
			}
		}
	}
	return req
}

// serveUpgrade runs the handler for an upgrade's request. A handler that
// does not take the socket (a refusal) has its answer written with
// Connection: close, and the connection closed.
func serveUpgrade(handler http.Handler, c net.Conn, req *http.Request, writeTimeout time.Duration, log *slog.Logger) {
	req.RemoteAddr = c.RemoteAddr().String()
	w := &upgradeResponse{conn: c}
	defer func() {
		if r := recover(); r != nil {
			if r != http.ErrAbortHandler {
				stack := make([]byte, 4<<10)
				stack = stack[:runtime.Stack(stack, false)]
				log.Error("http: panic serving a websocket handshake", "err", r, "remote", req.RemoteAddr, "stack", string(stack))
			}
			if !w.hijacked {
				_ = c.Close()
			}
		}
	}()
	handler.ServeHTTP(w, req)
	if w.hijacked {
		return
	}
	if writeTimeout <= 0 {
		writeTimeout = 10 * time.Second
	}
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, _ = c.Write(w.answer())
	_ = c.Close()
}

// upgradeResponse is the response writer of a handshake served by
// upgrades: it hands over the socket, or keeps a refusal's answer for
// serveUpgrade to write.
type upgradeResponse struct {
	conn     net.Conn
	header   http.Header
	status   int
	body     []byte
	hijacked bool
}

func (w *upgradeResponse) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

func (w *upgradeResponse) WriteHeader(status int) {
	if status < 100 || status > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", status)) // as net/http
	}
	if w.status == 0 && status >= 200 {
		w.status = status
	}
}

// maxRefusal bounds what a handshake's refusal may hold: an endpoint's
// handler upgrades or refuses, it does not stream.
const maxRefusal = 64 << 10

func (w *upgradeResponse) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	if len(w.body)+len(p) > maxRefusal {
		return 0, errors.New("web: a WebSocket endpoint answered more than a refusal")
	}
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, p...)
	return len(p), nil
}

// Hijack hands over the socket: nothing was read past the head, so the
// buffered reader is empty, and the writer only lends its buffer to the
// upgrader's answer.
func (w *upgradeResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.status != 0 {
		return nil, nil, errors.New("http: hijack after the response was written")
	}
	w.hijacked = true
	return w.conn, bufio.NewReadWriter(bufio.NewReaderSize(w.conn, 16), bufio.NewWriterSize(w.conn, 512)), nil
}

// answer is a refusal as HTTP/1.1 bytes, ending the connection.
func (w *upgradeResponse) answer() []byte {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	h := w.Header()
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if status == http.StatusNoContent || status == http.StatusNotModified {
		w.body = nil // no body, no length (RFC 9110)
	} else {
		h.Set("Content-Length", fmt.Sprint(len(w.body)))
	}
	h.Set("Connection", "close")
	if h.Get("Content-Type") == "" && len(w.body) > 0 {
		h.Set("Content-Type", http.DetectContentType(w.body))
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", status, http.StatusText(status))
	_ = h.Write(&b)
	b.WriteString("\r\n")
	b.Write(w.body)
	return b.Bytes()
}

// replayConn is a connection handed to net/http: its reads return the
// bytes already read here first.
type replayConn struct {
	net.Conn
	head *headBuf // returned to the pool once replayed
	rest []byte
	// deadline is the head's (zero: none). net/http's first read deadline,
	// for the same head, is not let past it: a slow head gets one
	// http.read_header_timeout, not two.
	deadline time.Time
	log      *slog.Logger
}

// Write passes net/http's bytes on, its own refusals in the error shape
// (refusals.go).
func (c *replayConn) Write(p []byte) (int, error) {
	if ans, ok := ownRefusal(p, c.log, c.RemoteAddr().String()); ok {
		if _, err := c.Conn.Write(ans); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *replayConn) SetReadDeadline(t time.Time) error {
	if d := c.deadline; !d.IsZero() {
		c.deadline = time.Time{}
		if t.IsZero() || t.After(d) {
			t = d
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.head == nil {
		return c.Conn.Read(p)
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	if len(c.rest) == 0 {
		headBufs.Put(c.head)
		c.head, c.rest = nil, nil
	}
	return n, nil
}

// SyscallConn reaches the socket, as limitedConn's does.
func (c *replayConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
