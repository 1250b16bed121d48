package socket

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"time"
)

// holdingWriter hands the upgrader a connection that keeps the handshake's
// answer instead of writing it (heldConn): the answer then goes out with
// the connection's first frame, one write and one wake-up of the client
// instead of two, which a connect burst pays for every connection.
type holdingWriter struct {
	http.ResponseWriter
}

func (w holdingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("websocket: response cannot be hijacked")
	}
	nc, brw, err := h.Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &heldConn{Conn: nc}, brw, nil
}

// heldConn keeps what is written to it (the upgrader writes only the
// handshake's answer) and ignores deadlines: nothing waits on it, and the
// connection clears the HTTP server's deadlines itself.
type heldConn struct {
	net.Conn
	held []byte
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.held = append(c.held, p...)
	return len(p), nil
}

func (c *heldConn) SetDeadline(time.Time) error      { return nil }
func (c *heldConn) SetWriteDeadline(time.Time) error { return nil }
func (c *heldConn) SetReadDeadline(time.Time) error  { return nil }
