package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/module"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestResolveRoles(t *testing.T) {
	t.Parallel()
	roleNames, partNames, err := ResolveRoles([]string{"all"})
	require.NoError(t, err)
	require.Equal(t, []string{"ingest", "count", "presence", "admit", "browse", "booking", "worker"}, roleNames)
	require.Len(t, partNames, len(parts), "all starts every part")

	roleNames, partNames, err = ResolveRoles([]string{"count, INGEST", "count"})
	require.NoError(t, err)
	require.Equal(t, []string{"ingest", "count"}, roleNames)
	require.Equal(t, []string{"viewers.tiers", "booking.directory", "viewers.hotels", "viewers.heartbeat", "viewers.count", "viewers.push"},
		partNames, "shared parts start first, once")

	for _, bad := range [][]string{{"ingest", "nope"}, {}, {" , "}} {
		_, _, err := ResolveRoles(bad)
		require.Error(t, err)
		require.Contains(t, err.Error(), "valid roles are ingest, count, presence, admit, browse, booking, worker, all")
	}
}

// Every part in the role table exists and every part belongs to a role,
// directly or as a part another one starts after. Built parts declare their
// stores; parts not built yet declare none.
func TestRoleTableIsConsistent(t *testing.T) {
	t.Parallel()
	inRole := map[string]bool{}
	for _, r := range roles {
		require.NotEmpty(t, r.parts, r.name)
		for _, p := range r.parts {
			_, ok := parts[p]
			require.True(t, ok, "role %s names unknown part %s", r.name, p)
			for _, started := range withAfter(nil, p) { // p and the parts it starts after, transitively
				_, ok := parts[started]
				require.True(t, ok, "part %s starts after unknown part %s", p, started)
				inRole[started] = true
			}
		}
	}
	for p, def := range parts {
		require.True(t, inRole[p], "part %s is in no role", p)
		if def.start == nil {
			require.Empty(t, def.needs, "part %s is not built and declares stores", p)
		} else {
			require.NotEmpty(t, def.needs, "part %s declares no stores", p)
		}
	}
	for _, p := range roleNamed(t, "admit").parts { // admit holds no database credentials
		require.NotContains(t, parts[p].needs, needPostgres)
		require.NotContains(t, parts[p].needs, needReadOnly)
	}
}

func roleNamed(t *testing.T, name string) role {
	t.Helper()
	i := slices.IndexFunc(roles, func(r role) bool { return r.name == name })
	require.GreaterOrEqual(t, i, 0, "no role %s", name)
	return roles[i]
}

// A part gets from its host only the stores it declared.
func TestPartsGetOnlyTheirDeclaredStores(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"admit"}
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	var asked []error
	a.table = map[string]part{"waitingroom.admit": {needs: deps(needRedis), start: func(ctx context.Context, _ *App, h module.Host) error {
		_, err := h.Redis(ctx)
		require.NoError(t, err)
		_, err = h.Hub(ctx)
		require.NoError(t, err)
		_, err = h.Postgres(ctx, store.PoolMain)
		asked = append(asked, err)
		_, err = h.Postgres(ctx, store.PoolReadOnly)
		asked = append(asked, err)
		return nil
	}}}
	a.parts = []string{"waitingroom.admit"}
	require.NoError(t, a.Start(context.Background()))
	t.Cleanup(func() { _ = a.Shutdown() })
	for _, err := range asked {
		require.ErrorIs(t, err, module.ErrUndeclared)
	}
	require.Empty(t, a.openedPools(), "an undeclared store is never opened")
}

// A start whose context ends (SIGTERM while waiting for a store) stops
// with the context's error before starting further parts.
func TestStartStopsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"admit"}
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var started []string
	a.table = map[string]part{}
	for _, name := range []string{"first", "second"} {
		a.table[name] = part{needs: deps(needRedis), start: func(ctx context.Context, _ *App, _ module.Host) error {
			started = append(started, name)
			cancel() // the signal arrives while the first part starts
			return nil
		}}
	}
	a.parts = []string{"first", "second"}
	err = a.Start(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"first"}, started)
	_ = a.Shutdown()
}

