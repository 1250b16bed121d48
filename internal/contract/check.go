package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/presenced/presenced/internal/spectest"
)

// framing are the answers given before any route, to a request whose head
// or framing cannot be served (docs/http.md): they have the error shape
// too.
var framing = []int{
	http.StatusBadRequest,                  // a malformed head: control bytes, a bad Host, a bad length
	http.StatusExpectationFailed,           // an Expect other than 100-continue
	http.StatusRequestHeaderFieldsTooLarge, // a head over http.max_header_bytes
	http.StatusNotImplemented,              // a transfer coding other than chunked
	http.StatusHTTPVersionNotSupported,     // not HTTP/1.x
}

// checker holds what answers are checked against.
type checker struct {
	doc    *openapi3.T
	routes []*route
}

// check returns what is wrong with the answer a to r: nothing for an
// answer the documents describe. malformed says r's head is one a server
// may refuse before routing.
func (k *checker) check(r *request, malformed bool, a *answer) []string {
	var bad []string
	// 501 and 505 are the protocol's answers to a transfer coding or an
	// HTTP version the server does not speak, not faults.
	if a.status >= 500 && !(malformed && slices.Contains(framing, a.status)) {
		bad = append(bad, fmt.Sprintf("a server error (%s)", statusLine(a)))
	}
	if a.header.Get("X-Request-Id") == "" && a.status != http.StatusSwitchingProtocols {
		bad = append(bad, "no X-Request-Id")
	}
	head := r.method == http.MethodHead
	if malformed && slices.Contains(framing, a.status) {
		return append(bad, errorShape(a, head)...)
	}
	path := targetPath(r.target)
	rt := match(k.routes, path)
	switch {
	case rt == nil:
		if a.status != http.StatusNotFound {
			bad = append(bad, fmt.Sprintf("%s for a path no route serves (want 404)", statusLine(a)))
		}
		return append(bad, errorShape(a, head)...)
	case !rt.allows(r.method):
		return append(bad, k.wrongMethod(rt, r.method, a)...)
	}
	o := rt.item.GetOperation(r.method)
	if a.status == http.StatusNotFound && strings.Contains(path, "//") {
		// An empty path segment: whether a route takes it as an empty
		// parameter is the router's business; its 404 is the not-found
		// answer.
		return append(bad, errorShape(a, head)...)
	}
	if o.Responses.Status(a.status) == nil && o.Responses.Default() == nil {
		return append(bad, fmt.Sprintf("%s is not documented for %s %s", statusLine(a), r.method, rt.path))
	}
	if head {
		return bad
	}
	if err := k.validate(rt, o, r, a); err != nil {
		bad = append(bad, err.Error())
	}
	for _, ev := range a.events {
		if err := spectest.FrameProblem("sse", path, ev.name, ev.data); err != nil {
			bad = append(bad, err.Error())
		}
	}
	return bad
}

// targetPath is the path of a request-target, of an absolute one too
// (which a server must take: RFC 9112, 3.2.2).
func targetPath(target string) string {
	path, _, _ := strings.Cut(target, "?")
	for _, scheme := range []string{"http://", "https://"} {
		if rest, ok := strings.CutPrefix(path, scheme); ok {
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				return rest[i:]
			}
			return "/"
		}
	}
	return path
}

// wrongMethod: a method the path does not serve answers 405 with Allow
// (OPTIONS: 204 with Allow).
func (k *checker) wrongMethod(rt *route, method string, a *answer) []string {
	var bad []string
	want := http.StatusMethodNotAllowed
	if method == http.MethodOptions {
		want = http.StatusNoContent
	}
	if a.status != want {
		return []string{fmt.Sprintf("%s for %s, a method %s does not serve (want %d)", statusLine(a), method, rt.path, want)}
	}
	allow := a.header.Get("Allow")
	for _, m := range rt.methods {
		if !strings.Contains(allow, m) {
			bad = append(bad, fmt.Sprintf("Allow %q leaves out %s", allow, m))
		}
	}
	if want == http.StatusMethodNotAllowed {
		bad = append(bad, errorShape(a, method == http.MethodHead)...)
	}
	return bad
}

// errorShape checks a body is the one error shape.
func errorShape(a *answer, head bool) []string {
	if head {
		return nil
	}
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return []string{fmt.Sprintf("%s answered as %q, not the JSON error shape: %s", statusLine(a), ct, excerpt(a.body, 120))}
	}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(a.body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		return []string{fmt.Sprintf("%s without the error shape: %s", statusLine(a), excerpt(a.body, 200))}
	}
	return nil
}

// validate checks the answer's headers and body against the operation.
func (k *checker) validate(rt *route, o *openapi3.Operation, r *request, a *answer) error {
	_, query, _ := strings.Cut(r.target, "?")
	path := targetPath(r.target)
	req := &http.Request{Method: r.method, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{}}
	for _, f := range r.header {
		req.Header.Add(f.name, f.value)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req,
			Route:   &routers.Route{Spec: k.doc, Path: rt.path, PathItem: rt.item, Method: r.method, Operation: o},
		},
		Status: a.status,
		Header: a.header,
		Body:   io.NopCloser(bytes.NewReader(a.body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			ExcludeResponseBody:   len(a.events) > 0 || a.status == http.StatusSwitchingProtocols,
		},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s: %s; body: %s", statusLine(a), spectest.Describe(err), excerpt(a.body, 300))
	}
	return nil
}

// excerpt quotes the start of b for a report.
func excerpt(b []byte, n int) string {
	if len(b) > n {
		return fmt.Sprintf("%q… (%d bytes)", b[:n], len(b))
	}
	return fmt.Sprintf("%q", b)
}
