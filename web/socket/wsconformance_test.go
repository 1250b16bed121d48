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

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// The conformance suite walks the Autobahn test suite's categories 1-7 and
// 9 (framing, pings and pongs, reserved bits, opcodes, fragmentation,
// UTF-8, closing, limits) against a served echo endpoint: the handshake
// answered through net/http, the connection read by Serve, each
// message echoed with Send. Frames are written by hand over TCP, cut as
// each case says, and the case checks what comes back: echoes, pongs and
// the close code RFC 6455 calls for, then the end of the TCP connection.
//
// Cases carry Autobahn's numbers; category 9's sizes are a sixteenth of
// Autobahn's (its 16 MiB messages are not for a unit test), its message
// counts a quarter. Where Autobahn accepts several outcomes, the case
// asks for the one presenced gives: invalid UTF-8 in a close reason is
// 1007 (Autobahn also takes 1002), close codes 5000 and 65535 (Autobahn:
// informational) are 1002, and a message followed by a close is echoed
// before the close is answered (7.1.6, informational in Autobahn).
//
// The endpoint has no binary sends (every presenced protocol is JSON
// text): binary messages are delivered as bytes and echoed in a text
// frame, so a case checks the bytes.

// conformanceLimit is the endpoint's read limit: category 9's largest
// message fits exactly.
const conformanceLimit = 1 << 20

type wsEvent struct {
	op byte
	p  []byte
}

func (e wsEvent) String() string {
	name := map[byte]string{opText: "text", opBinary: "binary", opPong: "pong", opPing: "ping", opClose: "close"}[e.op]
	if len(e.p) > 24 {
		return fmt.Sprintf("%s(%d bytes %q...)", name, len(e.p), e.p[:24])
	}
	return fmt.Sprintf("%s(%q)", name, e.p)
}

func echoed(p []byte) wsEvent { return wsEvent{op: opText, p: p} }
func ponged(p []byte) wsEvent { return wsEvent{op: opPong, p: p} }

// wsPart is bytes the client writes in one go, or in writes of chop bytes.
type wsPart struct {
	b       []byte
	chop    int
	perFrom [][]byte // one write per frame, when set
}

type abCase struct {
	id    string
	parts []wsPart // written in order, a pause between parts
	// want: the echoes and pongs the server sends, in order per kind
	// (echoes go through the send queue, pongs straight out), or in this
	// very order when ordered.
	want    []wsEvent
	ordered bool
	// close: nil when the server keeps the connection (the case then
	// closes it with 1000 and wants its echo); otherwise the codes one of
	// which the server closes with (1005: a close frame without a code).
	close []int
	// clientCloses: the client's close is among the frames sent; the
	// server answers it (close says with what) and closes TCP at once.
	clientCloses bool
	// failFast: the close must come before the last part is sent.
	failFast bool
}

// rawFrame is a client frame: b0 is FIN, RSV and the opcode, the payload
// masked (unless unmasked).
func rawFrame(b0 byte, p []byte) []byte { return rawFrameMask(b0, p, true) }

