// Package spectest keeps docs/openapi.yaml and docs/asyncapi.yaml equal to
// what the code does, from the tests' side: Validate puts a middleware on a
// test server that checks every response a test provokes against the
// OpenAPI document (status, headers, body, with no field left undocumented)
// and every WebSocket and SSE frame the server sends against the AsyncAPI
// document; Routes compares the routes a process registers with the
// documented paths. A handler that drifts from the documents fails the
// tests that exercise it.
//
// It is for tests only: it pulls in kin-openapi and a JSON Schema validator,
// which the binary does not need.
package spectest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/docs"
)

var (
	loadOnce sync.Once
	openapi  *openapi3.T
	async    *asyncDoc
	loadErr  error
)

func load() (*openapi3.T, *asyncDoc, error) {
	loadOnce.Do(func() {
		loader := openapi3.NewLoader()
		openapi, loadErr = loader.LoadFromData(docs.OpenAPI)
		if loadErr != nil {
			loadErr = fmt.Errorf("docs/openapi.yaml: %w", loadErr)
			return
		}
		if loadErr = openapi.Validate(context.Background()); loadErr != nil {
			loadErr = fmt.Errorf("docs/openapi.yaml: %w", loadErr)
			return
		}
		// Binary and text bodies are checked for their content type only.
		for _, ct := range []string{"image/png", "text/event-stream", "application/openmetrics-text", "text/html", "text/javascript", "text/css"} {
			openapi3filter.RegisterBodyDecoder(ct, openapi3filter.FileBodyDecoder)
		}
		async, loadErr = loadAsyncAPI(docs.AsyncAPI)
	})
	return openapi, async, loadErr
}

// OpenAPI is the loaded and validated docs/openapi.yaml.
func OpenAPI(t testing.TB) *openapi3.T {
	t.Helper()
	doc, _, err := load()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// Excluded are the routes a process may register that the OpenAPI document
// leaves out on purpose, with the reason.
var Excluded = map[string]string{
	"GET /debug/pprof/*": "Go's profiler (http.pprof), an operator's tool with its own protocol",
}

// DocPath turns an echo route path (/v1/viewers/:hotel/count) into its
// OpenAPI form (/v1/viewers/{hotel}/count). A static folder's wildcard
// (/js/*) is the path parameter {asset}.
func DocPath(echoPath string) string {
	if rest, ok := strings.CutSuffix(echoPath, "/*"); ok {
		echoPath = rest + "/:asset"
	}
	return echoParam.ReplaceAllString(echoPath, "{$1}")
}

var echoParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// Operations lists the documented operations as "METHOD /path".
func Operations(t testing.TB) []string {
	doc := OpenAPI(t)
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// RouteKeys lists the routes of e as "METHOD /path" in OpenAPI form,
// leaving out echo's not-found catch-alls and the Excluded routes.
func RouteKeys(e *echo.Echo) []string {
	var out []string
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound {
			continue
		}
		key := r.Method + " " + DocPath(r.Path)
		if _, skip := Excluded[r.Method+" "+r.Path]; skip {
			continue
		}
		if !slices.Contains(out, key) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// Validate checks every response of e, and every frame its sockets and
// streams send, against the documents; problems fail t when it ends.
// Requests that match no route (echo's own 404 and 405) are left alone.
func Validate(t testing.TB, e *echo.Echo) {
	t.Helper()
	doc, adoc, err := load()
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range r.problems {
			t.Errorf("spec drift: %s", p)
		}
	})
	e.Use(middleware(doc, adoc, r))
}

// middleware validates what the handlers behind it answer, into r.
func middleware(doc *openapi3.T, adoc *asyncDoc, r *recorder) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			route := routeOf(doc, c)
			if route == nil {
				// A group's not-found catch-all ends in /*; no route at all
				// leaves the path empty.
				key := c.Request().Method + " " + c.Path()
				if _, skip := Excluded[key]; !skip && c.Path() != "" && !strings.HasSuffix(c.Path(), "/*") {
					r.add("%s: route not in docs/openapi.yaml", key)
				}
				return next(c)
			}
			tee := &teeWriter{ResponseWriter: c.Response().Writer, rec: r, async: adoc, path: c.Request().URL.Path}
			c.Response().Writer = tee
			err := next(c)
			if err != nil {
				// Answer now, so the error body is what we check.
				c.Error(err)
			}
			tee.finish(c, route)
			return nil
		}
	}
}

// recorder collects problems from the server's goroutines.
type recorder struct {
	mu       sync.Mutex
	problems []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.problems) < 50 {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	}
}

// routeOf finds the documented operation of the echo route c matched.
func routeOf(doc *openapi3.T, c echo.Context) *routers.Route {
	if c.Path() == "" {
		return nil
	}
	path := DocPath(c.Path())
	item := doc.Paths.Value(path)
	if item == nil {
		return nil
	}
	op := item.GetOperation(c.Request().Method)
	if op == nil {
		return nil
	}
	return &routers.Route{Spec: doc, Path: path, PathItem: item, Method: c.Request().Method, Operation: op}
}

// maxBody bounds the copy kept of a response body.
const maxBody = 8 << 20

// teeWriter keeps a copy of the response and passes streams through their
// frame checkers.
type teeWriter struct {
	http.ResponseWriter
	rec   *recorder
	async *asyncDoc
	path  string

	status    int
	body      bytes.Buffer
	truncated bool
	sse       *sseParser
	hijacked  bool
}

func (w *teeWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			w.sse = &sseParser{check: w.async.checker(w.rec, "sse", w.path)}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	switch {
	case w.sse != nil:
		w.sse.write(p)
	case w.body.Len()+len(p) <= maxBody:
		w.body.Write(p)
	default:
		w.truncated = true
	}
	return w.ResponseWriter.Write(p)
}

func (w *teeWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish validates the response once the handler returned. Sockets and
// streams are checked frame by frame instead.
func (w *teeWriter) finish(c echo.Context, route *routers.Route) {
	if w.hijacked || w.sse != nil {
		return
	}
	req := c.Request()
	status := c.Response().Status
	if !c.Response().Committed {
		return // nothing was answered (a handler that only hijacked)
	}
	params := map[string]string{}
	for i, name := range c.ParamNames() {
		params[name] = c.ParamValues()[i]
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 c.Response().Header(),
		Body:                   io.NopCloser(bytes.NewReader(w.body.Bytes())),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			ExcludeResponseBody:   w.truncated || req.Method == http.MethodHead,
		},
	}
	if req.Method == http.MethodHead {
		// kin-openapi skips HEAD: at least the status must be documented
		// (on HEAD or on the GET it mirrors).
		if !documentedStatus(route, status) {
			w.rec.add("HEAD %s: status %d not in docs/openapi.yaml", route.Path, status)
		}
		return
	}
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		w.rec.add("%s %s → %d: %s\n  body: %s", req.Method, route.Path, status, Describe(err), truncate(w.body.String(), 600))
	}
}

func documentedStatus(route *routers.Route, status int) bool {
	if route.Operation.Responses.Status(status) != nil || route.Operation.Responses.Default() != nil {
		return true
	}
	if get := route.PathItem.Get; get != nil {
		return get.Responses.Status(status) != nil
	}
	return false
}

// Describe keeps the first line of each problem of a validation error: the
// schema and value dumps that follow drown it.
func Describe(err error) string {
	errs := []error{err}
	var me openapi3.MultiError
	if errors.As(err, &me) {
		errs = me
	}
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		first, _, _ := strings.Cut(e.Error(), "\n")
		parts = append(parts, first)
	}
	return strings.Join(parts, "; ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
