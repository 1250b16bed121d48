package viewers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The wire client's request is what net/http's client would send: the
// server reads the same method, path, host, length, cookie and forwarded
// address; its answers, cookies included, come back.
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
	status, got, err := wi.post(ctx, "/v1/viewers/h1/heartbeat", "", "100.64.0.1")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, status)
	require.Equal(t, cookies, got)
	viaWire := <-seen
	require.Equal(t, viaHTTP.Method, viaWire.Method)
	require.Equal(t, viaHTTP.RequestURI, viaWire.RequestURI)
	require.Equal(t, viaHTTP.Host, viaWire.Host)
	require.Equal(t, viaHTTP.ContentLength, viaWire.ContentLength)
	for _, h := range []string{"Cookie", "X-Forwarded-For", "Content-Type"} {
		require.Equal(t, viaHTTP.Header.Values(h), viaWire.Header.Values(h), h)
	}

	// A refusal with a body leaves the connection usable.
	status, _, err = wi.post(ctx, "/v1/viewers/h1/heartbeat", "pd_vs=v1.k.p.s", "100.64.0.1")
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
	status, _, err := wi.post(ctx, "/x", "", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, status)
	srv.CloseClientConnections()
	status, _, err = wi.post(ctx, "/x", "", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, status)
	require.Equal(t, int64(2), n.Load())
}

// An https target goes through net/http's client.
func TestWireOnlyForPlainHTTP(t *testing.T) {
	require.Nil(t, newWire("https://127.0.0.1:8443", 4))
	wi := newWire("http://localhost", 2)
	require.Equal(t, "localhost:80", wi.hc.Addr)
	require.Equal(t, "localhost", wi.host)
	require.Equal(t, "", wi.prefix)
	require.Equal(t, "/presenced", newWire("http://127.0.0.1:8080/presenced/", 1).prefix, "a target behind a path-routing proxy")
}
