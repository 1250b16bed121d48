package socket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// WebSocket opcodes (RFC 6455 section 5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xa
)

// Close codes of RFC 6455 that presenced sends without exporting.
const (
	closeNormal         = 1000
	closeProtocolError  = 1002
	closeNoStatus       = 1005
	closeAbnormal       = 1006
	closeInvalidPayload = 1007
)

// errTooLarge: a client message exceeded the connection's read limit.
var errTooLarge = errors.New("websocket: message exceeds the read limit")

// protocolError is a frame no conforming client sends; the connection is
// closed with 1002.
type protocolError string

func (e protocolError) Error() string { return "websocket: " + string(e) }

// invalidPayload is a message that is not what its type says (a text
// message or close reason that is not UTF-8); the connection is closed
// with 1007.
type invalidPayload string

func (e invalidPayload) Error() string { return "websocket: " + string(e) }

// errNeedMore: the frame has not wholly arrived (its header, or all of a
// control frame); the reader waits for more bytes.
var errNeedMore = errors.New("websocket: frame not complete")

// peerClosed: the client sent a close frame.
type peerClosed struct {
	code   int
	reason string
}

func (e *peerClosed) Error() string {
	return fmt.Sprintf("websocket: peer closed with %d %q", e.code, e.reason)
}

// readBufferBytes is the buffer a read takes from the pool: enough for a
// burst of small frames in one system call.
const readBufferBytes = 4096

// maxPooledBuffer: larger buffers (grown for a big frame) are left to the
// collector rather than kept for small reads.
const maxPooledBuffer = 64 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, readBufferBytes); return &b }}

func getBuf() []byte { return (*(bufPool.Get().(*[]byte)))[:0] }

func putBuf(b []byte) {
	if cap(b) > maxPooledBuffer {
		return
	}
	b = b[:0]
	bufPool.Put(&b)
}

// space makes room for at least one more read at the end of the buffer,
// moving unconsumed bytes to its start, and returns that room.
func (r *frameReader) space() []byte {
	if r.buf == nil {
		r.buf = getBuf()
	}
	if r.off > 0 {
		n := copy(r.buf, r.buf[r.off:])
		r.buf, r.off = r.buf[:n], 0
	}
	// Never short of room in practice: the reader consumes every byte it
	// can before asking for more, so what waits is less than a control
	// frame (131 bytes).
	if cap(r.buf)-len(r.buf) < 512 {
		grown := make([]byte, len(r.buf), 2*cap(r.buf))
		copy(grown, r.buf)
		putBuf(r.buf)
		r.buf = grown
	}
	return r.buf[len(r.buf):cap(r.buf)]
}

// release gives the buffer back when no bytes are waiting in it, so an
// idle connection holds none.
func (r *frameReader) release() {
	if r.buf != nil && int(r.off) == len(r.buf) {
		putBuf(r.buf)
		r.buf, r.off = nil, 0
	}
}

// appendFrame appends a server frame (never masked) of op with payload p.
func appendFrame(b []byte, op byte, p []byte) []byte {
	b = append(b, 0x80|op)
	switch n := len(p); {
	case n < 126:
		b = append(b, byte(n))
	case n <= 0xffff:
		b = append(b, 126, byte(n>>8), byte(n))
	default:
		b = append(b, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, p...)
}

// closePayload is the body of a close frame: the code, then the reason,
// cut to fit the 125 bytes of a control frame.
func closePayload(code int, reason string) []byte {
	if code == closeNoStatus {
		return nil
	}
	if len(reason) > 123 {
		reason = reason[:123]
	}
	return append(binary.BigEndian.AppendUint16(nil, uint16(code)), reason...)
}
