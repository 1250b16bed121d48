package socket

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// served is a server whose handler reads each WebSocket with Serve and
// echoes what it reads.
type served struct {
	srv   *Server
	addr  string
	conns chan *Conn
	ends  chan *Conn
}

func setupServe(t testing.TB, mutate func(*config.Config)) served {
	t.Helper()
	cfg := config.Default()
	cfg.Realtime.SendQueue = 64
	cfg.Realtime.MaxMessageBytes = 64
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := NewServer(cfg, prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	b := served{srv: s, conns: make(chan *Conn, 16), ends: make(chan *Conn, 16)}
	s.Echo.GET("/ws", func(c echo.Context) error {
		conn, err := s.Sockets.Upgrade(c, "test")
		if err != nil {
			return err
		}
		conn.Serve(func(msg []byte) { conn.Send(msg) }, func() { b.ends <- conn })
		b.conns <- conn
		return nil
	})
	ts := httptest.NewServer(s.Echo)
	t.Cleanup(ts.Close)
	b.addr = strings.TrimPrefix(ts.URL, "http://")
	return b
}

// rawClient speaks WebSocket by hand over TCP, so a test decides how the
// bytes of its frames are cut into segments.
type rawClient struct {
	t  testing.TB
	nc *net.TCPConn
	br *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	tc, br := sendHandshake(t, addr, "/ws")
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	return &rawClient{t: t, nc: tc, br: br}
}

// sendHandshake dials addr and sends a WebSocket upgrade request for path,
// leaving its answer to be read.
func sendHandshake(t testing.TB, addr, path string) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	tc := nc.(*net.TCPConn)
	require.NoError(t, tc.SetNoDelay(true))
	_, err = fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path, addr)
	require.NoError(t, err)
	return tc, bufio.NewReader(nc)
}

// frame is a masked client frame.
func clientFrame(op byte, fin bool, p []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	b := []byte{b0}
	switch n := len(p); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xffff:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	key := []byte{0x12, 0x34, 0x56, 0x78}
	b = append(b, key...)
	start := len(b)
	b = append(b, p...)
	for i := range p {
		b[start+i] ^= key[i&3]
	}
	return b
}

func (c *rawClient) write(b []byte) {
	_, err := c.nc.Write(b)
	require.NoError(c.t, err)
}

// next reads the next server frame, skipping pings unless asked for.
func (c *rawClient) next(wantPings bool) (op byte, payload []byte) {
	c.t.Helper()
	require.NoError(c.t, c.nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	for {
		h := make([]byte, 2)
		_, err := io.ReadFull(c.br, h)
		require.NoError(c.t, err)
		require.Zero(c.t, h[1]&0x80, "server frames are not masked")
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			e := make([]byte, 2)
			_, err = io.ReadFull(c.br, e)
			n = uint64(binary.BigEndian.Uint16(e))
		case 127:
			e := make([]byte, 8)
			_, err = io.ReadFull(c.br, e)
			n = binary.BigEndian.Uint64(e)
		}
		require.NoError(c.t, err)
		payload = make([]byte, n)
		_, err = io.ReadFull(c.br, payload)
		require.NoError(c.t, err)
		if op = h[0] & 0x0f; op != opPing || wantPings {
			return op, payload
		}
	}
}

func (c *rawClient) expectText(want string) {
	c.t.Helper()
	op, p := c.next(false)
	require.Equal(c.t, byte(opText), op)
	require.Equal(c.t, want, string(p))
}

func (c *rawClient) expectClose(code int) {
	c.t.Helper()
	op, p := c.next(false)
	require.Equal(c.t, byte(opClose), op, "payload %q", p)
	require.GreaterOrEqual(c.t, len(p), 2)
	require.Equal(c.t, code, int(binary.BigEndian.Uint16(p)), "reason %q", p[2:])
}

// open dials the server and returns the client and the server's side.
func (b served) open(t testing.TB) (*rawClient, *Conn) {
	t.Helper()
	cl := dialRaw(t, b.addr)
	return cl, <-b.conns
}

