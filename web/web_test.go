package web

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type bundle struct {
	srv  *Server
	url  string
	conn chan *socket.Conn
}

func setup(t *testing.T, mutate func(*config.Config)) bundle {
	t.Helper()
	return setupLogged(t, mutate, testenv.Logger())
}

func setupLogged(t *testing.T, mutate func(*config.Config), log *slog.Logger) bundle {
	t.Helper()
	cfg := config.Default()
	cfg.Realtime.SendQueue = 4
	cfg.Realtime.MaxMessageBytes = 64
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := NewServer(cfg, prometheus.NewRegistry(), log)
	require.NoError(t, err)
	b := bundle{srv: s, conn: make(chan *socket.Conn, 1)}
	s.Echo.GET("/ws", func(c echo.Context) error {
		conn, err := s.Sockets.Upgrade(c, "test")
		if err != nil {
			return err
		}
		b.conn <- conn
		for {
			msg, err := conn.Read()
			if err != nil {
				return nil
			}
			conn.Send(msg) // echo
		}
	})
	ts := httptest.NewServer(s.Echo)
	t.Cleanup(ts.Close)
	b.url = ts.URL
	return b
}

func dial(t *testing.T, url string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	c, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(url, "http")+"/ws", hdr)
	if c != nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, resp, err
}

func TestOriginCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Config) { c.Realtime.AllowedOrigins = []string{"https://app.example"} })
	_, _, err := dial(t, b.url, nil)
	require.NoError(t, err, "no Origin: a server or CLI client")
	_, _, err = dial(t, b.url, http.Header{"Origin": {"https://app.example"}})
	require.NoError(t, err, "configured origin")
	_, resp, err := dial(t, b.url, http.Header{"Origin": {"https://evil.example"}})
	require.Error(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	host := strings.TrimPrefix(b.url, "http://")
	_, _, err = dial(t, b.url, http.Header{"Origin": {"http://" + host}})
	require.NoError(t, err, "same host")
}

func TestEchoAndOversizeFrame(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c, _, err := dial(t, b.url, nil)
	require.NoError(t, err)
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte("hi")))
	_, msg, err := c.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, "hi", string(msg))

	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(strings.Repeat("x", 100))))
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, websocket.CloseMessageTooBig, ce.Code)
}

// A protocol may raise the frame limit of its own connections.
func TestSetReadLimitRaisesTheFrameLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c, _, err := dial(t, b.url, nil)
	require.NoError(t, err)
	conn := <-b.conn
	conn.SetReadLimit(256)
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(strings.Repeat("x", 200))))
	_, msg, err := c.ReadMessage()
	require.NoError(t, err)
	require.Len(t, msg, 200, "a frame over realtime.max_message_bytes but under the new limit passes")

	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(strings.Repeat("x", 300))))
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, websocket.CloseMessageTooBig, ce.Code)
}

// Frames far larger than the small read buffer arrive whole.
func TestFramesLargerThanTheReadBuffer(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c, _, err := dial(t, b.url, nil)
	require.NoError(t, err)
	conn := <-b.conn
	conn.SetReadLimit(1 << 20)
	for _, n := range []int{4095, 4097, 48 << 10, 300 << 10} { // around the 4 KiB read buffer
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte('a' + i%26)
		}
		require.NoError(t, c.WriteMessage(websocket.TextMessage, msg))
		_, got, err := c.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, msg, got, "a %d-byte frame", n)
	}
}

func TestSlowConsumerIsDroppedWithoutBlockingTheSender(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c, _, err := dial(t, b.url, nil)
	require.NoError(t, err)
	conn := <-b.conn
	// The client reads nothing; the kernel buffers fill, then the queue.
	big := []byte(strings.Repeat("y", 60_000))
	start := time.Now()
	dropped := false
	for i := 0; i < 2000 && !dropped; i++ {
		dropped = !conn.Send(big)
	}
	require.True(t, dropped, "a client that never reads is dropped")
	require.Less(t, time.Since(start), 5*time.Second, "Send never waits on the client")
	select {
	case <-conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("dropped connection not closed")
	}
	_ = c
}

// The final message reaches the client before the close frame, and nothing
// is sent after it.
func TestSendAndCloseDeliversTheLastMessageFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Config) { c.Realtime.SendQueue = 64 })
	c, _, err := dial(t, b.url, nil)
	require.NoError(t, err)
	conn := <-b.conn
	for i := 0; i < 20; i++ {
		require.True(t, conn.Send([]byte("m")))
	}
	require.True(t, conn.SendAndClose([]byte("last"), websocket.CloseNormalClosure, "done"))
	require.False(t, conn.Send([]byte("late")), "nothing after the final message")
	var got []string
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, websocket.CloseNormalClosure, ce.Code)
			require.Equal(t, "done", ce.Text)
			break
		}
		got = append(got, string(msg))
	}
	require.Len(t, got, 21)
	require.Equal(t, "last", got[20])
	select {
	case <-conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed")
	}
}

