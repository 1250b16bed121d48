package web

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/wire"
)

// echoSocket upgrades and echoes every message; ahead reports whether the
// handshake was served ahead of net/http.
func echoSocket(s *Server, ahead chan<- bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		_, fast := c.Response().Writer.(*upgradeResponse)
		ahead <- fast
		conn, err := s.Sockets.Upgrade(c, "test")
		if err != nil {
			return err
		}
		conn.Serve(func(msg []byte) { conn.Send(append([]byte("echo "), msg...)) }, nil)
		return nil
	}
}

// upgradesServer serves /ws (an endpoint), /unmarked (a socket route not
// marked as one), /refuse (an endpoint that refuses) and /plain.
func upgradesServer(t *testing.T) (addr string, ahead chan bool) {
	ahead = make(chan bool, 16)
	addr = serving(t, nil, func(s *Server) {
		s.Sockets.Endpoint(s.Echo.GET("/ws", echoSocket(s, ahead)))
		s.Echo.GET("/unmarked", echoSocket(s, ahead))
		s.Sockets.Endpoint(s.Echo.GET("/refuse", func(c echo.Context) error {
			return wire.Errorf(http.StatusUnauthorized, "unauthorized", "no token")
		}))
		s.Echo.GET("/plain", func(c echo.Context) error { return c.String(http.StatusOK, "plain") })
	})
	return addr, ahead
}

func dialEcho(t *testing.T, url string) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(url, nil)
	require.NoError(t, err)
	defer ws.Close()
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte("hi")))
	require.NoError(t, ws.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, msg, err := ws.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, "echo hi", string(msg))
}

// Handshakes to endpoints are served ahead of net/http; other sockets and
// plain requests are net/http's, keep-alive included.
func TestHandshakesToEndpointsAreServedAheadOfNetHTTP(t *testing.T) {
	t.Parallel()
	addr, ahead := upgradesServer(t)

	dialEcho(t, "ws://"+addr+"/ws")
	require.True(t, <-ahead, "an endpoint's handshake went through net/http")
	dialEcho(t, "ws://"+addr+"/ws?q=1")
	require.True(t, <-ahead)
	dialEcho(t, "ws://"+addr+"/unmarked")
	require.False(t, <-ahead, "a route not marked as an endpoint was served ahead of net/http")

	// Two requests on one connection: the first head was read here and
	// replayed to net/http.
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for range 2 {
		resp, err := client.Get("http://" + addr + "/plain")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, "plain", string(body))
	}
}

// rawExchange writes a request on a new connection and reads the answer.
func rawExchange(t *testing.T, addr string, parts ...string) (*http.Response, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	for i, p := range parts {
		if i > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		_, err := io.WriteString(nc, p)
		require.NoError(t, err)
	}
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	return resp, br
}

func handshakeHead(path string, extra ...string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" + strings.Join(extra, "") + "\r\n"
}

// A refused handshake gets the JSON error and the connection ends.
func TestRefusedHandshakeIsAnsweredAndClosed(t *testing.T) {
	t.Parallel()
	addr, _ := upgradesServer(t)
	resp, br := rawExchange(t, addr, handshakeHead("/refuse"))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.True(t, resp.Close, "a refused handshake's connection stays open")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.JSONEq(t, `{"error":{"code":"unauthorized","message":"no token"}}`, string(body))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"))
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF)
}

// Heads in pieces or with bare LF line ends are served here; a head too
// long for the buffer or with something net/http refuses goes to
// net/http, which answers or upgrades as before.
func TestUnusualHandshakeHeads(t *testing.T) {
	t.Parallel()
	addr, ahead := upgradesServer(t)
	head := handshakeHead("/ws")

	resp, _ := rawExchange(t, addr, head[:10], head[10:40], head[40:])
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.True(t, <-ahead, "a head in pieces")

	resp, _ = rawExchange(t, addr, strings.ReplaceAll(head, "\r\n", "\n"))
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.True(t, <-ahead, "a head with bare LF line ends")

	resp, _ = rawExchange(t, addr, handshakeHead("/ws", "X-Pad: "+strings.Repeat("p", headBufSize)+"\r\n"))
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.False(t, <-ahead, "a head longer than the buffer")

	for name, bad := range map[string]string{
		"no host":             strings.Replace(head, "Host: x\r\n", "", 1),
		"two hosts":           handshakeHead("/ws", "Host: y\r\n"),
		"bad field name":      handshakeHead("/ws", "Bad Name: v\r\n"),
		"bad request line":    strings.Replace(head, " HTTP/1.1", " HTTP/9", 1),
		"bad control in host": strings.Replace(head, "Host: x", "Host: x\x01", 1),
	} {
		resp, _ := rawExchange(t, addr, bad)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, name)
		require.Empty(t, ahead, name)
	}

	// Not a handshake (no Connection: Upgrade): net/http's, and the
	// handler refuses it there.
	resp, _ = rawExchange(t, addr, strings.Replace(head, "Connection: Upgrade\r\n", "", 1))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.False(t, <-ahead, "an Upgrade header without Connection: Upgrade")

	// A request line that cannot be a handshake is net/http's at once,
	// which answers it without waiting for the rest of a head.
	resp, _ = rawExchange(t, addr, "BOGUS\r\n")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	_, _ = rawExchange(t, addr, strings.Replace(head, "HTTP/1.1", "HTTP/1.0", 1))
	require.False(t, <-ahead, "an HTTP/1.0 handshake")

	// A body (or bytes after the head): net/http's, whatever it makes of it.
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	_, err = io.WriteString(nc, handshakeHead("/ws", "Content-Length: 1\r\n")+"x")
	require.NoError(t, err)
	require.False(t, <-ahead, "a head with a body")
}

