// Copyright 2013 The Gorilla WebSocket Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found below.
//
// Redistribution and use in source and binary forms, with or without
// modification, are permitted provided that the following conditions are met:
//
//   Redistributions of source code must retain the above copyright notice, this
//   list of conditions and the following disclaimer.
//
//   Redistributions in binary form must reproduce the above copyright notice,
//   this list of conditions and the following disclaimer in the documentation
//   and/or other materials provided with the distribution.
//
// THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND
// ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED
// WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
// DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE
// FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
// DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
// SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER
// CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY,
// OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
// OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.

// The frame reader of github.com/gorilla/websocket v1.5.3 (conn.go:
// advanceFrame, the message reader, the close codes a peer may send;
// mask.go: maskBytes), forked so that a connection can be read without a
// goroutine while it is idle. gorilla/websocket itself still answers the
// handshake (websocket.go), and the unmodified library is what
// FuzzFrameDifferential compares this reader with.
//
// What changed, and why:
//
//   - Bytes come from a buffer the caller fills (wsread.go: non-blocking
//     reads by a woken parked reader, or blocking ones by Read) instead of
//     a bufio.Reader on the socket, which would hold its buffer, and may
//     hold part of the next frame, while the connection is idle. So a
//     header, or a control frame, that has not wholly arrived is not
//     consumed: next reports that more bytes are needed and parses it again
//     from its start when they came. A data frame's payload is moved into
//     the message as it arrives (gorilla's messageReader), so the buffer is
//     empty, and goes back to its pool, between any two reads.
//   - next returns whole messages (gorilla's NextReader and ReadAll in one)
//     and hands pings and pongs to the caller, which answers pings;
//     gorilla's handlers write from inside the reader.
//   - Text messages are checked as UTF-8 as their bytes arrive, across
//     fragments, and fail with 1007 as soon as what came cannot begin
//     valid UTF-8 (RFC 6455 8.1). gorilla leaves this to the application.
//   - A close reason that is not UTF-8 fails with 1007, not 1002, and a
//     close frame of one byte (a code cut in half) with 1002 (RFC 6455
//     5.5.1); gorilla takes the latter for a close without a code.
//   - No extension is negotiated, so RSV1 is always a protocol error
//     (gorilla allows it when permessage-deflate was negotiated).
//   - Errors are values the caller maps to close codes (wsread.go,
//     readFailed) instead of close frames written here.
//   - The read limit is the connection's, passed to next: a message over
//     it fails (1009); a limit of 0 or less allows only empty messages
//     (gorilla: no limit).
//   - maskBytes is written with encoding/binary rather than unsafe, eight
//     bytes at a time.

package socket

import (
	"encoding/binary"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	// Frame header byte 0 bits from Section 5.2 of RFC 6455
	finalBit = 1 << 7
	rsv1Bit  = 1 << 6
	rsv2Bit  = 1 << 5
	rsv3Bit  = 1 << 4

	// Frame header byte 1 bits from Section 5.2 of RFC 6455
	maskBit = 1 << 7

	maxControlFramePayloadSize = 125
)

var validReceivedCloseCodes = map[int]bool{
	// see http://www.iana.org/assignments/websocket/websocket.xhtml#close-code-number

	1000: true,  // normal closure
	1001: true,  // going away
	1002: true,  // protocol error
	1003: true,  // unsupported data
	1005: false, // no status received
	1006: false, // abnormal closure
	1007: true,  // invalid frame payload data
	1008: true,  // policy violation
	1009: true,  // message too big
	1010: true,  // mandatory extension
	1011: true,  // internal server error
	1012: true,  // service restart
	1013: true,  // try again later
	1015: false, // TLS handshake
}

func isValidReceivedCloseCode(code int) bool {
	return validReceivedCloseCodes[code] || (code >= 3000 && code <= 4999)
}

// frameReader is gorilla's read state of a Conn, with the bytes read so far
// in place of its bufio.Reader. Only the connection's one reader uses it.
type frameReader struct {
	buf []byte // bytes read; buf[off:] are not consumed yet
	// msg is the message being received, unmasked.
	msg []byte
	err error // sticky: once a read fails, every later one does
	// remaining is the payload of the current data frame not read yet.
	remaining int64
	off       int32
	maskKey   [4]byte
	maskPos   uint8
	// msgOp is the opcode of the message being received, 0 between
	// messages; more: the message has frames to come (gorilla: !readFinal).
	msgOp byte
	more  bool
	// pending: bytes at the end of msg that start a code point whose
	// other bytes are still to come.
	pending uint8
}

