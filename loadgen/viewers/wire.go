package viewers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// wire sends heartbeats over plain HTTP/1.1 keep-alive connections, one per
// worker, writing each request from a reused buffer and reading only the
// status, cookies and framing of the answer. net/http's client costs about as much CPU per
// request as the server does (a Request to build, three goroutines per
// connection handing it along, a timer per call): on a two-core box the
// generator ran out of its core before the server ran out of its own, and
// an unsaturated server is charged for its idle wake-ups. The server reads
// the same request line and headers net/http's client sends.
type wire struct {
	addr string // host:port to dial
	host string // the Host header
	// prefix is the target's own path ("/presenced" behind a proxy that
	// routes by path), put before every request's path.
	prefix string
	conns  []wireConn
}

// wireConn is one worker's connection; only that worker touches it.
type wireConn struct {
	c   net.Conn
	br  *bufio.Reader
	buf []byte
}

// newWire returns a wire client for target with one connection slot per
// worker, or nil when target is not plain http (TLS goes through net/http).
func newWire(target string, workers int) *wire {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &wire{addr: addr, host: u.Host, prefix: strings.TrimRight(u.EscapedPath(), "/"), conns: make([]wireConn, workers)}
}

// post sends one heartbeat on worker w's connection, the cookie and the
// X-Forwarded-For address when not empty, and returns the status and the
// Set-Cookie values. Any failure closes the connection; the next call dials
// a new one.
func (wi *wire) post(ctx context.Context, w int, path, cookie, forwarded string) (int, []string, error) {
	wc := &wi.conns[w]
	reused := wc.c != nil
	status, cookies, err := wi.try(ctx, wc, path, cookie, forwarded)
	if reused && staleConn(err) && ctx.Err() == nil {
		// The server closed a kept-alive connection (idle timeout, a
		// restart): send again on a new one, as net/http's transport
		// does. Should the first have been counted after all, a second
		// heartbeat of the same session counts nothing more.
		status, cookies, err = wi.try(ctx, wc, path, cookie, forwarded)
	}
	return status, cookies, err
}

func staleConn(err error) bool {
	// A connection closed before the status line reads as io.EOF, or
	// io.ErrUnexpectedEOF part way.
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (wi *wire) try(ctx context.Context, wc *wireConn, path, cookie, forwarded string) (int, []string, error) {
	if wc.c == nil {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", wi.addr)
		if err != nil {
			return 0, nil, err
		}
		wc.c = c
		wc.br = bufio.NewReaderSize(c, 4096)
	}
	// The operation's deadline (its timeout, or the end of the load
	// window) cuts the call short. A read that times out at the deadline
	// waits for the context to say it is over, so the runner sees the
	// end of the window, not a failed heartbeat.
	dl, hasDeadline := ctx.Deadline()
	if hasDeadline {
		_ = wc.c.SetDeadline(dl)
	}
	status, cookies, err := wc.roundTrip(wi.host, wi.prefix, path, cookie, forwarded)
	if err != nil {
		// Its stream is out of step: the connection is spent.
		wc.close()
		if hasDeadline && !time.Now().Before(dl) {
			<-ctx.Done()
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
	}
	return status, cookies, err
}

func (wc *wireConn) roundTrip(host, prefix, path, cookie, forwarded string) (int, []string, error) {
	// The headers net/http's client sends for a POST without a body, in
	// its order.
	b := append(wc.buf[:0], "POST "...)
	b = append(b, prefix...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 0\r\n"...)
	if cookie != "" {
		b = append(b, "Cookie: "...)
		b = append(b, cookie...)
		b = append(b, "\r\n"...)
	}
	if forwarded != "" {
		b = append(b, "X-Forwarded-For: "...)
		b = append(b, forwarded...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Accept-Encoding: gzip\r\n\r\n"...)
	wc.buf = b
	if _, err := wc.c.Write(b); err != nil {
		return 0, nil, err
	}
	status, cookies, keep, err := readResponse(wc.br)
	if err != nil {
		return 0, nil, err
	}
	if !keep {
		wc.close()
	}
	return status, cookies, nil
}

// readResponse reads one response to a POST: its status, its Set-Cookie
// values, and whether the connection stays open. It reads the framing
// HTTP/1.1 allows (Content-Length, chunked, or to the close) and keeps
// nothing else: http.ReadResponse builds a Response, a header map and a
// string per header for every heartbeat, a tenth of the generator's CPU.
func readResponse(br *bufio.Reader) (int, []string, bool, error) {
	line, err := readLine(br)
	if err != nil {
		return 0, nil, false, err
	}
	proto, rest, _ := bytes.Cut(line, []byte(" "))
	if !bytes.HasPrefix(proto, []byte("HTTP/1.")) || len(rest) < 3 || (len(rest) > 3 && rest[3] != ' ') {
		return 0, nil, false, fmt.Errorf("malformed status line %q", line)
	}
	status := 0
	for _, d := range rest[:3] {
		if d < '0' || d > '9' {
			return 0, nil, false, fmt.Errorf("malformed status line %q", line)
		}
		status = status*10 + int(d-'0')
	}
	keep := string(proto) == "HTTP/1.1"
	length, chunked := int64(-1), false
	var cookies []string
	for {
		line, err = readLine(br)
		if err != nil {
			return 0, nil, false, err
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, false, fmt.Errorf("malformed header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return 0, nil, false, fmt.Errorf("malformed Content-Length %q", value)
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(value, []byte("chunked")) {
				return 0, nil, false, fmt.Errorf("unsupported Transfer-Encoding %q", value)
			}
			chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.Contains(bytes.ToLower(value), []byte("close")) {
				keep = false
			}
		case bytes.EqualFold(name, []byte("Set-Cookie")):
			cookies = append(cookies, string(value))
		}
	}
	switch {
	case status < 200:
		return 0, nil, false, fmt.Errorf("unexpected interim response %d", status)
	case status == http.StatusNoContent || status == http.StatusNotModified:
	case chunked:
		if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(br)); err != nil {
			return 0, nil, false, err
		}
		for { // trailers, to the blank line
			line, err := readLine(br)
			if err != nil {
				return 0, nil, false, err
			}
			if len(line) == 0 {
				break
			}
		}
	case length >= 0:
		if _, err := br.Discard(int(length)); err != nil {
			return 0, nil, false, err
		}
	default: // the body runs to the close
		if _, err := io.Copy(io.Discard, br); err != nil {
			return 0, nil, false, err
		}
		keep = false
	}
	return status, cookies, keep, nil
}

// readLine reads one CRLF- (or LF-) terminated line, without its end.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errors.New("response line too long")
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func (wc *wireConn) close() {
	if wc.c != nil {
		_ = wc.c.Close()
		wc.c, wc.br = nil, nil
	}
}

// closeAll closes every worker's connection, once the workers are done.
func (wi *wire) closeAll() {
	for i := range wi.conns {
		wi.conns[i].close()
	}
}
