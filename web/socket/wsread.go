package socket

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"
)

// Reader states of a Conn (under Conn.mu).
const (
	readerNone    = iota // nobody reads yet, or Read is used
	readerParked         // waiting in the shared epoll set, no goroutine
	readerRunning        // a goroutine reads and calls the handler
	readerDone           // the handler's end was called
)

// errWouldBlock: a non-blocking read found no bytes.
var errWouldBlock = errors.New("no bytes ready")

// Read returns the next text or binary message, blocking the caller. It
// fails once the connection is closed, the peer goes silent past
// pong_timeout, or a frame is too large (then the peer gets a 1009 close).
// A connection is read either with Read or with Serve, not both.
func (c *Conn) Read() ([]byte, error) {
	_, msg, err := c.read()
	return msg, err
}

// read is Read with the message's opcode (text or binary).
func (c *Conn) read() (byte, []byte, error) {
	for {
		op, msg, ok, err := c.nextMessage()
		if err == nil && !ok {
			err = c.fillBlocking()
			if err == nil {
				continue
			}
		}
		if err != nil {
			c.readFailed(err)
			return 0, nil, fmt.Errorf("%w: %v", ErrClosed, err)
		}
		return op, msg, nil
	}
}

// Serve reads the connection without a goroutine of its own while it is
// idle: onMessage gets each text or binary message, in order and one at
// a time (a slow one holds up only this connection's reading); onEnd is
// called once, after the last onMessage, when the connection has ended
// for any reason. Serve returns at once.
//
// On Linux with realtime.park_idle_readers, a connection with no bytes to
// read waits in a shared epoll set, and a goroutine is started for it only
// when bytes arrive; elsewhere a goroutine reads it with Read.
func (c *Conn) Serve(onMessage func(msg []byte), onEnd func()) {
	c.onMessage, c.onEnd = onMessage, onEnd
	if c.raw == nil || c.s.poller == nil {
		go c.serveBlocking()
		return
	}
	c.mu.Lock()
	if c.shut {
		c.readerState = readerRunning
		c.mu.Unlock()
		go c.endServe(ErrClosed)
		return
	}
	c.readerState = readerParked
	c.mu.Unlock()
	// Registering arms the connection: bytes already waiting wake it at once.
	if err := c.s.poller.add(c); err != nil {
		c.s.log.Warn("websocket: park reader; reading with a goroutine instead", "err", err)
		c.mu.Lock()
		parked := c.readerState == readerParked
		c.readerState = readerRunning
		c.mu.Unlock()
		if parked {
			go c.serveBlocking()
		}
	}
}

func (c *Conn) serveBlocking() {
	for {
		msg, err := c.Read()
		if err != nil {
			break
		}
		c.onMessage(msg)
	}
	c.finish()
}

// wake starts a reader for a parked connection whose socket has bytes (or
// an error, or the peer's close) to read.
func (c *Conn) wake() {
	c.mu.Lock()
	if c.readerState != readerParked {
		c.mu.Unlock()
		return
	}
	c.readerState = readerRunning
	c.mu.Unlock()
	go c.readReady()
}

// readReady reads and handles every message the socket holds, then parks
// the connection again.
func (c *Conn) readReady() {
	for {
		_, msg, ok, err := c.nextMessage()
		if err == nil && !ok {
			err = c.fillNonBlocking()
			if err == errWouldBlock {
				if c.park() {
					return
				}
				err = ErrClosed
			} else if err == nil {
				continue
			}
		}
		if err != nil {
			c.endServe(err)
			return
		}
		c.onMessage(msg)
	}
}

// park hands the connection back to the epoll set, or reports false when
// the socket was closed meanwhile and the caller must end the reader.
func (c *Conn) park() bool {
	c.r.release()
	c.mu.Lock()
	if c.shut {
		c.mu.Unlock()
		return false
	}
	c.readerState = readerParked
	c.mu.Unlock()
	if err := c.s.poller.arm(c); err != nil {
		// Closed under us (shutdown then found it parked and ends it), or
		// the epoll set refused: end it here.
		c.mu.Lock()
		ours := c.readerState == readerParked
		if ours {
			c.readerState = readerRunning
		}
		c.mu.Unlock()
		if ours {
			c.endServe(err)
		}
	}
	return true
}

// endServe closes the connection as err calls for, then ends the handler.
func (c *Conn) endServe(err error) {
	c.readFailed(err)
	c.finish()
}

func (c *Conn) finish() {
	c.r.release()
	c.mu.Lock()
	c.readerState = readerDone
	c.mu.Unlock()
	if c.onEnd != nil {
		c.onEnd()
	}
}

// readFailed closes the connection after a failed read: with 1009 for an
// oversized message, 1002 for a broken frame, 1007 for a text message or
// close reason that is not UTF-8, 1000 answering the peer's close, or at
// once when the socket failed. What the handler queued for the messages read
// before goes out first (closeAfterQueue).
func (c *Conn) readFailed(err error) {
	if c.r.err == nil {
		c.r.err = err
	}
	var pe protocolError
	var ip invalidPayload
	var pc *peerClosed
	switch {
	case errors.Is(err, errTooLarge):
		c.closeAfterQueue(CloseTooLarge, "message too large", false)
	case errors.As(err, &pe):
		c.closeAfterQueue(closeProtocolError, string(pe), false)
	case errors.As(err, &ip):
		c.closeAfterQueue(closeInvalidPayload, string(ip), false)
	case errors.As(err, &pc):
		// Answer the peer's close with 1000, unless the server started
		// the closing handshake; the socket can go once the answer is
		// written. RFC 6455 lets the answer echo the peer's code, but an
		// echo would show the client any code it sent (or none), not the
		// documented ones.
		c.mu.Lock()
		replied := c.closed
		c.mu.Unlock()
		if replied {
			c.shutdown()
		} else {
			c.closeAfterQueue(closeNormal, "", true)
		}
	default:
		c.closeNow(closeAbnormal, "")
	}
}

// nextMessage returns the next data message among the bytes read so far,
// answering pings and noting pongs on the way; ok=false means more bytes
// are needed.
func (c *Conn) nextMessage() (op byte, msg []byte, ok bool, err error) {
	if c.r.err != nil {
		return 0, nil, false, c.r.err
	}
	for {
		op, p, ok, err := c.r.next(c.limit.Load())
		if err != nil || !ok {
			return 0, nil, false, err
		}
		switch op {
		case opPing:
			_ = c.writeFrame(opPong, p, time.Now().Add(c.s.cfg.WriteTimeout))
		case opPong:
		default:
			return op, p, true, nil
		}
	}
}

// fillBlocking reads more bytes, waiting for them.
func (c *Conn) fillBlocking() error {
	room := c.r.space()
	n, err := c.nc.Read(room)
	c.r.buf = c.r.buf[:len(c.r.buf)+n]
	if n > 0 {
		c.lastRead.Store(time.Now().UnixNano())
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// fillNonBlocking reads the bytes the socket holds, or reports
// errWouldBlock when there are none.
func (c *Conn) fillNonBlocking() error {
	room := c.r.space()
	var n int
	var rerr error
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), room)
			if rerr != syscall.EINTR {
				return true
			}
		}
	})
	if err != nil {
		return err
	}
	switch {
	case rerr == syscall.EAGAIN:
		return errWouldBlock
	case rerr != nil:
		return rerr
	case n == 0:
		return io.EOF
	}
	c.r.buf = c.r.buf[:len(c.r.buf)+n]
	c.lastRead.Store(time.Now().UnixNano())
	return nil
}
