package socket

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// FuzzFrameDifferential sends the same stream of client frames, cut into
// the same reads, to this package's reader (a Conn read with Read) and to
// unmodified gorilla/websocket (its server Conn, read with NextReader),
// and requires the same outcome: the messages delivered, in order, with
// their type and bytes; the pongs answered; and how the reading ended: a
// protocol error (1002), a message over the read limit (1009), the peer's
// close with its code, or the end of the stream.
//
// The stream comes from a generator driven by the fuzz bytes: messages in
// fragments with pings and pongs between them, closes with valid and
// invalid codes and reasons, frames with any opcode, RSV bits, unmasked
// frames, lengths in their 7-, 16- and 64-bit forms (not always the
// shortest, sometimes not the true one), text that is or is not UTF-8;
// then cut short, sometimes, and into reads of random sizes.
//
// The differences allowed are the checks RFC 6455 requires and gorilla
// leaves out or answers with another code (wsconn_gorilla.go says why):
//   - text messages must be UTF-8 (8.1): gorilla leaves it to the
//     application, so gorilla's side does what an application would,
//     checking each message's bytes as Read returns them, and ends with
//     1007 as soon as they cannot begin valid UTF-8;
//   - a close reason that is not UTF-8: gorilla fails with 1002, this
//     reader with 1007;
//   - a close frame of one byte (5.5.1: a body starts with a two-byte
//     code): gorilla takes it for a close without a code (1005), this
//     reader fails with 1002.
//
// Any other difference fails. Seeds: testdata/fuzz/FuzzFrameDifferential.
func FuzzFrameDifferential(f *testing.F) {
	s, err := NewSockets(config.Default().Realtime, prometheus.NewRegistry(), testenv.Logger())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		stream, reads := genFrameStream(data)
		ours := readOurs(s, stream, reads)
		theirs := readGorilla(t, stream, reads)
		if theirs.end == "1005 peer" && firstCloseBodyLen(stream) == 1 {
			theirs.end = "1002"
		}
		if theirs.end == "1002 close reason not UTF-8" {
			theirs.end = "1007"
		}
		if !ours.equal(theirs) {
			t.Fatalf("outcomes differ\nours:    %v\ngorilla: %v\nstream %x\nreads %v", ours, theirs, stream, reads)
		}
		if ours.wroteClose != ours.wantClose() {
			t.Fatalf("ended with %s but wrote close %d\nstream %x", ours.end, ours.wroteClose, stream)
		}
	})
}

// differentialLimit is both readers' read limit.
const differentialLimit = 256

type readOutcome struct {
	msgs  []wsEvent
	pongs [][]byte
	// end: "eof", "1002", "1007", "1009", or "<code> peer".
	end string
	// wroteClose: the code of the close frame written, -1 none (ours only).
	wroteClose int
}

func (o readOutcome) equal(p readOutcome) bool {
	same := func(a, b wsEvent) bool { return a.op == b.op && bytes.Equal(a.p, b.p) }
	return o.end == p.end && slices.EqualFunc(o.msgs, p.msgs, same) && slices.EqualFunc(o.pongs, p.pongs, bytes.Equal)
}

func (o readOutcome) String() string {
	return fmt.Sprintf("end %s, messages %v, pongs %q", o.end, o.msgs, o.pongs)
}

// wantClose is the close code the client should have got: the reader's
// verdict, or 1000 answering the peer's own close (any code it sent: the
// answer shows only documented codes).
func (o readOutcome) wantClose() int {
	var code int
	switch {
	case o.end == "eof":
		return -1
	case strings.HasSuffix(o.end, " peer"):
		return closeNormal
	default:
		_, _ = fmt.Sscanf(o.end, "%d", &code)
	}
	return code
}

// readOurs reads the stream with a Conn, as Read does.
func readOurs(s *Sockets, stream []byte, reads []int) readOutcome {
	nc := &scriptedConn{in: cutReads(stream, reads)}
	c := &Conn{nc: nc, s: s, kind: "fuzz"}
	c.limit.Store(differentialLimit)
	var o readOutcome
	for {
		op, msg, err := c.read()
		if err != nil {
			break
		}
		o.msgs = append(o.msgs, wsEvent{op: op, p: msg})
	}
	var pe protocolError
	var ip invalidPayload
	var pc *peerClosed
	switch err := c.r.err; {
	case errors.Is(err, errTooLarge):
		o.end = "1009"
	case errors.As(err, &pe):
		o.end = "1002"
	case errors.As(err, &ip):
		o.end = "1007"
	case errors.As(err, &pc):
		o.end = fmt.Sprintf("%d peer", pc.code)
	default:
		o.end = "eof"
	}
	o.pongs, o.wroteClose = serverFrames(nc.written())
	return o
}