func rawFrameMask(b0 byte, p []byte, masked bool) []byte {
	var m byte
	if masked {
		m = 0x80
	}
	b := []byte{b0}
	switch n := len(p); {
	case n < 126:
		b = append(b, m|byte(n))
	case n <= 0xffff:
		b = append(b, m|126, byte(n>>8), byte(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if !masked {
		return append(b, p...)
	}
	key := []byte{0x37, 0xfa, 0x21, 0x3d}
	b = append(b, key...)
	start := len(b)
	b = append(b, p...)
	for i := range p {
		b[start+i] ^= key[i&3]
	}
	return b
}

const fin = 0x80

func text(p string) []byte          { return rawFrame(fin|opText, []byte(p)) }
func ping(p string) []byte          { return rawFrame(fin|opPing, []byte(p)) }
func pong(p string) []byte          { return rawFrame(fin|opPong, []byte(p)) }
func frag(op byte, p string) []byte { return rawFrame(op, []byte(p)) }
func last(op byte, p string) []byte { return rawFrame(fin|op, []byte(p)) }

func closeWith(code int, reason string) []byte {
	return rawFrame(fin|opClose, append(binary.BigEndian.AppendUint16(nil, uint16(code)), reason...))
}

func oneChop(frames ...[]byte) wsPart { return wsPart{b: bytes.Join(frames, nil)} }
func perFrame(frames ...[]byte) wsPart {
	return wsPart{b: bytes.Join(frames, nil), perFrom: frames}
}
func chops(n int, frames ...[]byte) wsPart { return wsPart{b: bytes.Join(frames, nil), chop: n} }

func echoes(msgs ...string) []wsEvent {
	var ev []wsEvent
	for _, m := range msgs {
		ev = append(ev, echoed([]byte(m)))
	}
	return ev
}

// conformanceCases is the table, by Autobahn case number.
func conformanceCases() []abCase {
	var cs []abCase
	add := func(c ...abCase) { cs = append(cs, c...) }
	fail := []int{closeProtocolError}

	// 1 Framing: text and binary messages of lengths at and around the
	// length encodings' edges (7 bits, 16 bits, 64 bits).
	for i, n := range []int{0, 125, 126, 127, 128, 65535, 65536} {
		p := bytes.Repeat([]byte("*"), n)
		add(abCase{id: fmt.Sprintf("1.1.%d", i+1), parts: []wsPart{oneChop(rawFrame(fin|opText, p))}, want: []wsEvent{echoed(p)}})
		b := bytes.Repeat([]byte{0xfe}, n)
		add(abCase{id: fmt.Sprintf("1.2.%d", i+1), parts: []wsPart{oneChop(rawFrame(fin|opBinary, b))}, want: []wsEvent{echoed(b)}})
	}
	big := bytes.Repeat([]byte("*"), 65536)
	add(abCase{id: "1.1.8", parts: []wsPart{chops(997, rawFrame(fin|opText, big))}, want: []wsEvent{echoed(big)}})
	bigB := bytes.Repeat([]byte{0xfe}, 65536)
	add(abCase{id: "1.2.8", parts: []wsPart{chops(997, rawFrame(fin|opBinary, bigB))}, want: []wsEvent{echoed(bigB)}})

	// 2 Pings and pongs.
	bin := string([]byte{0x00, 0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0x00, 0xff})
	p125 := strings.Repeat("\xfe", 125)
	add(
		abCase{id: "2.1", parts: []wsPart{oneChop(ping(""))}, want: []wsEvent{ponged(nil)}},
		abCase{id: "2.2", parts: []wsPart{oneChop(ping("Hello, world!"))}, want: []wsEvent{ponged([]byte("Hello, world!"))}},
		abCase{id: "2.3", parts: []wsPart{oneChop(ping(bin))}, want: []wsEvent{ponged([]byte(bin))}},
		abCase{id: "2.4", parts: []wsPart{oneChop(ping(p125))}, want: []wsEvent{ponged([]byte(p125))}},
		abCase{id: "2.5", parts: []wsPart{oneChop(ping(p125 + "\xfe"))}, close: fail},
		abCase{id: "2.6", parts: []wsPart{chops(1, ping(p125))}, want: []wsEvent{ponged([]byte(p125))}},
		abCase{id: "2.7", parts: []wsPart{oneChop(pong(""))}},
		abCase{id: "2.8", parts: []wsPart{oneChop(pong("unsolicited pong payload"))}},
		abCase{id: "2.9", parts: []wsPart{oneChop(pong("unsolicited pong payload"), ping("ping payload"))}, want: []wsEvent{ponged([]byte("ping payload"))}},
	)
	var pings [][]byte
	var pongs []wsEvent
	for i := range 10 {
		p := fmt.Sprintf("payload-%d", i)
		pings = append(pings, ping(p))
		pongs = append(pongs, ponged([]byte(p)))
	}
	add(abCase{id: "2.10", parts: []wsPart{oneChop(pings...)}, want: pongs},
		abCase{id: "2.11", parts: []wsPart{chops(1, pings...)}, want: pongs})

	// 3 Reserved bits: no extension is negotiated, so any RSV bit fails
	// the connection; what came before it is still answered, what comes
	// after is not.
	hello := "Hello, world!"
	add(
		abCase{id: "3.1", parts: []wsPart{oneChop(rawFrame(fin|0x40|opText, []byte(hello)))}, close: fail},
		abCase{id: "3.2", parts: []wsPart{oneChop(text(hello), rawFrame(fin|0x20|opText, []byte(hello)), ping(""))}, want: echoes(hello), close: fail},
		abCase{id: "3.3", parts: []wsPart{perFrame(text(hello), rawFrame(fin|0x60|opText, []byte(hello)), ping(""))}, want: echoes(hello), close: fail},
		abCase{id: "3.4", parts: []wsPart{chops(1, text(hello), rawFrame(fin|0x10|opText, []byte(hello)), ping(""))}, want: echoes(hello), close: fail},
		abCase{id: "3.5", parts: []wsPart{oneChop(rawFrame(fin|0x50|opBinary, []byte{0, 1, 2}))}, close: fail},
		abCase{id: "3.6", parts: []wsPart{oneChop(rawFrame(fin|0x60|opPing, []byte(hello)))}, close: fail},
		abCase{id: "3.7", parts: []wsPart{oneChop(rawFrame(fin|0x70|opClose, []byte{0x03, 0xe8}))}, close: fail},
	)

	// 4 Opcodes: the reserved data (3-7) and control (11-15) opcodes.
	for i, op := range []byte{3, 4, 5, 6, 7} {
		add(reservedOpcode(fmt.Sprintf("4.1.%d", i+1), op, i))
	}
	for i, op := range []byte{11, 12, 13, 14, 15} {
		add(reservedOpcode(fmt.Sprintf("4.2.%d", i+1), op, i))
	}

	// 5 Fragmentation.
	f1, f2 := "fragment1", "fragment2"
	twoFrags := [][]byte{frag(opText, f1), last(opContinuation, f2)}
	withPing := [][]byte{frag(opText, f1), ping("pongme!"), last(opContinuation, f2)}
	nothingFin := [][]byte{last(opContinuation, f1), text(f2)}
	nothing := [][]byte{frag(opContinuation, f1), text(f2)}
	add(
		abCase{id: "5.1", parts: []wsPart{oneChop(frag(opPing, f1), last(opContinuation, f2))}, close: fail},
		abCase{id: "5.2", parts: []wsPart{oneChop(frag(opPong, f1), last(opContinuation, f2))}, close: fail},
		abCase{id: "5.3", parts: []wsPart{oneChop(twoFrags...)}, want: echoes(f1 + f2)},
		abCase{id: "5.4", parts: []wsPart{perFrame(twoFrags...)}, want: echoes(f1 + f2)},
		abCase{id: "5.5", parts: []wsPart{chops(1, twoFrags...)}, want: echoes(f1 + f2)},
		abCase{id: "5.6", parts: []wsPart{oneChop(withPing...)}, want: []wsEvent{ponged([]byte("pongme!")), echoed([]byte(f1 + f2))}, ordered: true},
		abCase{id: "5.7", parts: []wsPart{perFrame(withPing...)}, want: []wsEvent{ponged([]byte("pongme!")), echoed([]byte(f1 + f2))}, ordered: true},
		abCase{id: "5.8", parts: []wsPart{chops(1, withPing...)}, want: []wsEvent{ponged([]byte("pongme!")), echoed([]byte(f1 + f2))}, ordered: true},
		abCase{id: "5.9", parts: []wsPart{oneChop(nothingFin...)}, close: fail},
		abCase{id: "5.10", parts: []wsPart{perFrame(nothingFin...)}, close: fail},
		abCase{id: "5.11", parts: []wsPart{chops(1, nothingFin...)}, close: fail},
		abCase{id: "5.12", parts: []wsPart{oneChop(nothing...)}, close: fail},
		abCase{id: "5.13", parts: []wsPart{perFrame(nothing...)}, close: fail},
		abCase{id: "5.14", parts: []wsPart{chops(1, nothing...)}, close: fail},
		abCase{id: "5.15", parts: []wsPart{oneChop(frag(opText, f1), last(opContinuation, f2), frag(opContinuation, "fragment3"), last(opContinuation, "fragment4"))},
			want: echoes(f1 + f2), close: fail},
		abCase{id: "5.16", parts: []wsPart{oneChop(frag(opContinuation, f1), frag(opText, f2), last(opContinuation, "fragment3"),
			frag(opContinuation, f1), frag(opText, f2), last(opContinuation, "fragment3"))}, close: fail},
		abCase{id: "5.17", parts: []wsPart{oneChop(last(opContinuation, f1), frag(opText, f2), last(opContinuation, "fragment3"),
			last(opContinuation, f1), frag(opText, f2), last(opContinuation, "fragment3"))}, close: fail},
		abCase{id: "5.18", parts: []wsPart{oneChop(frag(opText, f1), last(opText, f2))}, close: fail},
	)
	five := []string{"fragment1", "fragment2", "fragment3", "fragment4", "fragment5"}
	fivePings := []wsEvent{ponged([]byte("pongme 1!")), ponged([]byte("pongme 2!")), echoed([]byte(strings.Join(five, "")))}
	first := [][]byte{frag(opText, five[0]), frag(opContinuation, five[1]), ping("pongme 1!")}
	second := [][]byte{frag(opContinuation, five[2]), frag(opContinuation, five[3]), ping("pongme 2!"), last(opContinuation, five[4])}
	add(
		abCase{id: "5.19", parts: []wsPart{oneChop(first...), oneChop(second...)}, want: fivePings, ordered: true},
		abCase{id: "5.20", parts: []wsPart{perFrame(first...), perFrame(second...)}, want: fivePings, ordered: true},
	)

	// 6 UTF-8 handling: text messages must be valid UTF-8, checked across
	// fragments, and an invalid one fails the connection with 1007 as
	// soon as the bytes received cannot begin valid UTF-8.
	add(
		abCase{id: "6.1.1", parts: []wsPart{oneChop(text(""))}, want: echoes("")},
		abCase{id: "6.1.2", parts: []wsPart{oneChop(frag(opText, ""), frag(opContinuation, ""), last(opContinuation, ""))}, want: echoes("")},
		abCase{id: "6.1.3", parts: []wsPart{oneChop(frag(opText, ""), frag(opContinuation, "middle frame payload"), last(opContinuation, ""))}, want: echoes("middle frame payload")},
	)
	valid := "Hello-\xc2\xb5@\xc3\x9f\xc3\xb6\xc3\xa4\xc3\xbc\xc3\xa0\xc3\xa1-UTF-8!!"
	kosme := "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"
	add(
		abCase{id: "6.2.1", parts: []wsPart{oneChop(text(valid))}, want: echoes(valid)},
		abCase{id: "6.2.2", parts: []wsPart{oneChop(frag(opText, valid[:7]), last(opContinuation, valid[7:]))}, want: echoes(valid)},
		abCase{id: "6.2.3", parts: []wsPart{oneChop(byteFragments(valid)...)}, want: echoes(valid)},
		abCase{id: "6.2.4", parts: []wsPart{oneChop(byteFragments(kosme)...)}, want: echoes(kosme)},
	)
	bad := kosme + "\xed\xa0\x80edited"
	add(
		abCase{id: "6.3.1", parts: []wsPart{oneChop(text(bad))}, close: []int{closeInvalidPayload}},
		abCase{id: "6.3.2", parts: []wsPart{oneChop(byteFragments(bad)...)}, close: []int{closeInvalidPayload}},
		// Fail fast: the close comes before the rest of the message is sent.
		abCase{id: "6.4.1", parts: []wsPart{oneChop(frag(opText, kosme)), oneChop(frag(opContinuation, "\xf4\x90\x80\x80")), oneChop(last(opContinuation, "edited"))},
			close: []int{closeInvalidPayload}, failFast: true},
		abCase{id: "6.4.2", parts: []wsPart{oneChop(frag(opText, kosme+"\xf4")), oneChop(frag(opContinuation, "\x90")), oneChop(last(opContinuation, "\x80\x80edited"))},
			close: []int{closeInvalidPayload}, failFast: true},
	)
	whole := text(kosme + "\xf4\x90\x80\x80edited")
	cut1 := len(whole) - len("\xf4\x90\x80\x80edited")
	add(
		abCase{id: "6.4.3", parts: []wsPart{{b: whole[:cut1]}, {b: whole[cut1 : cut1+4]}, {b: whole[cut1+4:]}},
			close: []int{closeInvalidPayload}, failFast: true},
		abCase{id: "6.4.4", parts: []wsPart{{b: whole[:cut1+1]}, {b: whole[cut1+1 : cut1+2]}, {b: whole[cut1+2:]}},
			close: []int{closeInvalidPayload}, failFast: true},
	)
	for _, v := range utf8Vectors() {
		c := abCase{id: v.id, parts: []wsPart{oneChop(text(v.s))}}
		if v.valid {
			c.want = echoes(v.s)
		} else {
			c.close = []int{closeInvalidPayload}
		}
		add(c)
	}

	// 7 Close handling: the server answers a close with its code (an
	// empty close with an empty one) and closes TCP; nothing after a
	// close is read; a broken close is a protocol error.
	normal := []int{closeNormal}
	add(
		abCase{id: "7.1.1", parts: []wsPart{oneChop(text("Hello World!"), closeWith(closeNormal, ""))}, want: echoes("Hello World!"), close: normal, clientCloses: true},
		abCase{id: "7.1.2", parts: []wsPart{oneChop(closeWith(closeNormal, ""), closeWith(closeNormal, ""))}, close: normal, clientCloses: true},
		abCase{id: "7.1.3", parts: []wsPart{oneChop(closeWith(closeNormal, ""), ping(""))}, close: normal, clientCloses: true},
		abCase{id: "7.1.4", parts: []wsPart{oneChop(closeWith(closeNormal, ""), text("Hello World!"))}, close: normal, clientCloses: true},
		abCase{id: "7.1.5", parts: []wsPart{oneChop(frag(opText, f1), closeWith(closeNormal, ""), last(opContinuation, f2))}, close: normal, clientCloses: true},
		abCase{id: "7.1.6", parts: []wsPart{oneChop(rawFrame(fin|opText, bytes.Repeat([]byte("BAsd7&jh23"), 256<<10/10/16)), text("Hello World!"), closeWith(closeNormal, ""), ping(""))},
			want: []wsEvent{echoed(bytes.Repeat([]byte("BAsd7&jh23"), 256<<10/10/16)), echoed([]byte("Hello World!"))}, close: normal, clientCloses: true},
		abCase{id: "7.3.1", parts: []wsPart{oneChop(rawFrame(fin|opClose, nil))}, close: []int{closeNoStatus, closeNormal}, clientCloses: true},
		abCase{id: "7.3.2", parts: []wsPart{oneChop(rawFrame(fin|opClose, []byte{0x03}))}, close: fail},
		abCase{id: "7.3.3", parts: []wsPart{oneChop(closeWith(closeNormal, ""))}, close: normal, clientCloses: true},
		abCase{id: "7.3.4", parts: []wsPart{oneChop(closeWith(closeNormal, "Hello World!"))}, close: normal, clientCloses: true},
		abCase{id: "7.3.5", parts: []wsPart{oneChop(closeWith(closeNormal, strings.Repeat("*", 123)))}, close: normal, clientCloses: true},
		abCase{id: "7.3.6", parts: []wsPart{oneChop(closeWith(closeNormal, strings.Repeat("*", 124)))}, close: fail},
		abCase{id: "7.5.1", parts: []wsPart{oneChop(closeWith(closeNormal, bad))}, close: []int{closeInvalidPayload}},
	)
	for i, code := range []int{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999} {
		add(abCase{id: fmt.Sprintf("7.7.%d", i+1), parts: []wsPart{oneChop(closeWith(code, ""))}, close: []int{code, closeNormal}, clientCloses: true})
	}
	for i, code := range []int{0, 999, 1004, 1005, 1006, 1016, 1100, 2000, 2999} {
		add(abCase{id: fmt.Sprintf("7.9.%d", i+1), parts: []wsPart{oneChop(closeWith(code, ""))}, close: fail})
	}
	add(
		abCase{id: "7.13.1", parts: []wsPart{oneChop(closeWith(5000, ""))}, close: fail},
		abCase{id: "7.13.2", parts: []wsPart{oneChop(closeWith(65535, ""))}, close: fail},
	)

	// 9 Limits, scaled down: large messages whole, fragmented and sent in
	// chops, and many messages one after the other.
	for i, n := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20, 16 << 20} {
		n /= 16
		p := bytes.Repeat([]byte("BAsd7&jh23"), n/10+1)[:n]
		add(abCase{id: fmt.Sprintf("9.1.%d", i+1), parts: []wsPart{oneChop(rawFrame(fin|opText, p))}, want: []wsEvent{echoed(p)}})
		b := bytes.Repeat([]byte{0xfe, 0x00}, n/2)
		add(abCase{id: fmt.Sprintf("9.2.%d", i+1), parts: []wsPart{oneChop(rawFrame(fin|opBinary, b))}, want: []wsEvent{echoed(b)}})
	}
	msg := bytes.Repeat([]byte("*"), 4<<20/16)
	for i, f := range []int{64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20} {
		f /= 16
		add(abCase{id: fmt.Sprintf("9.3.%d", i+1), parts: []wsPart{oneChop(fragmented(opText, msg, f)...)}, want: []wsEvent{echoed(msg)}})
		add(abCase{id: fmt.Sprintf("9.4.%d", i+1), parts: []wsPart{oneChop(fragmented(opBinary, msg, f)...)}, want: []wsEvent{echoed(msg)}})
	}
	chopped := bytes.Repeat([]byte("*"), 1<<20/16)
	for i, n := range []int{64, 128, 256, 512, 1024, 2048} {
		add(abCase{id: fmt.Sprintf("9.5.%d", i+1), parts: []wsPart{chops(n, rawFrame(fin|opText, chopped))}, want: []wsEvent{echoed(chopped)}})
		add(abCase{id: fmt.Sprintf("9.6.%d", i+1), parts: []wsPart{chops(n, rawFrame(fin|opBinary, chopped))}, want: []wsEvent{echoed(chopped)}})
	}
	for i, n := range []int{0, 16, 64, 256, 1024, 4096} {
		add(roundTrips(fmt.Sprintf("9.7.%d", i+1), opText, n), roundTrips(fmt.Sprintf("9.8.%d", i+1), opBinary, n))
	}

	// Beyond Autobahn: the read limit. A message over it is refused with
	// 1009 as soon as a frame header says so, whole or fragmented; a
	// frame length with its top bit set is over every limit.
	over := bytes.Repeat([]byte("x"), conformanceLimit+1)
	overFrame := rawFrame(fin|opText, over)
	add(
		abCase{id: "limit.1", parts: []wsPart{{b: overFrame[:14]}}, close: []int{CloseTooLarge}},
		abCase{id: "limit.2", parts: []wsPart{oneChop(rawFrame(opText, over[:conformanceLimit/2]), rawFrame(fin|opContinuation, over[conformanceLimit/2:]))}, close: []int{CloseTooLarge}},
		abCase{id: "limit.3", parts: []wsPart{{b: []byte{fin | opBinary, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4}}}, close: []int{CloseTooLarge}},
		abCase{id: "limit.4", parts: []wsPart{oneChop(text("under"), rawFrame(fin|opText, over))}, want: echoes("under"), close: []int{CloseTooLarge}},
		// RFC 6455 5.1: a server fails a connection whose client does not
		// mask its frames.
		abCase{id: "mask.1", parts: []wsPart{oneChop(rawFrameMask(fin|opText, []byte(hello), false))}, close: fail},
		abCase{id: "mask.2", parts: []wsPart{oneChop(text(hello), rawFrameMask(fin|opPing, nil, false))}, want: echoes(hello), close: fail},
	)
	return cs
}

// reservedOpcode is case 4.x.i: the opcode alone (i 0), with a payload
// (1), or after a valid text message and before a ping (2-4).
func reservedOpcode(id string, op byte, i int) abCase {
	switch i {
	case 0:
		return abCase{id: id, parts: []wsPart{oneChop(rawFrame(fin|op, nil))}, close: []int{closeProtocolError}}
	case 1:
		return abCase{id: id, parts: []wsPart{oneChop(rawFrame(fin|op, []byte("reserved opcode payload")))}, close: []int{closeProtocolError}}
	}
	var p []byte
	if i > 2 {
		p = []byte("reserved opcode payload")
	}
	return abCase{id: id, parts: []wsPart{oneChop(text("Hello, world!"), rawFrame(fin|op, p), ping(""))},
		want: echoes("Hello, world!"), close: []int{closeProtocolError}}
}

// byteFragments is a text message in fragments of one byte.
func byteFragments(s string) [][]byte {
	var fs [][]byte
	for i := range len(s) {
		op := byte(opContinuation)
		if i == 0 {
			op = opText
		}
		if i == len(s)-1 {
			op |= fin
		}
		fs = append(fs, rawFrame(op, []byte{s[i]}))
	}
	return fs
}

// fragmented cuts msg into frames of n bytes.
func fragmented(op byte, msg []byte, n int) [][]byte {
	var fs [][]byte
	for off := 0; off < len(msg); off += n {
		end := min(off+n, len(msg))
		b0 := byte(opContinuation)
		if off == 0 {
			b0 = op
		}
		if end == len(msg) {
			b0 |= fin
		}
		fs = append(fs, rawFrame(b0, msg[off:end]))
	}
	return fs
}

// roundTrips is case 9.7.x / 9.8.x: messages of n bytes, each sent once
// the echo of the one before came back.
func roundTrips(id string, op byte, n int) abCase {
	p := bytes.Repeat([]byte("*"), n)
	c := abCase{id: id}
	for range 1000 / 4 {
		c.parts = append(c.parts, wsPart{b: rawFrame(fin|op, p), chop: roundTrip})
		c.want = append(c.want, echoed(p))
	}
	return c
}

// roundTrip marks a part sent only after the echo of the part before.
const roundTrip = -1

type utf8Vector struct {
	id    string
	valid bool
	s     string
}

// utf8Vectors are cases 6.5-6.23: Markus Kuhn's UTF-8 decoder test
// sequences, as Autobahn numbers them, each one text message.
func utf8Vectors() []utf8Vector {
	kosme := "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"
	groups := [][]utf8Vector{
		// 6.5 valid sequences
		{{"", true, "hello\x24world"}, {"", true, "hello\xc2\xa2world"}, {"", true, "hello\xe2\x82\xacworld"}, {"", true, "hello\xf0\xa4\xad\xa2world"}, {"", true, kosme}},
		// 6.6 every prefix of a valid string of multi-byte code points
		nil,
		// 6.7 first sequence of each length
		{{"", true, "\x00"}, {"", true, "\xc2\x80"}, {"", true, "\xe0\xa0\x80"}, {"", true, "\xf0\x90\x80\x80"}},
		// 6.8 first sequence of length 5 and 6 (beyond U+10FFFF)
		{{"", false, "\xf8\x88\x80\x80\x80"}, {"", false, "\xfc\x84\x80\x80\x80\x80"}},
		// 6.9 last sequence of each length
		{{"", true, "\x7f"}, {"", true, "\xdf\xbf"}, {"", true, "\xef\xbf\xbf"}, {"", true, "\xf4\x8f\xbf\xbf"}},
		// 6.10 last sequence of length 4, 5, 6 (beyond U+10FFFF)
		{{"", false, "\xf7\xbf\xbf\xbf"}, {"", false, "\xfb\xbf\xbf\xbf\xbf"}, {"", false, "\xfd\xbf\xbf\xbf\xbf\xbf"}},
		// 6.11 other boundaries
		{{"", true, "\xed\x9f\xbf"}, {"", true, "\xee\x80\x80"}, {"", true, "\xef\xbf\xbd"}, {"", true, "\xf4\x8f\xbf\xbf"}, {"", false, "\xf4\x90\x80\x80"}},
		// 6.12 unexpected continuation bytes
		{{"", false, "\x80"}, {"", false, "\xbf"}, {"", false, "\x80\xbf"}, {"", false, "\x80\xbf\x80"}, {"", false, "\x80\xbf\x80\xbf"},
			{"", false, "\x80\xbf\x80\xbf\x80"}, {"", false, "\x80\xbf\x80\xbf\x80\xbf"}, {"", false, byteRange(0x80, 0xbf, "")}},
		// 6.13 lonely start bytes, each followed by a space
		{{"", false, byteRange(0xc0, 0xdf, " ")}, {"", false, byteRange(0xe0, 0xef, " ")}, {"", false, byteRange(0xf0, 0xf7, " ")},
			{"", false, byteRange(0xf8, 0xfb, " ")}, {"", false, byteRange(0xfc, 0xfd, " ")}},
		// 6.14 sequences missing their last continuation byte
		nil,
		// 6.15 those concatenated
		nil,
		// 6.16 impossible bytes
		{{"", false, "\xfe"}, {"", false, "\xff"}, {"", false, "\xfe\xfe\xff\xff"}},
		// 6.17 overlong ASCII
		{{"", false, "\xc0\xaf"}, {"", false, "\xe0\x80\xaf"}, {"", false, "\xf0\x80\x80\xaf"}, {"", false, "\xf8\x80\x80\x80\xaf"}, {"", false, "\xfc\x80\x80\x80\x80\xaf"}},
		// 6.18 maximum overlong sequences
		{{"", false, "\xc1\xbf"}, {"", false, "\xe0\x9f\xbf"}, {"", false, "\xf0\x8f\xbf\xbf"}, {"", false, "\xf8\x87\xbf\xbf\xbf"}, {"", false, "\xfc\x83\xbf\xbf\xbf\xbf"}},
		// 6.19 overlong NUL
		{{"", false, "\xc0\x80"}, {"", false, "\xe0\x80\x80"}, {"", false, "\xf0\x80\x80\x80"}, {"", false, "\xf8\x80\x80\x80\x80"}, {"", false, "\xfc\x80\x80\x80\x80\x80"}},
		// 6.20 lone UTF-16 surrogates
		{{"", false, "\xed\xa0\x80"}, {"", false, "\xed\xad\xbf"}, {"", false, "\xed\xae\x80"}, {"", false, "\xed\xaf\xbf"},
			{"", false, "\xed\xb0\x80"}, {"", false, "\xed\xbe\x80"}, {"", false, "\xed\xbf\xbf"}},
		// 6.21 paired UTF-16 surrogates
		nil,
		// 6.22 non-characters: valid UTF-8
		nil,
		// 6.23 Unicode specials
		{{"", true, "\xef\xbf\xb9"}, {"", true, "\xef\xbf\xba"}, {"", true, "\xef\xbf\xbb"}, {"", true, "\xef\xbf\xbc"},
			{"", true, "\xef\xbf\xbd"}, {"", true, "\xef\xbf\xbe"}, {"", true, "\xef\xbf\xbf"}},
	}
	for i := 1; i <= len(kosme); i++ {
		// Whole code points end after bytes 2, 5, 7, 9 and 11.
		groups[1] = append(groups[1], utf8Vector{"", slices.Contains([]int{2, 5, 7, 9, 11}, i), kosme[:i]})
	}
	missing := []string{"\xc0", "\xe0\x80", "\xf0\x80\x80", "\xf8\x80\x80\x80", "\xfc\x80\x80\x80\x80",
		"\xdf", "\xef\xbf", "\xf7\xbf\xbf", "\xfb\xbf\xbf\xbf", "\xfd\xbf\xbf\xbf\xbf"}
	for _, s := range missing {
		groups[9] = append(groups[9], utf8Vector{"", false, s})
	}
	groups[10] = []utf8Vector{{"", false, strings.Join(missing, "")}}
	for _, hi := range []string{"\xed\xa0\x80", "\xed\xad\xbf", "\xed\xae\x80", "\xed\xaf\xbf"} {
		for _, lo := range []string{"\xed\xb0\x80", "\xed\xbf\xbf"} {
			groups[16] = append(groups[16], utf8Vector{"", false, hi + lo})
		}
	}
	groups[17] = []utf8Vector{{"", true, "\xef\xbf\xbe"}, {"", true, "\xef\xbf\xbf"}}
	for _, z1 := range []string{"\xf0", "\xf1", "\xf2", "\xf3", "\xf4"} {
		for _, z2 := range []string{"\x8f", "\x9f", "\xaf", "\xbf"} {
			if z1 == "\xf4" && z2 != "\x8f" {
				continue // beyond U+10FFFF
			}
			for _, z3 := range []string{"\xbe", "\xbf"} {
				s := z1 + z2 + "\xbf" + z3
				if z1 == "\xf0" && z2 == "\x8f" {
					continue // overlong
				}
				groups[17] = append(groups[17], utf8Vector{"", true, s})
			}
		}
	}
	var vs []utf8Vector
	for g, group := range groups {
		for j, v := range group {
			v.id = fmt.Sprintf("6.%d.%d", g+5, j+1)
			vs = append(vs, v)
		}
	}
	return vs
}

// byteRange is the bytes lo..hi-1, each followed by sep.
func byteRange(lo, hi int, sep string) string {
	var b strings.Builder
	for c := lo; c < hi; c++ {
		b.WriteByte(byte(c))
		b.WriteString(sep)
	}
	return b.String()
}

// conformanceServer serves /ws: every message echoed in a text frame.
func conformanceServer(t *testing.T, park bool) string {
	return serving(t, func(c *config.Config) {
		c.Realtime.ParkIdleReaders = park
		c.Realtime.MaxMessageBytes = conformanceLimit
		c.Realtime.SendQueue = 4096
		c.HTTP.MaxConnectionsPerIP = 0
	}, func(s *Server) {
		s.Echo.GET("/ws", func(c echo.Context) error {
			conn, err := s.Sockets.Upgrade(c, "conformance")
			if err != nil {
				return err
			}
			conn.Serve(func(msg []byte) { conn.Send(msg) }, nil)
			return nil
		})
	})
}

func TestConformance(t *testing.T) {
	t.Parallel()
	cases := conformanceCases()
	seen := map[string]bool{}
	for _, c := range cases {
		require.False(t, seen[c.id], "case %s twice", c.id)
		seen[c.id] = true
	}
	eachReader(t, func(t *testing.T, park bool) {
		addr := conformanceServer(t, park)
		// The cases run together, not as parallel subtests: those run
		// GOMAXPROCS at a time, and a case spends most of its time waiting
		// (for the second the server gives a peer to answer its close).
		errs := make([]error, len(cases))
		var wg sync.WaitGroup
		slots := make(chan struct{}, 32)
		for i, c := range cases {
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				errs[i] = runCase(addr, c)
			})
		}
		wg.Wait()
		for i, c := range cases {
			t.Run(c.id, func(t *testing.T) {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
			})
		}
	})
}

