package web

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
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
	closeNormal        = 1000
	closeProtocolError = 1002
	closeNoStatus      = 1005
	closeAbnormal      = 1006
)

// errTooLarge: a client message exceeded the connection's read limit.
var errTooLarge = errors.New("websocket: message exceeds the read limit")

// protocolError is a frame no conforming client sends; the connection is
// closed with 1002.
type protocolError string

func (e protocolError) Error() string { return "websocket: " + string(e) }

// peerClosed: the client sent a close frame.
type peerClosed struct {
	code   int
	reason string
}

func (e *peerClosed) Error() string {
	return fmt.Sprintf("websocket: peer closed with %d %q", e.code, e.reason)
}

// frameReader cuts client frames out of the bytes read so far. It reads no
// socket itself: the parked reader fills it with non-blocking reads and
// Read with blocking ones, so a frame split across reads (or wakes) is
// completed from where the last read stopped, and several frames in one
// read are all delivered.
type frameReader struct {
	buf []byte // unconsumed bytes are buf[off:]
	off int
	// frag gathers a fragmented message; fragOp is its opcode, 0 when none.
	frag   []byte
	fragOp byte
	err    error // sticky: once a read fails, every later one does
}

type frame struct {
	op      byte
	fin     bool
	payload []byte // unmasked, aliasing the reader's buffer
}

// next parses the next whole frame, or reports ok=false when more bytes
// are needed. limit caps a data message, checked as soon as its header
// arrives, so an oversized frame is refused before its payload is read.
func (r *frameReader) next(limit int64) (f frame, ok bool, err error) {
	b := r.buf[r.off:]
	if len(b) < 2 {
		return f, false, nil
	}
	b0, b1 := b[0], b[1]
	if b0&0x70 != 0 {
		return f, false, protocolError("reserved bits set without an extension")
	}
	if b1&0x80 == 0 {
		return f, false, protocolError("client frames must be masked")
	}
	f.op, f.fin = b0&0x0f, b0&0x80 != 0
	n, h := uint64(b1&0x7f), 2
	switch n {
	case 126:
		if len(b) < 4 {
			return f, false, nil
		}
		n, h = uint64(binary.BigEndian.Uint16(b[2:])), 4
	case 127:
		if len(b) < 10 {
			return f, false, nil
		}
		n, h = binary.BigEndian.Uint64(b[2:]), 10
		if n>>63 != 0 {
			return f, false, protocolError("frame length has its top bit set")
		}
	}
	switch f.op {
	case opText, opBinary:
		if r.fragOp != 0 {
			return f, false, protocolError("a new message started inside a fragmented one")
		}
	case opContinuation:
		if r.fragOp == 0 {
			return f, false, protocolError("continuation frame without a message to continue")
		}
	case opClose, opPing, opPong:
		if !f.fin || n > 125 {
			return f, false, protocolError("control frames are at most 125 bytes and not fragmented")
		}
	default:
		return f, false, protocolError(fmt.Sprintf("unknown opcode %d", f.op))
	}
	if f.op < opClose && n+uint64(len(r.frag)) > uint64(max(limit, 0)) {
		return f, false, errTooLarge
	}
	end := h + 4 + int(n)
	if len(b) < end {
		return f, false, nil
	}
	f.payload = b[h+4 : end]
	mask(b[h:h+4], f.payload)
	r.off += end
	return f, true, nil
}

// mask applies (and removes) the client's masking key.
func mask(key, p []byte) {
	if len(p) >= 8 {
		k := binary.LittleEndian.Uint32(key)
		k8 := uint64(k) | uint64(k)<<32
		for len(p) >= 8 {
			binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)^k8)
			p = p[8:]
		}
	}
	for i := range p {
		p[i] ^= key[i&3]
	}
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
	if r.buf != nil && r.off == len(r.buf) {
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

// parseClose reads a received close frame's code and reason. A frame RFC
// 6455 (5.5.1, 7.4) does not allow is a protocol error: one byte, a code
// no endpoint may send (1005 and 1006 among them), a reason not UTF-8.
func parseClose(p []byte) error {
	switch len(p) {
	case 0:
		return &peerClosed{code: closeNoStatus}
	case 1:
		return protocolError("a close frame of one byte")
	}
	code := int(binary.BigEndian.Uint16(p))
	if !sendableCloseCode(code) {
		return protocolError(fmt.Sprintf("close code %d may not be sent", code))
	}
	if !utf8.Valid(p[2:]) {
		return protocolError("a close reason that is not UTF-8")
	}
	return &peerClosed{code: code, reason: string(p[2:])}
}

// sendableCloseCode: the codes an endpoint may put in a close frame (RFC
// 6455 7.4 and the IANA registry it set up).
func sendableCloseCode(c int) bool {
	switch {
	case c >= 3000 && c <= 4999:
		return true
	case c >= 1000 && c <= 1014:
		return c != 1004 && c != closeNoStatus && c != closeAbnormal
	}
	return false
}
