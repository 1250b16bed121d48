package web

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/web/wire"
)

// withBodyDeadline bounds the time a request body takes to arrive. The
// server's ReadTimeout would do that for every request but also cut SSE
// streams and long handlers: net/http cancels a request's context when a
// read deadline passes while it watches the idle connection. So the
// deadline is set only on requests with a body, and lifted as soon as the
// body has been read; sockets and streams (no body) never have one.
func withBodyDeadline(c echo.Context, timeout time.Duration) {
	rc := http.NewResponseController(c.Response().Writer)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return // not a network connection (tests)
	}
	r := c.Request()
	r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
}

// deadlineBody lifts the read deadline once the body is read to its end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return n, wire.Errorf(http.StatusRequestTimeout, "request_timeout", "the request body did not arrive in time")
	}
	return n, err
}