// A text frame with invalid UTF-8 is refused with 1007 whichever way it
// arrives (named here so a run of the suite's one line says it).
func TestInvalidUTF8TextGetsClose1007(t *testing.T) {
	t.Parallel()
	eachReader(t, func(t *testing.T, park bool) {
		addr := conformanceServer(t, park)
		for _, c := range []abCase{
			{id: "one frame", parts: []wsPart{oneChop(text("ok \xff"))}},
			{id: "across fragments", parts: []wsPart{oneChop(frag(opText, "ok \xe2\x82"), last(opContinuation, "\x28"))}},
			{id: "cut short at the end", parts: []wsPart{oneChop(frag(opText, "ok"), last(opContinuation, "\xe2\x82"))}},
		} {
			c.close = []int{closeInvalidPayload}
			require.NoError(t, runCase(addr, c))
		}
	})
}

type caseClient struct {
	nc *net.TCPConn
	br *bufio.Reader
}

func (c *caseClient) write(p wsPart) error {
	var writes [][]byte
	switch {
	case p.perFrom != nil:
		writes = p.perFrom
	case p.chop > 0:
		for b := p.b; len(b) > 0; {
			n := min(p.chop, len(b))
			writes = append(writes, b[:n])
			b = b[n:]
		}
	default:
		writes = [][]byte{p.b}
	}
	for _, w := range writes {
		if _, err := c.nc.Write(w); err != nil {
			return err
		}
	}
	return nil
}

