package socket

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

// heldServer serves /held with UpgradeHeld and hands each connection to
// the test, which decides what the first frame is and when.
func heldServer(t *testing.T) (addr string, conns chan *Conn) {
	t.Helper()
	s, err := NewServer(config.Default(), prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	conns = make(chan *Conn, 1)
	s.Echo.GET("/held", func(c echo.Context) error {
		conn, err := s.Sockets.UpgradeHeld(c, "test")
		if err != nil {
			return err
		}
		conn.Serve(func([]byte) {}, func() {})
		conns <- conn
		return nil
	})
	ts := httptest.NewServer(s.Echo)
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://"), conns
}

// The answer to a held handshake is written with the first frame, not
// before it, and the client reads both.
func TestHeldHandshakeAnswersWithTheFirstFrame(t *testing.T) {
	t.Parallel()
	addr, conns := heldServer(t)
	nc, br := sendHandshake(t, addr, "/held")
	conn := <-conns

	// The upgrade is done on the server; nothing has reached the client.
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err := br.Peek(1)
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "the handshake's answer came before the first frame: %v", err)

	conn.Send([]byte("hello"))
	require.NoError(t, nc.SetReadDeadline(time.Time{}))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.Equal(t, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", resp.Header.Get("Sec-WebSocket-Accept"))
	cl := &rawClient{t: t, nc: nc, br: br}
	cl.expectText("hello")

	// Later frames go out alone, and the connection works both ways.
	conn.Send([]byte("again"))
	cl.expectText("again")
}

// A held connection closed before any frame answers the handshake with
// its close frame.
func TestHeldHandshakeAnswersWithTheCloseFrame(t *testing.T) {
	t.Parallel()
	addr, conns := heldServer(t)
	nc, br := sendHandshake(t, addr, "/held")
	conn := <-conns
	conn.Close(ClosePolicy, "no")
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	cl := &rawClient{t: t, nc: nc, br: br}
	cl.expectClose(ClosePolicy)
}

// A request that is not an upgrade is refused in the JSON error shape, as
// by Upgrade.
func TestHeldHandshakeRefusesAPlainRequest(t *testing.T) {
	t.Parallel()
	addr, _ := heldServer(t)
	resp, err := http.Get("http://" + addr + "/held")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var body errorBody
	require.NoError(t, jsonDecode(resp, &body))
	require.Equal(t, "bad_request", body.Error["code"])
}