// next returns the next text or binary message, or the next ping or pong
// (op tells which), from the bytes read so far; ok=false means more bytes
// are needed. A peer's close is returned as a *peerClosed error.
func (r *frameReader) next(limit int64) (op byte, p []byte, ok bool, err error) {
	for {
		if r.msgOp != 0 {
			n := r.readPayload()
			if r.msgOp == opText {
				if err := r.checkUTF8(n); err != nil {
					return 0, nil, false, err
				}
			}
			if r.remaining > 0 {
				return 0, nil, false, nil
			}
			if !r.more {
				op, p = r.msgOp, r.msg
				r.msg, r.msgOp, r.pending = nil, 0, 0
				return op, p, true, nil
			}
		}
		op, p, err := r.advanceFrame(limit)
		switch {
		case err == errNeedMore:
			return 0, nil, false, nil
		case err != nil:
			return 0, nil, false, err
		case op == opPing || op == opPong:
			return op, p, true, nil
		}
	}
}

// peek returns n bytes from offset at of the unconsumed bytes, or false
// when they have not arrived.
func (r *frameReader) peek(at, n int) ([]byte, bool) {
	b := r.buf[r.off:]
	if len(b) < at+n {
		return nil, false
	}
	return b[at : at+n], true
}

// advanceFrame parses the next frame header. A data frame's header is
// consumed and its payload left for readPayload; a control frame is
// consumed only once whole, and a ping or pong returned with its payload.
func (r *frameReader) advanceFrame(limit int64) (byte, []byte, error) {
	// 1. Skip remainder of previous frame: never needed, a data frame's
	// payload is read into the message.

	// 2. Read and parse first two bytes of frame header.
	// To aid debugging, collect and report all errors in the first two bytes
	// of the header.

	var errors []string

	p, ok := r.peek(0, 2)
	if !ok {
		return 0, nil, errNeedMore
	}

	frameType := p[0] & 0xf
	final := p[0]&finalBit != 0
	rsv1 := p[0]&rsv1Bit != 0
	rsv2 := p[0]&rsv2Bit != 0
	rsv3 := p[0]&rsv3Bit != 0
	mask := p[1]&maskBit != 0
	remaining := int64(p[1] & 0x7f)

	if rsv1 {
		errors = append(errors, "RSV1 set")
	}

	if rsv2 {
		errors = append(errors, "RSV2 set")
	}

	if rsv3 {
		errors = append(errors, "RSV3 set")
	}

	switch frameType {
	case opClose, opPing, opPong:
		if remaining > maxControlFramePayloadSize {
			errors = append(errors, "len > 125 for control")
		}
		if !final {
			errors = append(errors, "FIN not set on control")
		}
	case opText, opBinary:
		if r.more {
			errors = append(errors, "data before FIN")
		}
	case opContinuation:
		if !r.more {
			errors = append(errors, "continuation after FIN")
		}
	default:
		errors = append(errors, "bad opcode "+strconv.Itoa(int(frameType)))
	}

	if !mask {
		errors = append(errors, "bad MASK")
	}

	if len(errors) > 0 {
		return 0, nil, protocolError(strings.Join(errors, ", "))
	}

	// 3. Read and parse frame length as per
	// https://tools.ietf.org/html/rfc6455#section-5.2
	//
	// The length of the "Payload data", in bytes: if 0-125, that is the payload
	// length.
	// - If 126, the following 2 bytes interpreted as a 16-bit unsigned
	// integer are the payload length.
	// - If 127, the following 8 bytes interpreted as
	// a 64-bit unsigned integer (the most significant bit MUST be 0) are the
	// payload length. Multibyte length quantities are expressed in network byte
	// order.

	h := 2
	switch remaining {
	case 126:
		p, ok := r.peek(h, 2)
		if !ok {
			return 0, nil, errNeedMore
		}
		remaining, h = int64(binary.BigEndian.Uint16(p)), h+2
	case 127:
		p, ok := r.peek(h, 8)
		if !ok {
			return 0, nil, errNeedMore
		}
		// A length with its top bit set is over any read limit
		// (gorilla: setReadRemaining's ErrReadLimit).
		if remaining, h = int64(binary.BigEndian.Uint64(p)), h+8; remaining < 0 {
			return 0, nil, errTooLarge
		}
	}

	// 4. Handle frame masking.

	key, ok := r.peek(h, len(r.maskKey))
	if !ok {
		return 0, nil, errNeedMore
	}
	h += len(r.maskKey)

	// 5. For text and binary messages, enforce read limit and return.

	if frameType == opContinuation || frameType == opText || frameType == opBinary {

		readLength := int64(len(r.msg)) + remaining
		// Don't allow readLength to overflow in the presence of a large
		// remaining counter.
		if readLength < 0 || readLength > max(limit, 0) {
			return 0, nil, errTooLarge
		}

		r.off += int32(h)
		r.remaining = remaining
		r.maskPos = 0
		copy(r.maskKey[:], key)
		if frameType != opContinuation {
			r.msgOp = frameType
		}
		r.more = !final
		return frameType, nil, nil
	}

	// 6. Read control frame payload.

	payload, ok := r.peek(h, int(remaining))
	if !ok {
		return 0, nil, errNeedMore
	}
	r.off += int32(h) + int32(remaining)
	maskBytes([4]byte(key), 0, payload)

	// 7. Process control frame payload.

	switch frameType {
	case opPong, opPing:
		return frameType, payload, nil
	case opClose:
		closeCode := closeNoStatus
		closeText := ""
		if len(payload) == 1 {
			return 0, nil, protocolError("close frame of one byte")
		}
		if len(payload) >= 2 {
			closeCode = int(binary.BigEndian.Uint16(payload))
			if !isValidReceivedCloseCode(closeCode) {
				return 0, nil, protocolError("bad close code " + strconv.Itoa(closeCode))
			}
			closeText = string(payload[2:])
			if !utf8.ValidString(closeText) {
				return 0, nil, invalidPayload("invalid utf8 payload in close frame")
			}
		}
		return 0, nil, &peerClosed{code: closeCode, reason: closeText}
	}

	return frameType, nil, nil
}

