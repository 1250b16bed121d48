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

	"github.com/labstack/echo/v4"
	"golang.org/x/net/http/httpguts"
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
// started while the handler runs and aborted by the hijack. That was about
// a tenth of the server's work per connect.
//
// An upgrade's request has no connection context: a client that leaves
// during its handshake is seen when the first frame is written, not by the
// handler's context.
type upgrades struct {
	echo        *echo.Echo
	sockets     *Sockets
	headTimeout time.Duration // http.read_header_timeout (0: none)
	log         *slog.Logger

	mu      sync.Mutex
	closed  bool
	reading map[net.Conn]struct{} // heads being read; closed by close
	serving sync.WaitGroup        // handshakes in their handler
}

func newUpgrades(e *echo.Echo, sockets *Sockets, headTimeout time.Duration, log *slog.Logger) *upgrades {
	return &upgrades{echo: e, sockets: sockets, headTimeout: headTimeout, log: log, reading: map[net.Conn]struct{}{}}
}

// endpoint tells whether req is routed to a WebSocket endpoint.
func (u *upgrades) endpoint(req *http.Request) bool {
	c := u.echo.AcquireContext()
	c.Reset(req, nil)
	u.echo.Router().Find(http.MethodGet, echo.GetPath(req), c)
	ok := u.sockets.endpoint(c.Path())
	c.Reset(nil, nil)
	u.echo.ReleaseContext(c)
	return ok
}

// headBufSize bounds the head read here; a longer one (big cookies) goes
// to net/http, whose http.max_header_bytes limit applies.
const headBufSize = 4 << 10

// headReader is the pooled memory a head is read into and parsed from.
type headReader struct {
	buf [headBufSize]byte
	src bytes.Reader
	br  *bufio.Reader
}

var headReaders = sync.Pool{New: func() any {
	h := &headReader{}
	h.br = bufio.NewReaderSize(&h.src, headBufSize)
	return h
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

// wait returns when every handshake in its handler has returned, or ctx ends.
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
	h := headReaders.Get().(*headReader)
	n, end, err := readHead(c, h.buf[:], l.u.headTimeout)
	if err != nil && end < 0 {
		// Nothing complete came before the deadline or the peer's close;
		// net/http closes such a connection without an answer too.
		headReaders.Put(h)
		l.u.untrack(c, false)
		_ = c.Close()
		return
	}
	var req *http.Request
	if end == n && looksLikeUpgrade(h.buf[:end]) {
		h.src.Reset(h.buf[:end])
		h.br.Reset(&h.src)
		req = upgradeRequest(h.br)
		if req != nil && !l.u.endpoint(req) {
			req = nil
		}
	}
	if req == nil {
		if !l.u.untrack(c, false) {
			headReaders.Put(h)
			_ = c.Close()
			return
		}
		l.hand(&replayConn{Conn: c, head: h, rest: h.buf[:n]})
		return
	}
	headReaders.Put(h)
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
// offset after its blank line; -1: not yet), buf is full, or reading fails.
func readHead(c net.Conn, buf []byte, timeout time.Duration) (n, end int, err error) {
	if timeout > 0 {
		_ = c.SetReadDeadline(time.Now().Add(timeout))
	}
	end = -1
	for n < len(buf) {
		var m int
		m, err = c.Read(buf[n:])
		from := max(n-3, 0)
		n += m
		if i := headEnd(buf[from:n]); i >= 0 {
			return n, from + i, nil
		}
		if err != nil {
			return n, -1, err
		}
	}
	return n, -1, nil
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

// looksLikeUpgrade is a cheap look at a head before parsing it: a GET with
// an Upgrade header naming websocket. Ordinary requests are never parsed
// twice.
func looksLikeUpgrade(head []byte) bool {
	if !bytes.HasPrefix(head, []byte("GET ")) {
		return false
	}
	for line := range bytes.Lines(head) {
		if len(line) > 8 && asciiLowerHasPrefix(line, "upgrade:") {
			return containsFold(line[8:], "websocket")
		}
	}
	return false
}

func asciiLowerHasPrefix(b []byte, prefix string) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if b[i]|0x20 != prefix[i] && b[i] != prefix[i] {
			return false
		}
	}
	return true
}

func containsFold(b []byte, word string) bool {
	for i := 0; i+len(word) <= len(b); i++ {
		if asciiLowerHasPrefix(b[i:], word) {
			return true
		}
	}
	return false
}

// upgradeRequest parses a head, or returns nil when net/http should answer
// it: a parse error, a body, an absolute-form target, or what net/http's
// server refuses beyond http.ReadRequest (Host and header field checks).
func upgradeRequest(br *bufio.Reader) *http.Request {
	req, err := http.ReadRequest(br)
	if err != nil || req.ProtoMajor != 1 || req.ProtoMinor < 1 ||
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
	if w.status == 0 && status >= 200 {
		w.status = status
	}
}

func (w *upgradeResponse) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
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
	h.Set("Content-Length", fmt.Sprint(len(w.body)))
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
	head *headReader // returned to the pool once replayed
	rest []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.head == nil {
		return c.Conn.Read(p)
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	if len(c.rest) == 0 {
		headReaders.Put(c.head)
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