// read returns the next frame from the server other than a ping.
func (c *caseClient) read() (wsEvent, error) {
	if err := c.nc.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return wsEvent{}, err
	}
	for {
		var h [2]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return wsEvent{}, err
		}
		if h[0]&0x70 != 0 || h[1]&0x80 != 0 || h[0]&0x80 == 0 {
			return wsEvent{}, fmt.Errorf("server frame %#x %#x: RSV, mask or a fragment", h[0], h[1])
		}
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var e [2]byte
			if _, err := io.ReadFull(c.br, e[:]); err != nil {
				return wsEvent{}, err
			}
			n = uint64(binary.BigEndian.Uint16(e[:]))
		case 127:
			var e [8]byte
			if _, err := io.ReadFull(c.br, e[:]); err != nil {
				return wsEvent{}, err
			}
			n = binary.BigEndian.Uint64(e[:])
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(c.br, p); err != nil {
			return wsEvent{}, err
		}
		if op := h[0] & 0x0f; op != opPing {
			return wsEvent{op: op, p: p}, nil
		}
	}
}

func closeCodeOf(p []byte) int {
	if len(p) < 2 {
		return closeNoStatus
	}
	return int(binary.BigEndian.Uint16(p))
}

// expectEnd: the server closes the TCP connection (within the second of
// grace it gives a peer that does not answer its close, and some slack).
func (c *caseClient) expectEnd() error {
	if err := c.nc.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	_, err := c.br.ReadByte()
	var ne *net.OpError
	switch {
	case errors.Is(err, io.EOF):
	case errors.As(err, &ne) && !ne.Timeout(): // reset
	default:
		return fmt.Errorf("the server did not close the TCP connection: %v", err)
	}
	return nil
}