// readPayload moves what has arrived of the current data frame's payload
// into the message, unmasked, and says how many bytes that was.
func (r *frameReader) readPayload() int {
	b := r.buf[r.off:]
	n := int(min(int64(len(b)), r.remaining))
	if n == 0 {
		return 0
	}
	start := len(r.msg)
	r.msg = append(r.msg, b[:n]...)
	r.maskPos = uint8(maskBytes(r.maskKey, int(r.maskPos), r.msg[start:]))
	r.off += int32(n)
	r.remaining -= int64(n)
	return n
}

// checkUTF8 checks the n bytes that joined the text message, with the
// unfinished code point before them. A code point still unfinished at the
// end of what arrived is left pending, unless the message is complete.
func (r *frameReader) checkUTF8(n int) error {
	b := r.msg[len(r.msg)-n-int(r.pending):]
	// Where the last code point starts: at most UTFMax-1 bytes back when
	// it is unfinished.
	tail := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-(utf8.UTFMax-1); i-- {
		if utf8.RuneStart(b[i]) {
			tail = i
			break
		}
	}
	// FullRune is false only for the valid beginning of a code point.
	if tail == len(b) || utf8.FullRune(b[tail:]) {
		tail = len(b)
	}
	if !utf8.Valid(b[:tail]) {
		return invalidPayload("invalid UTF-8 in a text message")
	}
	r.pending = uint8(len(b) - tail)
	if r.pending > 0 && r.remaining == 0 && !r.more {
		return invalidPayload("text message ends inside a UTF-8 sequence")
	}
	return nil
}

// maskBytes applies (and removes) the masking key to b, which starts at
// position pos of the payload, and returns the position after it.
func maskBytes(key [4]byte, pos int, b []byte) int {
	if len(b) >= 8 {
		var k [4]byte
		for i := range k {
			k[i] = key[(pos+i)&3]
		}
		k32 := binary.LittleEndian.Uint32(k[:])
		k64 := uint64(k32) | uint64(k32)<<32
		// A multiple of 8 bytes: pos stays where it is modulo 4.
		n := len(b) &^ 7
		for i := 0; i < n; i += 8 {
			binary.LittleEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(b[i:])^k64)
		}
		b = b[n:]
	}
	for i := range b {
		b[i] ^= key[pos&3]
		pos++
	}
	return pos & 3
}