// readGorilla reads the stream with gorilla's server Conn, checking text
// messages as UTF-8 as an application must.
func readGorilla(t *testing.T, stream []byte, reads []int) readOutcome {
	nc := &scriptedConn{in: cutReads(stream, reads)}
	req := &http.Request{Method: http.MethodGet, Host: "x", Header: http.Header{
		"Connection":            {"Upgrade"},
		"Upgrade":               {"websocket"},
		"Sec-Websocket-Version": {"13"},
		"Sec-Websocket-Key":     {"dGhlIHNhbXBsZSBub25jZQ=="},
	}}
	up := websocket.Upgrader{}
	ws, err := up.Upgrade(hijackable{nc}, req, nil)
	if err != nil {
		t.Fatalf("gorilla upgrade: %v", err)
	}
	ws.SetReadLimit(differentialLimit)
	var o readOutcome
	buf := make([]byte, 64)
	for o.end == "" {
		mt, r, err := ws.NextReader()
		if err != nil {
			o.end = gorillaEnd(err)
			break
		}
		var msg []byte
		for o.end == "" {
			n, err := r.Read(buf)
			msg = append(msg, buf[:n]...)
			switch {
			case mt == websocket.TextMessage && !couldBeUTF8(msg):
				o.end = "1007"
			case err == io.EOF:
				if mt == websocket.TextMessage && !utf8.Valid(msg) {
					o.end = "1007"
					break
				}
				o.msgs = append(o.msgs, wsEvent{op: byte(mt), p: msg})
			case err != nil:
				o.end = gorillaEnd(err)
			}
			if err == io.EOF {
				break
			}
		}
	}
	o.pongs, _ = serverFrames(nc.written())
	return o
}

func gorillaEnd(err error) string {
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &ce) && ce.Code == websocket.CloseAbnormalClosure:
		return "eof" // gorilla's unexpected EOF
	case errors.As(err, &ce):
		return fmt.Sprintf("%d peer", ce.Code)
	case errors.Is(err, websocket.ErrReadLimit):
		return "1009"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case strings.Contains(err.Error(), "invalid utf8 payload in close frame"):
		return "1002 close reason not UTF-8"
	case strings.HasPrefix(err.Error(), "websocket: "):
		return "1002"
	}
	return "unexpected: " + err.Error()
}

// couldBeUTF8 says whether b is valid UTF-8 or its beginning: valid once
// the last code point, if unfinished, is completed.
func couldBeUTF8(b []byte) bool {
	if utf8.Valid(b) {
		return true
	}
	for k := 1; k < utf8.UTFMax && k <= len(b); k++ {
		head, tail := b[:len(b)-k], b[len(b)-k:]
		if !utf8.Valid(head) {
			continue
		}
		// Try every second byte, and the smallest continuation bytes after.
		for c := 0x80; c <= 0xbf; c++ {
			for extra := 0; extra < utf8.UTFMax-1; extra++ {
				cand := append(append(slices.Clone(tail), byte(c)), bytes.Repeat([]byte{0x80}, extra)...)
				if utf8.Valid(cand) && utf8.RuneCount(cand) == 1 {
					return true
				}
			}
		}
	}
	return false
}

// firstCloseBodyLen walks the stream's frames by their lengths alone and
// returns the body length of the first close frame (-1: none).
func firstCloseBodyLen(b []byte) int {
	for len(b) >= 2 {
		n, h := uint64(b[1]&0x7f), 2
		switch {
		case n == 126 && len(b) >= 4:
			n, h = uint64(binary.BigEndian.Uint16(b[2:])), 4
		case n == 127 && len(b) >= 10:
			n, h = binary.BigEndian.Uint64(b[2:]), 10
		case n >= 126:
			return -1
		}
		if b[1]&0x80 != 0 {
			h += 4
		}
		if b[0]&0x0f == opClose {
			return int(n)
		}
		if n > uint64(len(b)-min(h, len(b))) {
			return -1
		}
		b = b[h+int(n):]
	}
	return -1
}

