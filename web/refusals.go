package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/presenced/presenced/web/wire"
)

// net/http answers some requests itself, before any handler: a head it
// cannot parse or will not serve (control bytes or a bad name in a field,
// a missing or malformed Host, two lengths, an unknown transfer coding,
// an HTTP version other than 1.x, a head over net/http's 1 MiB) and
// an Expect other than 100-continue. It has no hook for those answers and
// writes them on the connection in plain text, without a request id. The
// connections it serves are ours (refusalConn), so their writes are looked
// at: these answers, in the fixed forms net/http writes them, go out in
// the one error shape with an X-Request-Id instead, the status kept.
// TestOwnRefusalsInTheErrorShape pins the forms: a Go release that
// changes them fails it rather than slipping back to plain text.

// plainRefusal is net/http's answer to a request it could not read: one
// write holding the whole answer.
var plainRefusal = regexp.MustCompile(`^HTTP/1\.1 ([45][0-9][0-9]) ([^\r\n]*)\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n`)

// expectationFailed starts net/http's answer to an unknown Expect; the
// handlers never answer 417.
var expectationFailed = []byte("HTTP/1.1 417 Expectation Failed\r\n")

// refusalCodes name net/http's refusals in the error shape.
var refusalCodes = map[int]string{
	http.StatusBadRequest:                  "bad_request",
	http.StatusExpectationFailed:           "expectation_failed",
	http.StatusRequestHeaderFieldsTooLarge: "headers_too_large",
	http.StatusNotImplemented:              "unsupported_transfer_coding",
	http.StatusHTTPVersionNotSupported:     "unsupported_http_version",
}

// ownRefusal returns the answer to write instead of p when p is one of
// net/http's own refusals.
func ownRefusal(p []byte, log *slog.Logger, remote string) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	if len(p) < len(proto)+3 || !bytes.HasPrefix(p, []byte(proto)) || (p[len(proto)] != '4' && p[len(proto)] != '5') {
		return nil, false
	}
	var status int
	var message string
	switch {
	case bytes.HasPrefix(p, expectationFailed):
		if bytes.Contains(p, []byte("\r\nX-Request-Id:")) {
			return nil, false
		}
		status, message = http.StatusExpectationFailed, "only Expect: 100-continue is supported"
	default:
		m := plainRefusal.FindSubmatch(p)
		if m == nil {
			return nil, false
		}
		status, _ = strconv.Atoi(string(m[1]))
		// "400 Bad Request: invalid header name" names the reason.
		message = "the request could not be read"
		if _, why, ok := bytes.Cut(m[2], []byte(": ")); ok {
			message = "the request could not be read: " + string(why)
		}
	}
	code := refusalCodes[status]
	if code == "" {
		code = wire.CodeForStatus(status)
	}
	if code == "" {
		code = "bad_request"
	}
	id := requestID()
	body, _ := json.Marshal((&wire.Error{Code: code, Message: message}).Body())
	body = append(body, '\n')
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	fmt.Fprintf(&b, "Connection: close\r\nContent-Length: %d\r\nContent-Type: application/json\r\n", len(body))
	fmt.Fprintf(&b, "Date: %s\r\nX-Request-Id: %s\r\n\r\n", time.Now().UTC().Format(http.TimeFormat), id)
	b.Write(body)
	log.Debug("http: request refused before routing", "status", status, "code", code, "message", message,
		"request_id", id, "remote", remote)
	return b.Bytes(), true
}

// refusalsInShape serves ln's connections with net/http's own refusals in
// the error shape.
func refusalsInShape(ln net.Listener, log *slog.Logger) net.Listener {
	return &refusalListener{Listener: ln, log: log}
}

type refusalListener struct {
	net.Listener
	log *slog.Logger
}

func (l *refusalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &refusalConn{Conn: c, log: l.log}, nil
}

// refusalConn passes net/http's bytes on, its own refusals in the error
// shape.
type refusalConn struct {
	net.Conn
	log *slog.Logger
}

func (c *refusalConn) Write(p []byte) (int, error) {
	if ans, ok := ownRefusal(p, c.log, c.RemoteAddr().String()); ok {
		if _, err := c.Conn.Write(ans); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// SyscallConn reaches the socket, as limitedConn's does: a WebSocket
// taken over parks its reader on it.
func (c *refusalConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
