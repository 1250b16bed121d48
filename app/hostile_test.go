package app

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/docs"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
)

// hostileBudget is what one hostile request may make the process allocate,
// whatever it holds: reading a 1 MiB body takes a few MiB by itself. Nesting
// walked level by level once took about a GiB for 30 KB.
const hostileBudget = 24 << 20

// Deep nesting costs little everywhere: 1 MiB of "[" and of {"a": sent as
// the body of every documented operation that takes one, with every
// credential it may need, and the largest frame each socket route reads,
// filled the same way, anonymous routes included. Each is refused with a
// 4xx (or an error event / close), and the process allocates no more than
// hostileBudget for it.
func TestDeepNestingIsRefusedCheaplyEverywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("starts every role")
	}
	cfg := testConfig(t)
	cfg.HTTP.ShutdownTimeout = 15 * time.Second
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	base := serve(t, a)
	tok, err := auth.SignDev(a.Config.Auth.JWTSecret, "hostile-user", time.Hour, nil, "", "")
	require.NoError(t, err)

	const size = 1<<20 - 1024 // under http.body_limit_bytes: the decoder must see it
	bodies := map[string]string{
		"arrays":  strings.Repeat("[", size),
		"objects": strings.Repeat(`{"a":`, size/5),
	}
	doc, err := openapi3.NewLoader().LoadFromData(docs.OpenAPI)
	require.NoError(t, err)
	paths := doc.Paths.Map()
	names := make([]string, 0, len(paths))
	for p := range paths {
		names = append(names, p)
	}
	sort.Strings(names)
	var worst uint64
	ops := 0
	for _, path := range names {
		for method, op := range paths[path].Operations() {
			if op.RequestBody == nil {
				continue
			}
			ops++
			for shape, body := range bodies {
				req, err := http.NewRequest(method, base+fillPath(path), strings.NewReader(body))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set(auth.APIKeyHeader, a.Config.Auth.APIKey)
				req.Header.Set("Idempotency-Key", "hostile")
				var status int
				allocated := allocatedBy(func() {
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					resp.Body.Close()
					status = resp.StatusCode
				})
				worst = max(worst, allocated)
				require.True(t, status >= 400 && status < 500, "%s %s with %s: %d", method, path, shape, status)
				require.Less(t, allocated, uint64(hostileBudget), "%s %s with %s: %d bytes allocated", method, path, shape, allocated)
			}
		}
	}
	require.GreaterOrEqual(t, ops, 12, "the walk found the operations that take a body")

	sockets := map[string]int64{
		"/v1/presence/ws?token=" + tok:                                    a.Config.Presence.MaxFrameBytes,
		"/v1/viewers/ws":                                                  a.Config.Realtime.MaxMessageBytes,
		"/v1/waitingroom/hostile-event/ws?token=" + tok:                   a.Config.Realtime.MaxMessageBytes,
		"/v1/events/hostile-event/live?token=" + tok:                      a.Config.Realtime.MaxMessageBytes,
		"/v1/presence/ws?token=" + tok + "&subscribe=" + deepQuery(1<<12): a.Config.Presence.MaxFrameBytes,
	}
	for path, limit := range sockets {
		for shape, body := range bodies {
			frame := body[:limit]
			allocated := allocatedBy(func() { sendHostileFrame(t, base, path, frame) })
			worst = max(worst, allocated)
			require.Less(t, allocated, uint64(hostileBudget), "%s with %s: %d bytes allocated", path, shape, allocated)
		}
	}
	t.Logf("%d operations with a body, %d socket routes; the most one request allocated: %.1f MiB",
		ops, len(sockets), float64(worst)/(1<<20))
}

// fillPath names something for every path parameter: an event, a hotel
// and a reservation that do not exist are as good as ones that do here.
func fillPath(p string) string {
	return pathParam.ReplaceAllStringFunc(p, func(m string) string {
		switch m {
		case "{id}", "{reservation}", "{payment}":
			return "00000000-0000-4000-8000-000000000000"
		case "{provider}":
			return "sandbox"
		}
		return "hostile-" + strings.Trim(m, "{}")
	})
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

func deepQuery(n int) string { return url.QueryEscape(strings.Repeat("[", n)) }

// sendHostileFrame opens a socket on path (a refused handshake is an answer
// too) and sends frame; the server must answer it with an error event or a
// close, not hang on it.
func sendHostileFrame(t *testing.T, base, path, frame string) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+path, nil)
	if err != nil {
		require.NotNil(t, resp, "%s: %v", path, err)
		require.True(t, resp.StatusCode >= 400 && resp.StatusCode < 500, "%s: handshake answered %d", path, resp.StatusCode)
		return
	}
	defer ws.Close()
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(frame)))
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			require.ErrorAs(t, err, &ce, "%s: the server answers with a close", path)
			return
		}
		if strings.Contains(string(msg), `"event":"error"`) {
			return
		}
	}
}

func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