// serverFrames parses what a server wrote after its handshake answer (if
// any): the pongs' payloads and the close frame's code (-1: none, 1005:
// no code).
func serverFrames(out []byte) (pongs [][]byte, closeCode int) {
	if i := bytes.Index(out, []byte("\r\n\r\n")); i >= 0 && bytes.HasPrefix(out, []byte("HTTP/")) {
		out = out[i+4:]
	}
	closeCode = -1
	for len(out) >= 2 {
		op, n := out[0]&0x0f, int(out[1]&0x7f)
		if n > 125 || len(out) < 2+n {
			break // control frames only: nothing else is written
		}
		p := out[2 : 2+n]
		switch op {
		case opPong:
			pongs = append(pongs, bytes.Clone(p))
		case opClose:
			closeCode = closeNoStatus
			if len(p) >= 2 {
				closeCode = int(binary.BigEndian.Uint16(p))
			}
		}
		out = out[2+n:]
	}
	return pongs, closeCode
}

// cutReads cuts the stream into the reads a socket would return.
func cutReads(stream []byte, reads []int) [][]byte {
	var in [][]byte
	for i := 0; len(stream) > 0; i++ {
		n := len(stream)
		if i < len(reads) {
			n = min(reads[i], n)
		}
		in = append(in, stream[:n])
		stream = stream[n:]
	}
	return in
}

// scriptedConn is a connection whose reads return the given chunks, one
// each, then io.EOF, and which keeps what is written to it.
type scriptedConn struct {
	in  [][]byte
	mu  sync.Mutex
	out []byte
}

func (c *scriptedConn) Read(p []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.in[0])
	if c.in[0] = c.in[0][n:]; len(c.in[0]) == 0 {
		c.in = c.in[1:]
	}
	return n, nil
}

func (c *scriptedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out = append(c.out, p...)
	return len(p), nil
}

func (c *scriptedConn) written() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out)
}

func (c *scriptedConn) Close() error                     { return nil }
func (c *scriptedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptedConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptedConn) SetWriteDeadline(time.Time) error { return nil }

// hijackable hands gorilla's upgrader the scripted connection.
type hijackable struct{ nc *scriptedConn }

func (h hijackable) Header() http.Header         { return http.Header{} }
func (h hijackable) Write(p []byte) (int, error) { return h.nc.Write(p) }
func (h hijackable) WriteHeader(int)             {}
func (h hijackable) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.nc, bufio.NewReadWriter(bufio.NewReader(h.nc), bufio.NewWriter(h.nc)), nil
}

// fuzzBytes hands out the fuzz input; past its end, zeros.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

func (b *fuzzBytes) take(n int) []byte {
	n = min(n, len(*b))
	p := (*b)[:n]
	*b = (*b)[n:]
	return p
}

// textAtoms build text payloads: mostly valid UTF-8, the last ones not.
var textAtoms = []string{"a", "hello", "{\"v\":1}", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf",
	"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", "\xe2\x82"}

var closeCodes = []int{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1011, 1012, 1013, 3000, 4999,
	0, 999, 1004, 1005, 1006, 1014, 1015, 1016, 2999, 5000, 65535}

