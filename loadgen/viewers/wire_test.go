package viewers

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The wire client's request is what net/http's client would send: the
// server reads the same method, path, cookie and forwarded address, and
// the same headers; its answers, cookies included, come back.
func TestWireSendsWhatNetHTTPSends(t *testing.T) {
	t.Parallel()
	seen := make(chan *http.Request, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r
		if r.Header.Get("Cookie") == "" {
			w.Header().Add("Set-Cookie", "pd_vs=v1.k.p.s; Path=/v1/viewers; HttpOnly")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.Error(w, `{"error":{"code":"rate_limited"}}`, http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)

	var viaHTTP *http.Request
	l := &Scenario{}
	// The target's own path (a proxy that routes by path) comes first.
	status, cookies, err := l.postHTTP(context.Background(), srv.Client(), srv.URL+"/p/v1/viewers/h1/heartbeat", "", "100.64.0.1")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, status)
	viaHTTP = <-seen

	wi := newWire(srv.URL+"/p", 1)
	require.NotNil(t, wi)
	t.Cleanup(wi.closeAll)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, got, err := wi.post(ctx, 0, "/v1/viewers/h1/heartbeat", "", "100.64.0.1")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, status)
	require.Equal(t, cookies, got)
	viaWire := <-seen
	require.Equal(t, viaHTTP.Method, viaWire.Method)
	require.Equal(t, viaHTTP.RequestURI, viaWire.RequestURI)
	require.Equal(t, viaHTTP.Host, viaWire.Host)
	require.Equal(t, viaHTTP.ContentLength, viaWire.ContentLength)
	require.Equal(t, viaHTTP.Header, viaWire.Header)

	// A refusal with a body leaves the connection usable.
	status, _, err = wi.post(ctx, 0, "/v1/viewers/h1/heartbeat", "pd_vs=v1.k.p.s", "100.64.0.1")
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, status)
	r := <-seen
	require.Equal(t, "pd_vs=v1.k.p.s", r.Header.Get("Cookie"))
	require.Equal(t, "100.64.0.1", r.Header.Get("X-Forwarded-For"))
}

// A kept-alive connection the server closed is replaced, and the heartbeat
// goes out once on the new one.
func TestWireRedialsAClosedConnection(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	wi := newWire(srv.URL, 1)
	t.Cleanup(wi.closeAll)
	ctx := context.Background()
	status, _, err := wi.post(ctx, 0, "/x", "", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, status)
	srv.CloseClientConnections()
	status, _, err = wi.post(ctx, 0, "/x", "", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, status)
	require.Equal(t, int64(2), n.Load())
}

// An https target goes through net/http's client.
func TestWireOnlyForPlainHTTP(t *testing.T) {
	require.Nil(t, newWire("https://127.0.0.1:8443", 4))
	wi := newWire("http://localhost", 2)
	require.Equal(t, "localhost:80", wi.addr)
	require.Equal(t, "localhost", wi.host)
	require.Equal(t, "", wi.prefix)
	require.Equal(t, "/presenced", newWire("http://127.0.0.1:8080/presenced/", 1).prefix, "a target behind a path-routing proxy")
}

// Each framing HTTP/1.1 allows ends where the next response begins, and
// the connection is kept only when the server keeps it.
func TestReadResponseFraming(t *testing.T) {
	t.Parallel()
	const next = "HTTP/1.1 204 No Content\r\n\r\n"
	cases := []struct {
		name, raw string
		status    int
		cookies   []string
		keep      bool
	}{
		{"no content", "HTTP/1.1 204 No Content\r\nX-Request-Id: a\r\nSet-Cookie: pd_vs=x; Path=/\r\nset-cookie: other=y\r\n\r\n", 204, []string{"pd_vs=x; Path=/", "other=y"}, true},
		{"length", "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 12\r\nRetry-After: 1\r\n\r\n{\"error\":{}}", 429, nil, true},
		{"chunked", "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n", 503, nil, true},
		{"close", "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", 400, nil, false},
		{"HTTP/1.0", "HTTP/1.0 204 No Content\r\n\r\n", 204, nil, false},
	}
	for _, c := range cases {
		br := bufio.NewReader(strings.NewReader(c.raw + next))
		status, cookies, keep, err := readResponse(br)
		require.NoError(t, err, c.name)
		require.Equal(t, c.status, status, c.name)
		require.Equal(t, c.cookies, cookies, c.name)
		require.Equal(t, c.keep, keep, c.name)
		status, _, _, err = readResponse(br)
		require.NoError(t, err, c.name)
		require.Equal(t, 204, status, "%s: the next response starts where this one ended", c.name)
	}
	// A body that runs to the close.
	status, _, keep, err := readResponse(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\n\r\nall of it")))
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.False(t, keep)
	for _, bad := range []string{"", "HTTP/1.1 20", "SPDY/3 204 x\r\n\r\n", "HTTP/1.1 2x4 x\r\n\r\n", "HTTP/1.1 204 x\r\nno colon\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "HTTP/1.1 100 Continue\r\n\r\n"} {
		_, _, _, err := readResponse(bufio.NewReader(strings.NewReader(bad)))
		require.Error(t, err, "%q", bad)
	}
}