// runCase runs one case on a new connection to addr.
func runCase(addr string, c abCase) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	tc := nc.(*net.TCPConn)
	if err := tc.SetNoDelay(true); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(nc, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", addr); err != nil {
		return err
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return fmt.Errorf("handshake: %s", resp.Status)
	}
	cl := &caseClient{nc: tc, br: br}

	var got []wsEvent
	closeCode := -1
	// readUntil reads until want events came, or the server's close.
	readUntil := func(want int) error {
		for closeCode < 0 && len(got) < want {
			ev, err := cl.read()
			if err != nil {
				return fmt.Errorf("reading after %v: %w", got, err)
			}
			if ev.op == opClose {
				closeCode = closeCodeOf(ev.p)
				return nil
			}
			got = append(got, ev)
		}
		return nil
	}
	sent := len(c.parts)
	if c.failFast {
		sent--
	}
	for i, p := range c.parts[:sent] {
		if p.chop == roundTrip {
			if err := cl.write(wsPart{b: p.b}); err != nil {
				return err
			}
			if err := readUntil(i + 1); err != nil {
				return err
			}
			continue
		}
		if err := cl.write(p); err != nil {
			return err
		}
		if i < sent-1 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if c.close == nil {
		if err := readUntil(len(c.want)); err != nil {
			return err
		}
		if closeCode >= 0 {
			return fmt.Errorf("the server closed with %d after %v", closeCode, got)
		}
		if err := compareEvents(c, got); err != nil {
			return err
		}
		if err := cl.write(wsPart{b: closeWith(closeNormal, "")}); err != nil {
			return err
		}
		ev, err := cl.read()
		if err != nil {
			return fmt.Errorf("waiting for the answer to a close: %w", err)
		}
		if ev.op != opClose || closeCodeOf(ev.p) != closeNormal {
			return fmt.Errorf("%v after the last expected frame, not the answer to a close", ev)
		}
		return cl.expectEnd()
	}
	if err := readUntil(1 << 30); err != nil {
		return err
	}
	if err := compareEvents(c, got); err != nil {
		return err
	}
	if !slices.Contains(c.close, closeCode) {
		return fmt.Errorf("closed with %d, want one of %v", closeCode, c.close)
	}
	if !c.clientCloses {
		// Answer the server's close, as a client does.
		_, _ = cl.nc.Write(closeWith(closeCode, ""))
	}
	return cl.expectEnd()
}

// compareEvents checks the echoes and pongs, in order per kind or, for an
// ordered case, in order altogether.
func compareEvents(c abCase, got []wsEvent) error {
	same := func(want, got []wsEvent) bool {
		return slices.EqualFunc(want, got, func(a, b wsEvent) bool { return a.op == b.op && bytes.Equal(a.p, b.p) })
	}
	kind := func(evs []wsEvent, op byte) []wsEvent {
		return slices.DeleteFunc(slices.Clone(evs), func(e wsEvent) bool { return e.op != op })
	}
	ok := same(c.want, got)
	if !c.ordered {
		ok = len(got) == len(c.want) && same(kind(c.want, opText), kind(got, opText)) && same(kind(c.want, opPong), kind(got, opPong))
	}
	if !ok {
		return fmt.Errorf("want %v, got %v", c.want, got)
	}
	return nil
}
