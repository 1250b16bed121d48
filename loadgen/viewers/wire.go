package viewers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"
)

// wire sends heartbeats over plain HTTP/1.1 keep-alive connections, one per
// worker, writing each request from a reused buffer and reading the answer
// with http.ReadResponse. net/http's client costs about as much CPU per
// request as the server does (a Request to build, three goroutines per
// connection handing it along, a timer per call): on a two-core box the
// generator ran out of its core before the server ran out of its own, and
// an unsaturated server is charged for its idle wake-ups. The server reads
// the same request line and headers net/http's client sends.
type wire struct {
	addr  string // host:port to dial
	host  string // the Host header
	conns []wireConn
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
	return &wire{addr: addr, host: u.Host, conns: make([]wireConn, workers)}
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
	// http.ReadResponse reports a connection closed before the status
	// line as io.ErrUnexpectedEOF.
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
	// The context's end (the operation's timeout, the end of the run)
	// cuts the call short through the connection's deadline. Not the
	// deadline itself: a read timing out a moment before the context
	// says it is done would count as a failed heartbeat.
	conn := wc.c
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	status, cookies, err := wc.roundTrip(wi.host, path, cookie, forwarded)
	if !stop() || err != nil {
		// Its deadline may be in the past now, or its stream out of
		// step: the connection is spent.
		wc.close()
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return status, cookies, err
}

func (wc *wireConn) roundTrip(host, path, cookie, forwarded string) (int, []string, error) {
	// The headers net/http's client sends for a POST without a body, in
	// its order.
	b := append(wc.buf[:0], "POST "...)
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
	resp, err := http.ReadResponse(wc.br, nil)
	if err != nil {
		return 0, nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, nil, err
	}
	if resp.Close {
		wc.close()
	}
	return resp.StatusCode, resp.Header["Set-Cookie"], nil
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