func testConfig(t *testing.T) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.Redis.URL = testenv.RedisURL(t)
	cfg.Redis.Prefix = testenv.Prefix(t)
	cfg.Postgres.URL = testenv.OwnPostgresURL(t)
	cfg.HTTP.ShutdownTimeout = 5 * time.Second
	return cfg
}

// Each role starts exactly its parts and connects only the stores they need.
func TestEachRoleStartsOnlyItsParts(t *testing.T) {
	t.Parallel()
	for _, r := range roles {
		t.Run(r.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Roles = []string{r.name}
			a, err := New(cfg, testenv.Logger())
			require.NoError(t, err)
			var started []string
			a.table = map[string]part{}
			for name, p := range parts {
				if p.start == nil {
					a.table[name] = p
					continue
				}
				p.start = func(_ context.Context, a *App, h module.Host) error {
					started = append(started, name)
					h.Routes().GET("/test/"+name, func(c echo.Context) error { return c.NoContent(204) })
					return nil
				}
				a.table[name] = p
			}
			require.NoError(t, a.Start(context.Background()))
			t.Cleanup(func() { _ = a.Shutdown() })
			_, want, err := ResolveRoles([]string{r.name})
			require.NoError(t, err)
			want = slices.DeleteFunc(want, func(p string) bool { return parts[p].start == nil })
			require.Equal(t, want, started)
			require.Equal(t, want, a.Started())
			for name := range parts {
				want := slices.Contains(started, name)
				found := slices.ContainsFunc(a.Server.Echo.Routes(), func(rt *echo.Route) bool { return rt.Path == "/test/"+name })
				require.Equal(t, want, found, "route of %s mounted", name)
			}
			requireDeclaredStores(t, a, r.name)
		})
	}
}

// requireDeclaredStores checks that a process of role opened exactly the
// stores its parts declare.
func requireDeclaredStores(t *testing.T, a *App, roleName string) {
	t.Helper()
	_, names, err := ResolveRoles([]string{roleName})
	require.NoError(t, err)
	declared := map[dependency]bool{}
	for _, p := range names {
		for _, d := range parts[p].needs {
			declared[d] = true
		}
	}
	var want []string
	for _, purpose := range []string{store.PoolMain, store.PoolReadOnly, store.PoolWebhook} {
		if declared[poolNeed(purpose)] {
			want = append(want, purpose)
		}
	}
	require.ElementsMatch(t, want, a.openedPools(), "pools of %s", roleName)
	a.mu.Lock()
	hasRedis := a.redis != nil
	a.mu.Unlock()
	require.Equal(t, declared[needRedis], hasRedis, "redis client of %s", roleName)
}

// Like Mimir's modules test: every real role starts alone against real
// stores, so a missing dependency fails here and not in production.
func TestEveryRoleStartsAlone(t *testing.T) {
	t.Parallel()
	for _, name := range RoleNames() {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Roles = []string{name}
			a, err := New(cfg, testenv.Logger())
			require.NoError(t, err)
			require.NoError(t, a.Start(context.Background()))
			base := serve(t, a)
			code, body := get(t, base+"/readyz")
			require.Equal(t, 200, code, body)
			if name != "all" {
				requireDeclaredStores(t, a, name)
			}
		})
	}
}

func serve(t *testing.T, a *App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("app did not stop")
		}
	})
	return "http://" + ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Zero-config: no store configured. The development Redis and the private