// waitParked waits until c's reader has parked.
func waitParked(t testing.TB, c *Conn) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() bool { return isParked(c) }, "parked")
}

func isParked(c *Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readerState == readerParked
}

func ended(t *testing.T, b served, want *Conn) {
	t.Helper()
	select {
	case c := <-b.ends:
		require.Same(t, want, c)
	case <-time.After(10 * time.Second):
		t.Fatal("the connection's end was not reported")
	}
}

// Both readers, parked and goroutine, must behave the same.
func eachReader(t *testing.T, test func(t *testing.T, park bool)) {
	for _, park := range []bool{true, false} {
		t.Run(fmt.Sprintf("park=%v", park), func(t *testing.T) {
			t.Parallel()
			if park && runtime.GOOS != "linux" {
				t.Skip("idle readers park on Linux only")
			}
			test(t, park)
		})
	}
}

func parking(park bool, more ...func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		c.Realtime.ParkIdleReaders = park
		for _, m := range more {
			m(c)
		}
	}
}

// A frame whose bytes trickle in, with pauses long enough for the reader
// to park between them, is completed from where the last wake stopped.
func TestParkedReaderCompletesAFrameSplitAcrossSegments(t *testing.T) {
	t.Parallel()
	eachReader(t, func(t *testing.T, park bool) {
		b := setupServe(t, parking(park, func(c *config.Config) { c.Realtime.MaxMessageBytes = 1 << 20 }))
		cl, conn := b.open(t)
		require.Equal(t, park, conn.raw != nil)
		for _, size := range []int{5, 125, 126, 3000, 70_000} {
			msg := strings.Repeat("abcdefghij", size/10+1)[:size]
			f := clientFrame(opText, true, []byte(msg))
			// Header byte by byte, then the payload in a few pieces.
			cuts := []int{1, 2, 3, 4, 5, 6, 7, 8, len(f) / 2, len(f)}
			prev := 0
			for _, cut := range cuts {
				if cut > len(f) || cut <= prev {
					continue
				}
				cl.write(f[prev:cut])
				prev = cut
				if park {
					testenv.Eventually(t, 10*time.Second, func() bool { return isParked(conn) }, "reader parks between segments")
				} else {
					time.Sleep(2 * time.Millisecond)
				}
			}
			cl.expectText(msg)
		}
	})
}

// Many frames in one segment are all delivered, in order, and the reader
// parks again afterwards and wakes for the next batch.
func TestParkedReaderDeliversEveryFrameOfOneSegment(t *testing.T) {
	t.Parallel()
	eachReader(t, func(t *testing.T, park bool) {
		b := setupServe(t, parking(park))
		cl, conn := b.open(t)
		for round := 0; round < 3; round++ {
			var batch []byte
			for i := 0; i < 50; i++ {
				if i%10 == 3 {
					batch = append(batch, clientFrame(opPing, true, []byte("p"))...)
				}
				if i%10 == 7 {
					// A fragmented message in the middle of the batch.
					batch = append(batch, clientFrame(opText, false, []byte("frag-"))...)
					batch = append(batch, clientFrame(opContinuation, false, []byte(fmt.Sprint(round)))...)
					batch = append(batch, clientFrame(opContinuation, true, []byte(fmt.Sprintf("-%d", i)))...)
					continue
				}
				batch = append(batch, clientFrame(opText, true, []byte(fmt.Sprintf("m%d-%d", round, i)))...)
			}
			cl.write(batch)
			// Pongs go out from the reader at once, echoes through the send
			// queue: only the echoes' order is fixed.
			var want, got []string
			for i := 0; i < 50; i++ {
				if i%10 == 7 {
					want = append(want, fmt.Sprintf("frag-%d-%d", round, i))
				} else {
					want = append(want, fmt.Sprintf("m%d-%d", round, i))
				}
			}
			pongs := 0
			for len(got) < len(want) || pongs < 5 {
				switch op, p := cl.next(true); op {
				case opPong:
					require.Equal(t, "p", string(p))
					pongs++
				case opText:
					got = append(got, string(p))
				default:
					t.Fatalf("unexpected opcode %d", op)
				}
			}
			require.Equal(t, want, got)
			require.Equal(t, 5, pongs)
			if park {
				testenv.Eventually(t, 10*time.Second, func() bool { return isParked(conn) }, "reader parks after the batch")
			}
		}
	})
}

