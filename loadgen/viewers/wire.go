package viewers

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// wire sends heartbeats with fasthttp's client: kept-alive HTTP/1.1
// connections, about one per worker, and requests and responses from
// pools. net/http's client costs about as much CPU per request as the
// server does (a Request to build, goroutines per connection handing it
// along, a timer per call): on a two-core box the generator ran out of its
// core before the server ran out of its own, and an unsaturated server is
// charged for its idle wake-ups.
type wire struct {
	hc   *fasthttp.HostClient
	host string // the Host header
	// prefix is the target's own path ("/presenced" behind a proxy that
	// routes by path), put before every request's path.
	prefix string
}

// newWire returns a wire client for target with a connection for each of
// workers, or nil when target is not plain http (TLS goes through
// net/http).
func newWire(target string, workers int) *wire {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &wire{
		hc: &fasthttp.HostClient{
			Addr:                     addr,
			MaxConns:                 max(1, workers),
			MaxConnWaitTimeout:       5 * time.Second,
			NoDefaultUserAgentHeader: true,
			// A heartbeat is sent again on a new connection when the
			// server closed a kept-alive one (idle timeout, a restart):
			// should the first have counted after all, a second heartbeat
			// of the same session counts nothing more.
			MaxIdemponentCallAttempts: 2,
			RetryIfErr: func(_ *fasthttp.Request, attempts int, err error) (bool, bool) {
				return false, attempts < 2
			},
		},
		host:   u.Host,
		prefix: strings.TrimRight(u.EscapedPath(), "/"),
	}
}

// post sends one heartbeat to path, with the cookie and the
// X-Forwarded-For address when not empty, and returns the status and the
// Set-Cookie values.
func (wi *wire) post(ctx context.Context, path, cookie, forwarded string) (int, []string, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(wi.prefix + path)
	req.Header.SetHost(wi.host)
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	if forwarded != "" {
		req.Header.Set("X-Forwarded-For", forwarded)
	}
	deadline, bounded := ctx.Deadline()
	var err error
	if bounded {
		err = wi.hc.DoDeadline(req, resp, deadline)
	} else {
		err = wi.hc.Do(req, resp)
	}
	if bounded && errors.Is(err, fasthttp.ErrTimeout) {
		// fasthttp's timer can fire a moment before the context's: report
		// the context's end, so a call cut short by the end of the run is
		// not counted as a failure.
		<-ctx.Done()
		return 0, nil, ctx.Err()
	}
	if err != nil {
		return 0, nil, err
	}
	var cookies []string
	for _, v := range resp.Header.Cookies() {
		cookies = append(cookies, string(v))
	}
	return resp.StatusCode(), cookies, nil
}

// closeAll closes the kept-alive connections.
func (wi *wire) closeAll() { wi.hc.CloseIdleConnections() }