// genFrameStream builds a stream of client frames, and the sizes of the
// reads it arrives in, from the fuzz input: its first byte picks the
// reads, the next two whether and where the stream is cut short, the rest
// the frames.
func genFrameStream(data []byte) (stream []byte, reads []int) {
	g := fuzzBytes(data)
	readSeed, cut, cutAt := g.next(), g.next(), g.next()
	for items := 0; len(g) > 0 && items < 16; items++ {
		switch sel := g.next(); sel % 16 {
		default:
			op := byte(opText)
			if sel&0x20 != 0 {
				op = opBinary
			}
			msg := genPayload(&g, op == opText)
			frags := 1 + int(g.next()%4)
			for i := 0; i < frags; i++ {
				n := len(msg)
				if i < frags-1 {
					n = int(g.next()) % (len(msg) + 1)
				}
				fop := byte(opContinuation)
				if i == 0 {
					fop = op
				}
				if i == frags-1 {
					fop |= finalBit
				}
				stream = appendFuzzFrame(stream, &g, fop, msg[:n])
				msg = msg[n:]
				if c := g.next(); c%4 == 0 && i < frags-1 {
					stream = appendFuzzFrame(stream, &g, finalBit|(opPing+c/4%2), g.take(int(c/8%16)))
				}
			}
		case 8, 9:
			n := g.next()
			if n%8 == 0 {
				n = 120 + n/8%10 // about the control frame's limit
			} else {
				n %= 32
			}
			stream = appendFuzzFrame(stream, &g, finalBit|opPing, g.take(int(n)))
		case 10:
			stream = appendFuzzFrame(stream, &g, finalBit|opPong, g.take(int(g.next()%32)))
		case 11:
			var body []byte
			switch k := g.next(); k % 8 {
			case 0:
			case 1:
				body = []byte{k}
			default:
				body = binary.BigEndian.AppendUint16(nil, uint16(closeCodes[int(g.next())%len(closeCodes)]))
				body = append(body, genPayload(&g, true)...)
			}
			stream = appendFuzzFrame(stream, &g, finalBit|opClose, body)
		case 12:
			// Any first byte: opcode, FIN and RSV as they come.
			stream = appendFuzzFrame(stream, &g, g.next(), g.take(int(g.next()%40)))
		}
	}
	if cut%4 == 0 {
		stream = stream[:int(cutAt)*len(stream)/256]
	}
	// Reads of 1 to 64 bytes from a small generator, or (one seed in
	// eight) whatever the reader has room for.
	x := uint32(readSeed) | 1
	for total := 0; readSeed%8 != 0 && total < len(stream); {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		n := 1 + int(x%64)
		reads = append(reads, n)
		total += n
	}
	return stream, reads
}

// genPayload is a text payload of atoms, or binary bytes, about up to
// and past the read limit.
func genPayload(g *fuzzBytes, text bool) []byte {
	size := g.next()
	var want int
	switch size % 4 {
	case 0:
		want = int(size / 4 % 16)
	case 1:
		want = differentialLimit - 8 + int(size/4%16)
	default:
		want = int(size)
	}
	var p []byte
	for len(p) < want {
		if !text {
			p = append(p, g.next())
			continue
		}
		a := g.next()
		atom := textAtoms[int(a)%(len(textAtoms)-6)] // valid ones
		if a >= 0xf8 {
			atom = textAtoms[len(textAtoms)-6+int(a-0xf8)%6] // now and then not
		}
		p = append(p, atom...)
	}
	return p
}

// appendFuzzFrame appends a client frame with b0 (FIN, RSV, opcode) and
// payload p, masked unless the input says otherwise, its length in the
// shortest form or not, now and then with RSV bits set or a length that
// is not the payload's.
func appendFuzzFrame(stream []byte, g *fuzzBytes, b0 byte, p []byte) []byte {
	flags := g.next()
	if flags&0xf8 == 0xf8 {
		b0 |= (flags & 0x07) << 4 // RSV bits
	}
	n := uint64(len(p))
	if flags&0x1f == 0x1f {
		n = uint64(g.next()) // a length that is not the payload's
	}
	masked := flags != 0xfe
	m := byte(0)
	if masked {
		m = maskBit
	}
	stream = append(stream, b0)
	switch form := flags >> 3 & 3; {
	case form == 3 || n > 0xffff:
		stream = append(stream, m|127)
		if flags&0x1f == 0x1e {
			n |= 1 << 63 // top bit set
		}
		stream = binary.BigEndian.AppendUint64(stream, n)
	case form == 2 || n > 125:
		stream = append(stream, m|126)
		stream = binary.BigEndian.AppendUint16(stream, uint16(n))
	default:
		stream = append(stream, m|byte(n))
	}
	if !masked {
		return append(stream, p...)
	}
	key := [4]byte{flags, 0x5a, flags ^ 0xa5, 0x3c}
	stream = append(stream, key[:]...)
	start := len(stream)
	stream = append(stream, p...)
	for i := range p {
		stream[start+i] ^= key[i&3]
	}
	return stream
}