// The server closing a parked connection sends its close frame, and the
// end is reported once the peer answers, or after the grace without one.
func TestCloseWhileParked(t *testing.T) {
	t.Parallel()
	eachReader(t, func(t *testing.T, park bool) {
		b := setupServe(t, parking(park))
		// The peer answers the close: the end comes with its answer.
		cl, conn := b.open(t)
		if park {
			waitParked(t, conn)
		}
		conn.Close(ClosePolicy, "bye")
		cl.expectClose(ClosePolicy)
		cl.write(clientFrame(opClose, true, closePayload(closeNormal, "")))
		ended(t, b, conn)
		_, err := cl.br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "the socket is closed after the end")

		// The peer stays silent: the socket closes after the grace.
		cl2, conn2 := b.open(t)
		conn2.Close(CloseServiceRestart, reconnectJSON(time.Second))
		cl2.expectClose(CloseServiceRestart)
		ended(t, b, conn2)
		require.Zero(t, b.srv.Sockets.Live())
	})
}

// A peer that resets its connection while parked ends it, and it leaves
// the epoll set.
func TestPeerResetWhileParked(t *testing.T) {
	t.Parallel()
	eachReader(t, func(t *testing.T, park bool) {
		b := setupServe(t, parking(park))
		cl, conn := b.open(t)
		cl.write(clientFrame(opText, true, []byte("hi")))
		cl.expectText("hi")
		if park {
			waitParked(t, conn)
		}
		require.NoError(t, cl.nc.SetLinger(0)) // close sends RST
		require.NoError(t, cl.nc.Close())
		ended(t, b, conn)
		require.Zero(t, b.srv.Sockets.Live())
		if park {
			b.srv.Sockets.poller.mu.Lock()
			for _, c := range b.srv.Sockets.poller.conns {
				require.NotSame(t, conn, c, "a closed connection stays in the epoll set")
			}
			b.srv.Sockets.poller.mu.Unlock()
		}
	})
}

func fdOf(t *testing.T, c *Conn) int32 {
	var fd int32
	require.NoError(t, c.raw.Control(func(f uintptr) { fd = int32(f) }))
	return fd
}

// A late event of a closed connection whose descriptor number went to a
// new connection does not wake the new one.
func TestLateEventOfAReusedDescriptorIsIgnored(t *testing.T) {
	// Not parallel: descriptor numbers are reused lowest first, and no
	// other test opens sockets meanwhile.
	if runtime.GOOS != "linux" {
		t.Skip("idle readers park on Linux only")
	}
	b := setupServe(t, parking(true))
	p := b.srv.Sockets.poller
	cl, old := b.open(t)
	fd, seq := fdOf(t, old), old.pollSeq
	old.closeNow(closeAbnormal, "")
	ended(t, b, old)
	// The client's socket is the lower number: closing it too lets the
	// next connection's two sockets take the same two numbers.
	_ = cl.nc.Close()
	var fresh *Conn
	for i := 0; i < 20 && fresh == nil; i++ {
		cl, c := b.open(t)
		if fdOf(t, c) == fd {
			fresh = c
			break
		}
		c.closeNow(closeAbnormal, "")
		ended(t, b, c)
		_ = cl.nc.Close()
	}
	require.NotNil(t, fresh, "no new connection got the closed one's descriptor number")
	waitParked(t, fresh)
	p.dispatch(fd, seq) // the old connection's event, delivered late
	require.True(t, isParked(fresh), "the old registration's event woke the new connection")
	p.dispatch(fd, fresh.pollSeq)
	testenv.Eventually(t, 10*time.Second, func() bool { return isParked(fresh) }, "a spurious wake of its own parks it again")
}

