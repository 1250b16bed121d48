package web

import (
	"io"

	"github.com/labstack/echo/v4"
)

// limitedBody refuses a body longer than http.body_limit_bytes to the
// handler that reads it: at once when its Content-Length says so, else
// (a chunked body has no length) at the read past the limit; either fails
// with 413.
type limitedBody struct {
	io.ReadCloser
	left     int64 // bytes still allowed
	declared int64 // the Content-Length (-1: unknown)
	err      error
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.err == nil && b.declared > b.left {
		b.err = echo.ErrStatusRequestEntityTooLarge
	}
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	// One byte past the limit tells a body of exactly the limit from a
	// longer one; that byte is never handed on.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	if int64(n) > b.left {
		n = int(b.left)
		b.left = 0
		b.err = echo.ErrStatusRequestEntityTooLarge
		return n, b.err
	}
	b.left -= int64(n)
	return n, err
}
