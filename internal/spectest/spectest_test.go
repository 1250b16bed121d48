package spectest

import (
	"net/http"
	"net/http/httptest"

	"testing"

	"github.com/labstack/echo/v4"

	"github.com/stretchr/testify/require"
)

// The documents load, the OpenAPI document validates as OpenAPI 3.1, and
// every payload schema of the AsyncAPI document compiles.
func TestDocumentsLoad(t *testing.T) {
	doc := OpenAPI(t)
	require.True(t, doc.IsOpenAPI31OrLater())
	_, a, err := load()
	require.NoError(t, err)
	var channels []string
	for _, c := range a.channels {
		channels = append(channels, c.name)
		require.NotEmpty(t, c.sent, "channel %s: the server sends nothing?", c.name)
	}
	require.ElementsMatch(t, []string{"presence", "viewersSocket", "viewersStream", "waitingroom", "seatMapLive", "seatMapLiveSocket"}, channels)
}

func TestDocPath(t *testing.T) {
	require.Equal(t, "/v1/viewers/{hotel}/count", DocPath("/v1/viewers/:hotel/count"))
	require.Equal(t, "/healthz", DocPath("/healthz"))
	require.Equal(t, "/js/{asset}", DocPath("/js/*"))
}

// The frame checkers follow fragmented WebSocket messages and SSE blocks.
func TestFrameParsers(t *testing.T) {
	var got []string
	p := &wsParser{check: func(_ string, d []byte) { got = append(got, string(d)) }, checkClose: func(c int) { got = append(got, "close") }}
	p.write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"))
	p.write([]byte{0x01, 3, 'a', 'b', 'c'}) // text, not final
	p.write([]byte{0x80, 2, 'd'})           // continuation, final, split
	p.write([]byte{'e', 0x89, 0})           // ... then a ping
	p.write([]byte{0x88, 2, 0x03, 0xe8})    // close 1000
	require.Equal(t, []string{"abcde", "close"}, got)

	got = nil
	s := &sseParser{check: func(ev string, d []byte) { got = append(got, ev+"="+string(d)) }}
	s.write([]byte(": keepalive\n\nevent: reset\nda"))
	s.write([]byte("ta: {}\n\nretry: 5\nevent: reconnect\ndata: {\"reconnectMs\":5}\n\n"))
	require.Equal(t, []string{"reset={}", `reconnect={"reconnectMs":5}`}, got)
}

// The middleware catches what drifts: an undocumented field, an
// undocumented status, an undocumented route, a frame no message describes.
func TestValidatorCatchesDrift(t *testing.T) {
	doc := OpenAPI(t)
	_, adoc, err := load()
	require.NoError(t, err)
	rec := &recorder{}
	e := echo.New()
	e.Use(middleware(doc, adoc, rec))
	body := `{"status":"ok"}`
	status := http.StatusOK
	e.GET("/healthz", func(c echo.Context) error { return c.Blob(status, echo.MIMEApplicationJSON, []byte(body)) })
	e.GET("/v1/undocumented", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	get := func(path string) {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	}

	get("/healthz")
	require.Empty(t, rec.problems, "the documented answer passes")

	body = `{"status":"ok","uptime":3}`
	get("/healthz")
	require.Len(t, rec.problems, 1)
	require.Contains(t, rec.problems[0], "uptime")

	body, status = `{"status":"ok"}`, http.StatusTeapot
	get("/healthz")
	require.Len(t, rec.problems, 2)
	require.Contains(t, rec.problems[1], "418")

	get("/v1/undocumented")
	require.Len(t, rec.problems, 3)
	require.Contains(t, rec.problems[2], "GET /v1/undocumented: route not in docs/openapi.yaml")

	check := adoc.checker(rec, "websocket", "/v1/viewers/ws")
	check("", []byte(`{"v":1,"event":"count:updated","payload":{"hotel":"h","count":1,"approximate":true,"stale":false,"asOf":"2030-01-01T00:00:00Z"}}`))
	require.Len(t, rec.problems, 3, "a documented frame passes")
	check("", []byte(`{"v":1,"event":"count:updated","payload":{"hotel":"h","count":1,"approximate":true,"stale":false,"asOf":"2030-01-01T00:00:00Z","region":"eu"}}`))
	require.Len(t, rec.problems, 4)
	require.Contains(t, rec.problems[3], "count:updated")
}