// PostgreSQL come up, /readyz answers 200, and a second start reuses the
// data folder (its data survives).
func TestZeroConfigStartsAndReusesTheDataFolder(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	base, err := os.MkdirTemp("", "presenced-zeroconfig-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	cfg.DataDir = filepath.Join(base, "var")

	run := func(check func(a *App)) {
		a, err := New(cfg, testenv.Logger())
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, a.Start(context.Background()))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx, ln) }()
		code, body := get(t, "http://"+ln.Addr().String()+"/readyz")
		require.Equal(t, 200, code, body)
		for _, c := range []string{"redis", "postgres-main", "postgres-readonly"} {
			require.Contains(t, body, `"`+c+`":"ok"`)
		}
		t.Logf("ready in %s", time.Since(start))
		check(a)
		cancel()
		require.NoError(t, <-done)
	}
	run(func(a *App) {
		pool, err := a.Postgres(context.Background(), store.PoolMain)
		require.NoError(t, err)
		_, err = pool.Exec(context.Background(), "CREATE TABLE zero_config_marker (id int)")
		require.NoError(t, err)
	})
	_, err = os.Stat(filepath.Join(cfg.DataDir, "postgres", "PG_VERSION"))
	require.NoError(t, err)
	secrets, err := os.ReadFile(filepath.Join(cfg.DataDir, "dev-secrets.json"))
	require.NoError(t, err)
	run(func(a *App) {
		pool, err := a.Postgres(context.Background(), store.PoolMain)
		require.NoError(t, err)
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM zero_config_marker").Scan(&n))
		require.Zero(t, n)
		ro, err := a.Postgres(context.Background(), store.PoolReadOnly)
		require.NoError(t, err)
		_, err = ro.Exec(context.Background(), "INSERT INTO zero_config_marker VALUES (1)")
		require.Error(t, err, "the read-only login cannot write")
	})
	again, err := os.ReadFile(filepath.Join(cfg.DataDir, "dev-secrets.json"))
	require.NoError(t, err)
	require.Equal(t, string(secrets), string(again), "development secrets are reused")
	_, running := pgRunning(filepath.Join(cfg.DataDir, "postgres"))
	require.False(t, running, "the private PostgreSQL stops on exit")
}

func pgRunning(dir string) (string, bool) {
	_, err := os.Stat(filepath.Join(dir, "postmaster.pid"))
	return dir, err == nil
}

func TestMigrateOffRefusesAnOutOfDateSchema(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Postgres.URL = testenv.NewDatabase(t)
	cfg.Postgres.MigrateOnStart = false
	cfg.Roles = []string{"booking"}
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	err = a.Start(context.Background())
	require.ErrorContains(t, err, "presenced migrate")
	_ = a.Shutdown()
}

// Shutdown tells WebSocket clients to come back later with a close frame
// carrying a jittered delay, and finishes within the timeout.
func TestGracefulShutdownClosesWebSockets(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"admit"}
	cfg.Realtime.ReconnectMinWait, cfg.Realtime.ReconnectMaxWait = 2*time.Second, 4*time.Second
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	a.Routes().GET("/test/ws", func(c echo.Context) error {
		conn, err := a.Server.Sockets.Upgrade(c, "test")
		if err != nil {
			return err
		}
		for {
			if _, err := conn.Read(); err != nil {
				return nil
			}
		}
	})
	require.NoError(t, a.Start(context.Background()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ln) }()

	const clients = 5
	conns := make([]*websocket.Conn, clients)
	for i := range conns {
		conns[i], _, err = websocket.DefaultDialer.Dial("ws://"+ln.Addr().String()+"/test/ws", nil)
		require.NoError(t, err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return a.Server.Sockets.Live() == clients }, "clients connected")
	// The collector's tuner reads bursts from the sockets of every kind, and
	// runs in a process without the presence gateway too.
	require.EqualValues(t, clients, a.Server.Sockets.Opened())
	require.Contains(t, a.runningLoops(), "gc-tuner")

	start := time.Now()
	cancel()
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _, err := c.ReadMessage()
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, websocket.CloseServiceRestart, ce.Code)
		var hint struct{ ReconnectMs int64 }
		require.NoError(t, json.Unmarshal([]byte(ce.Text), &hint), ce.Text)
		require.GreaterOrEqual(t, hint.ReconnectMs, int64(2000))
		require.Less(t, hint.ReconnectMs, int64(4000))
		_ = c.Close()
	}
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(cfg.HTTP.ShutdownTimeout + 2*time.Second):
		t.Fatal("shutdown did not finish within its timeout")
	}
	require.Less(t, time.Since(start), cfg.HTTP.ShutdownTimeout)
}