// A peer that never answers pings is dropped while its reader is parked;
// one that answers stays.
func TestSilentPeerIsDroppedWhileParked(t *testing.T) {
	t.Parallel()
	eachReader(t, func(t *testing.T, park bool) {
		b := setupServe(t, parking(park, func(c *config.Config) {
			// A pong timeout a loaded machine cannot miss by stalling the
			// answering peer's goroutine (300 ms was missed at load 20).
			c.Realtime.PingInterval = 100 * time.Millisecond
			c.Realtime.PongTimeout = 2 * time.Second
		}))
		dialRaw(t, b.addr) // never reads or answers
		silent := <-b.conns
		alive, aliveConn := b.open(t)
		stop := make(chan struct{})
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			for {
				select {
				case <-stop:
					return
				default:
				}
				op, p := alive.next(true)
				if op == opPing {
					alive.write(clientFrame(opPong, true, p))
				}
			}
		}()
		ended(t, b, silent)
		// The answering peer outlives two more pong timeouts.
		time.Sleep(4 * time.Second)
		require.Equal(t, 1, b.srv.Sockets.Live())
		select {
		case <-aliveConn.Done():
			t.Fatal("a peer answering pings was dropped")
		default:
		}
		close(stop)
		aliveConn.closeNow(closeNormal, "")
		<-answered
	})
}

// Frames over the read limit are refused with 1009 as soon as their header
// arrives, whole or fragmented; a broken frame gets 1002.
func TestReadLimitAndProtocolErrorsWhileParked(t *testing.T) {
	t.Parallel()
	eachReader(t, func(t *testing.T, park bool) {
		b := setupServe(t, parking(park))
		cl, conn := b.open(t)
		if park {
			waitParked(t, conn)
		}
		// Only the header of a 65-byte frame: the limit is 64.
		cl.write(clientFrame(opText, true, make([]byte, 65))[:6])
		cl.expectClose(CloseTooLarge)
		ended(t, b, conn)

		cl, conn = b.open(t)
		conn.SetReadLimit(100)
		cl.write(clientFrame(opText, false, make([]byte, 60)))
		cl.write(clientFrame(opContinuation, true, make([]byte, 60)))
		cl.expectClose(CloseTooLarge)
		ended(t, b, conn)

		cl, conn = b.open(t)
		cl.write([]byte{0x81, 0x02, 'h', 'i'}) // not masked
		cl.expectClose(closeProtocolError)
		ended(t, b, conn)
	})
}

// Draining closes parked connections with 1012 and their reconnect delay.
func TestDrainClosesParkedConnections(t *testing.T) {
	t.Parallel()
	b := setupServe(t, parking(true))
	var clients []*rawClient
	var conns []*Conn
	for i := 0; i < 5; i++ {
		clients = append(clients, dialRaw(t, b.addr))
		conns = append(conns, <-b.conns)
	}
	for _, c := range conns {
		waitParked(t, c)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- b.srv.Sockets.CloseAll(ctx)
	}()
	for _, cl := range clients {
		op, p := cl.next(false)
		require.Equal(t, byte(opClose), op)
		require.Equal(t, CloseServiceRestart, int(binary.BigEndian.Uint16(p)))
		require.Contains(t, string(p[2:]), "reconnectMs")
		cl.write(clientFrame(opClose, true, p[:2]))
	}
	require.NoError(t, <-done)
	for range conns {
		<-b.ends
	}
}

// BenchmarkEchoRoundTrip is one small message to the server and its echo
// back, read by a parked reader (an epoll wake and a goroutine per
// message) or by a goroutine blocked in Read.
func BenchmarkEchoRoundTrip(b *testing.B) {
	for _, park := range []bool{true, false} {
		b.Run(fmt.Sprintf("park=%v", park), func(b *testing.B) {
			s := setupServe(b, parking(park))
			cl := dialRaw(b, s.addr)
			<-s.conns
			f := clientFrame(opText, true, []byte(`{"v":1,"event":"session:ping"}`))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cl.write(f)
				if op, _ := cl.next(false); op != opText {
					b.Fatalf("opcode %d", op)
				}
			}
		})
	}
}
