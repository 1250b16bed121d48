package web

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// What net/http refuses before any handler runs is answered in the one
// error shape with a request id, not in its plain text: on a connection's
// first request and on a later one of the same connection alike.
func TestOwnRefusalsInTheErrorShape(t *testing.T) {
	t.Parallel()
	addr := serving(t, nil, nil)
	cases := []struct {
		name   string
		head   string
		status int
		code   string
	}{
		{"a control byte in a field", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Note: a\x01b\r\n\r\n", 400, "bad_request"},
		{"NUL in Idempotency-Key", "POST /healthz HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\x00\r\nContent-Length: 0\r\n\r\n", 400, "bad_request"},
		{"a bad field name", "GET /healthz HTTP/1.1\r\nHost: x\r\nX Bad: 1\r\n\r\n", 400, "bad_request"},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, "bad_request"},
		{"two lengths", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, "bad_request"},
		{"a transfer coding not known", "POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "unsupported_transfer_coding"},
		{"HTTP/2.0 in the request line", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, "unsupported_http_version"},
		{"an Expect other than 100-continue", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n", 417, "expectation_failed"},
		{"a head over the limit", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 1<<20+64<<10) + "\r\n\r\n", 431, "headers_too_large"},
	}
	for _, tc := range cases {
		for _, second := range []bool{false, true} {
			name := tc.name
			if second {
				name += ", after a good request on the connection"
			}
			t.Run(name, func(t *testing.T) {
				c, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				if second {
					_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
					require.NoError(t, err)
					resp, err := http.ReadResponse(br, nil)
					require.NoError(t, err)
					_, _ = io.Copy(io.Discard, resp.Body)
					require.Equal(t, 200, resp.StatusCode)
				}
				_, _ = io.WriteString(c, tc.head)
				resp, err := http.ReadResponse(br, nil)
				require.NoError(t, err)
				defer resp.Body.Close()
				require.Equal(t, tc.status, resp.StatusCode)
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				require.NotEmpty(t, resp.Header.Get("X-Request-Id"))
				require.True(t, resp.Close, "the connection ends after a refusal")
				var body struct {
					Error struct{ Code, Message string } `json:"error"`
				}
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
				require.Equal(t, tc.code, body.Error.Code)
				require.NotEmpty(t, body.Error.Message)
			})
		}
	}
}

// Only net/http's own refusals are rewritten: a handler's answers, a
// 100 Continue and bytes that merely look like a refusal go out as they
// are.
func TestOwnRefusalLeavesOtherWritesAlone(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		"HTTP/1.1 100 Continue\r\n\r\n",
		"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nX-Request-Id: a\r\n\r\n{}",
		"HTTP/1.1 417 Expectation Failed\r\nX-Request-Id: a\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nok",
		"\x81\x05HTTP/1.1 400",
	} {
		_, ok := ownRefusal([]byte(p), testenv.Logger(), "x")
		require.False(t, ok, "%q", p)
	}
	ans, ok := ownRefusal([]byte("HTTP/1.1 400 Bad Request: invalid header name\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request: invalid header name"), testenv.Logger(), "x")
	require.True(t, ok)
	require.Contains(t, string(ans), `"message":"the request could not be read: invalid header name"`)
}