// Shutdown closes connections whose head is still being read, and waits
// for handshakes in their handler.
func TestShutdownEndsHeadsAndWaitsForHandshakes(t *testing.T) {
	t.Parallel()
	s, err := NewServer(config.Default(), prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	s.Sockets.Endpoint(s.Echo.GET("/slow", func(c echo.Context) error {
		close(entered)
		<-release
		return c.NoContent(http.StatusNoContent)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	addr := ln.Addr().String()

	silent, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer silent.Close()
	_, err = io.WriteString(silent, "GET /slo")
	require.NoError(t, err)
	slow, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer slow.Close()
	_, err = io.WriteString(slow, handshakeHead("/slow"))
	require.NoError(t, err)
	<-entered

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	require.NoError(t, silent.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = silent.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "a connection sending its head was not closed")
	select {
	case err := <-shut:
		t.Fatalf("shutdown returned before the handshake in its handler: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-shut)
	require.NoError(t, <-served)
	resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Content-Length"), "a 204 with a length")
}

// A head too long to be read here goes to net/http within the same
// http.read_header_timeout: trickling it does not earn a second one.
func TestSlowLongHeadGetsOneHeaderTimeout(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	addr := serving(t, func(c *config.Config) { c.HTTP.ReadHeaderTimeout = timeout }, nil)
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	start := time.Now()
	_, err = io.WriteString(nc, "GET /ws HTTP/1.1\r\nHost: x\r\nX-Pad: ")
	require.NoError(t, err)
	time.Sleep(timeout * 6 / 10)
	// The buffer fills: net/http gets the connection, 0.6 timeouts in.
	_, err = io.WriteString(nc, strings.Repeat("p", headBufSize))
	require.NoError(t, err)
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, _ = io.Copy(io.Discard, nc) // whatever net/http answers, then its close
	require.Less(t, time.Since(start), timeout*14/10, "the head got a second read_header_timeout")
}

func TestHeadEnd(t *testing.T) {
	for in, want := range map[string]int{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n":   27,
		"GET / HTTP/1.1\nHost: x\n\n":         24,
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nxy": 27,
		"GET / HTTP/1.1\r\nHost: x\r\n":       -1,
		"GET / HTTP/1.1\r\nHost: x\r\n\r":     -1,
		"\n\n":                                2,
		"":                                    -1,
	} {
		require.Equal(t, want, headEnd([]byte(in)), fmt.Sprintf("%q", in))
	}
}

// FuzzHandshakeHead: whatever a client sends and however it is split,
// the head read here ends where a one-piece read says it does, and a head
// taken as a handshake is parsed to its last byte (nothing a client sent
// is dropped or left for a second request) into a real handshake.
func FuzzHandshakeHead(f *testing.F) {
	f.Add([]byte(handshakeHead("/ws")), uint16(7))
	f.Add([]byte(handshakeHead("/ws")), uint16(len(handshakeHead("/ws"))-2))
	f.Add([]byte(strings.ReplaceAll(handshakeHead("/ws"), "\r\n", "\n")), uint16(1))
	f.Add([]byte(handshakeHead("/ws", "X-Fold: a\r\n b\r\n")), uint16(30))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n\r\n"), uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		if len(data) > headBufSize {
			data = data[:headBufSize]
		}
		server, client := net.Pipe()
		defer server.Close()
		go func() {
			defer client.Close()
			cut := int(split) % (len(data) + 1)
			_, _ = client.Write(data[:cut])
			_, _ = client.Write(data[cut:])
		}()
		buf := make([]byte, headBufSize)
		n, end, err := readHead(server, buf, time.Now().Add(5*time.Second))
		whole := headEnd(data)
		switch {
		case !handshakeSoFar(buf[:n]):
			// Handed over at once: no more bytes could have made it one.
			if handshakeSoFar(data) {
				t.Fatalf("handed over %q, the start of a handshake %q", buf[:n], data)
			}
			return
		case err != nil || end < 0:
			if whole >= 0 {
				t.Fatalf("head ending at %d not found (read %d, err %v)", whole, n, err)
			}
			return
		case end != whole:
			t.Fatalf("head ends at %d, read in pieces at %d", whole, end)
		}
		if end != n || !looksLikeUpgrade(buf[:end]) {
			return
		}
		p := headParsers.Get().(*headParser)
		defer headParsers.Put(p)
		p.src.Reset(buf[:end])
		p.br.Reset(&p.src)
		req := upgradeRequest(p.br)
		if req == nil {
			return
		}
		if p.br.Buffered() != 0 || p.src.Len() != 0 {
			t.Fatalf("%d bytes of the head left unparsed: %q", p.br.Buffered()+p.src.Len(), buf[:end])
		}
		if req.Method != http.MethodGet || req.Host == "" || !websocket.IsWebSocketUpgrade(req) || req.ProtoMinor != 1 {
			t.Fatalf("not a handshake: %+v", req)
		}
	})
}