func TestSSEStreamsHubMessagesAndDrains(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config.Config) {
		c.Realtime.SSEKeepalive = 50 * time.Millisecond
		c.Realtime.ReconnectMinWait, c.Realtime.ReconnectMaxWait = time.Second, 2*time.Second
	})
	h, err := hub.New(testenv.Redis(t), prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	topic := testenv.Prefix(t) + "{sse}"
	b.srv.Echo.GET("/sse", func(c echo.Context) error {
		q := h.NewQueue(8)
		if err := h.Subscribe(c.Request().Context(), topic, q); err != nil {
			return err
		}
		defer h.Unsubscribe(topic, q)
		st, err := b.srv.Sockets.OpenSSE(c, "test")
		if err != nil {
			return err
		}
		if err := st.Send(socket.SSEEvent{Event: "reset", Data: []byte("{}")}); err != nil {
			st.Close()
			return nil
		}
		return st.Serve(q, func(m hub.Message) (socket.SSEEvent, bool) {
			return socket.SSEEvent{Event: "update", Data: m.Payload}, true
		})
	})
	resp, err := http.Get(b.url + "/sse")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	next := testenv.SSEReader(t, resp.Body)
	readEvent := func() (string, string) { e := next(); return e.Event, e.Data }
	ev, _ := readEvent()
	require.Equal(t, "reset", ev)
	testenv.Eventually(t, 5*time.Second, func() bool { return h.Subscribers(topic) == 1 }, "subscribed")
	require.NoError(t, h.Publish(context.Background(), topic, []byte(`{"n":1}`)))
	ev, data := readEvent()
	require.Equal(t, "update", ev)
	require.Equal(t, `{"n":1}`, data)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { _ = b.srv.Sockets.CloseAll(ctx) }()
	ev, data = readEvent()
	require.Equal(t, "reconnect", ev)
	require.Contains(t, data, "reconnectMs")
	testenv.Eventually(t, 5*time.Second, func() bool { return b.srv.Sockets.Live() == 0 }, "stream untracked")
}

func TestErrorShape(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.Echo.GET("/busy", func(echo.Context) error { return wire.Unavailable(2*time.Second, "store down") })
	b.srv.Echo.GET("/taken", func(echo.Context) error {
		e := wire.Errorf(409, "seats_unavailable", "taken")
		e.Details = map[string]any{"seats": []string{"A-1"}}
		return e
	})
	resp, err := http.Get(b.url + "/busy")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	resp, err = http.Get(b.url + "/taken")
	require.NoError(t, err)
	var body map[string]map[string]any
	require.NoError(t, jsonDecode(resp, &body))
	require.Equal(t, "seats_unavailable", body["error"]["code"])
	require.Equal(t, []any{"A-1"}, body["error"]["seats"])
}

// A zero-config development server believes X-Forwarded-For from loopback,
// so a local load generator's synthetic networks count as networks; a
// server with configured stores believes nobody it was not told to.
func TestDevelopmentTrustsLoopbackProxies(t *testing.T) {
	t.Parallel()
	realIP := func(mutate func(*config.Config)) string {
		b := setup(t, mutate)
		b.srv.Echo.GET("/ip", func(c echo.Context) error { return c.String(http.StatusOK, c.RealIP()) })
		req, err := http.NewRequest(http.MethodGet, b.url+"/ip", nil)
		require.NoError(t, err)
		req.Header.Set("X-Forwarded-For", "100.64.7.9")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body)
	}
	require.Equal(t, "100.64.7.9", realIP(nil), "development: no stores configured")
	require.Equal(t, "127.0.0.1", realIP(func(c *config.Config) { c.Redis.URL, c.Postgres.URL = "redis://r:6379", "postgres://p/db" }))
	require.Equal(t, "127.0.0.1", realIP(func(c *config.Config) { c.HTTP.TrustedProxies = []string{"10.0.0.0/8"} }), "configured proxies replace the default")
}

// A store the process works without is reported degraded, and the process
// stays ready; a store it needs makes it unready.
func TestOptionalReadinessCheckKeepsTheProcessReady(t *testing.T) {
	t.Parallel()
	r := newReadiness(testenv.Logger())
	down := errors.New("down")
	r.add("redis", func(context.Context) error { return nil }, false)
	r.add("redis-limits", func(context.Context) error { return down }, true)
	rep := r.run()
	require.True(t, rep.ready)
	require.Equal(t, map[string]string{"redis": "ok", "redis-limits": "degraded"}, rep.results)
	r.add("redis", func(context.Context) error { return down }, false)
	rep = r.run()
	require.False(t, rep.ready)
	require.Equal(t, "unavailable", rep.results["redis"])
}

// A client's close is answered with 1000 whatever code it carried, and a
// close frame RFC 6455 does not allow (one byte, a code no endpoint may
// send, a reason not UTF-8) with 1002: the client only ever sees the
// documented codes.
func TestClientClosesAreAnsweredWithDocumentedCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		payload []byte
		want    int
	}{
		{nil, websocket.CloseNormalClosure},
		{[]byte{0x03, 0xe8}, websocket.CloseNormalClosure},                 // 1000
		{[]byte{0x10, 0xe1, 'b', 'y', 'e'}, websocket.CloseNormalClosure},  // 4321, an application's own
		{[]byte{0x03, 0xe9}, websocket.CloseNormalClosure},                 // 1001
		{[]byte{0x03}, websocket.CloseProtocolError},                       // one byte
		{[]byte{0x03, 0xed}, websocket.CloseProtocolError},                 // 1005
		{[]byte{0x03, 0xee}, websocket.CloseProtocolError},                 // 1006
		{[]byte{0x03, 0xe7}, websocket.CloseProtocolError},                 // 999
		{[]byte{0x13, 0x88}, websocket.CloseProtocolError},                 // 5000
		{[]byte{0x03, 0xe8, 0xff}, websocket.CloseInvalidFramePayloadData}, // a reason not UTF-8
	} {
		b := setup(t, nil) // its handler takes one connection
		c, _, err := dial(t, b.url, nil)
		require.NoError(t, err)
		// Raw, as gorilla refuses to write a close it considers invalid.
		frame := append([]byte{0x88, 0x80 | byte(len(tc.payload)), 0, 0, 0, 0}, tc.payload...)
		_, err = c.NetConn().Write(frame)
		require.NoError(t, err)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _, err = c.ReadMessage()
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce, "% x", tc.payload)
		require.Equal(t, tc.want, ce.Code, "% x", tc.payload)
	}
}