func TestHTTPPlumbing(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"admit"}
	cfg.HTTP.BodyLimitBytes = 1024
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	a.Routes().POST("/test/items/:id", func(c echo.Context) error {
		_, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.NoContent(204)
	})
	a.Routes().GET("/test/panic", func(echo.Context) error { panic("boom") })
	require.NoError(t, a.Start(context.Background()))
	base := serve(t, a)

	resp, err := http.Post(base+"/test/items/42", "application/json", strings.NewReader(strings.Repeat("x", 2048)))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 413, resp.StatusCode)
	require.JSONEq(t, `{"error":{"code":"body_too_large","message":"Request Entity Too Large"}}`, string(body))
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"))

	code, body2 := get(t, base+"/test/panic")
	require.Equal(t, 500, code)
	require.JSONEq(t, `{"error":{"code":"internal","message":"internal error"}}`, body2)

	for i := 0; i < 3; i++ {
		resp, err := http.Post(fmt.Sprintf("%s/test/items/%d", base, i), "application/json", strings.NewReader("{}"))
		require.NoError(t, err)
		resp.Body.Close()
	}
	code, _ = get(t, base+"/no/such/path/123")
	require.Equal(t, 404, code)
	_, metrics := get(t, base+"/metrics")
	require.Contains(t, metrics, `presenced_http_request_duration_seconds_count{code="204",method="POST",route="/test/items/:id"} 3`)
	require.NotContains(t, metrics, "/no/such/path/123", "raw paths never become labels")
	require.Contains(t, metrics, "go_goroutines")
	require.Contains(t, metrics, "process_resident_memory_bytes")

	code, _ = get(t, base+"/healthz")
	require.Equal(t, 200, code)
}

func TestReadyzFailsWhenAStoreIsDown(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	cfg := testConfig(t)
	cfg.Redis.URL = srv.URL
	cfg.Roles = []string{"admit"}
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	base := serve(t, a)
	code, _ := get(t, base+"/readyz")
	require.Equal(t, 200, code)
	require.NoError(t, srv.Stop())
	// Probes share a round of checks for a second: the next rounds see it.
	var body string
	testenv.Eventually(t, 15*time.Second, func() bool {
		code, body = get(t, base+"/readyz")
		return code == 503
	}, "readyz reports the stopped Redis")
	require.Contains(t, body, `"redis":"unavailable"`)
	require.NotContains(t, body, "127.0.0.1", "no addresses leak")
}

// The viewers' own rate-limit Redis comes through the ingest part's host
// and shows in /readyz; the process fails open without it, so its loss
// makes it degraded, not unready.
func TestLimitRedisIsReportedButNotRequired(t *testing.T) {
	t.Parallel()
	limits := testenv.NewRedisServer(t)
	cfg := testConfig(t)
	cfg.Roles = []string{"ingest"}
	cfg.Viewers.RateLimitRedisURL = limits.URL
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	base := serve(t, a)
	code, body := get(t, base+"/readyz")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"redis-limits":"ok"`)
	require.NoError(t, limits.Stop())
	testenv.Eventually(t, 15*time.Second, func() bool {
		code, body = get(t, base+"/readyz")
		return strings.Contains(body, `"redis-limits":"degraded"`)
	}, "readyz reports the stopped rate-limit Redis")
	require.Equal(t, 200, code, "still ready: %s", body)
}

// A loop that ignores its context is named when shutdown gives up on it,
// so an operator (or a failing test) knows which one to look at.
func TestShutdownNamesTheLoopsThatDidNotStop(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"admit"}
	cfg.HTTP.ShutdownTimeout = 200 * time.Millisecond
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	release := make(chan struct{})
	defer close(release)
	a.Go("polite", func(ctx context.Context) error { <-ctx.Done(); return nil })
	a.Go("stubborn", func(context.Context) error { <-release; return nil })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ln) }()
	cancel()
	err = <-done
	require.ErrorContains(t, err, "background loops did not stop in time: ")
	require.Contains(t, err.Error(), "stubborn")
}
