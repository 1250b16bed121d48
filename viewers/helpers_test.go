package viewers

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/internal/module/moduletest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fastConfig runs the whole cycle in test time: short flush windows, a
// quick tier cache, and buckets long enough that a test does not straddle
// many of them unless it wants to.
func fastConfig() config.Viewers {
	v := config.Default().Viewers
	v.Bucket = 10 * time.Second
	v.FlushWindow = 50 * time.Millisecond
	v.HotFlushWindow = 20 * time.Millisecond
	v.ProbeInterval = 100 * time.Millisecond
	// FlushTimeout stays at its default: on a loaded machine a shorter one
	// loses batches that Redis would have taken, and counts come out short.
	v.TierCacheTTL = 100 * time.Millisecond
	v.WriteDelay = 300 * time.Millisecond
	v.QuietPeriod = 300 * time.Millisecond
	v.ControllerInterval = 50 * time.Millisecond
	v.RateReportInterval = 200 * time.Millisecond
	v.CountCacheTTL = 50 * time.Millisecond
	v.BreakerCooldown = 200 * time.Millisecond
	v.BreakerFailures = 2
	v.PushInterval = 50 * time.Millisecond
	v.PushThrottle = 500 * time.Millisecond
	v.StreamFlush = 50 * time.Millisecond
	v.AbuseBlock = 100 * time.Millisecond
	v.AbuseClaimIdle = 200 * time.Millisecond
	v.DenylistRefresh = 100 * time.Millisecond
	v.PrefixSyncInterval = 20 * time.Millisecond
	v.HotelRefresh = 50 * time.Millisecond
	// A count read slower than the timeout is a failure, and two open the
	// breaker: on a loaded test machine a PFCOUNT may take longer than the
	// production 200 ms. Tests of slow reads set their own.
	v.CountTimeout = 2 * time.Second
	return v
}

// env is one viewers module on real stores behind a test HTTP server.
type env struct {
	t      testing.TB
	mod    *Module
	srv    *httptest.Server
	rdb    redis.UniversalClient
	reg    *prometheus.Registry
	cfg    config.Viewers
	ring   *keyring.Ring
	apiKey string
	host   *moduletest.Host
}

type envOpts struct {
	cfg      func(*config.Viewers)
	rdb      redis.UniversalClient
	limitRdb redis.UniversalClient
	ring     *keyring.Ring
	prefix   string
	parts    []string // default: heartbeat, count, push
	hotels   Hotels   // the hotel registry's source; nil: any well-formed id
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	cfg := fastConfig()
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	full := config.Default()
	full.Viewers = cfg
	full.Realtime.PingInterval = time.Second
	full.Realtime.PongTimeout = 5 * time.Second
	require.NoError(t, full.Validate())
	rdb := o.rdb
	if rdb == nil {
		rdb = testenv.Redis(t)
	}
	ring := o.ring
	if ring == nil {
		signing, _, err := keyring.Generate("k1")
		require.NoError(t, err)
		ring, err = keyring.Parse(signing, nil)
		require.NoError(t, err)
	}
	prefix := o.prefix
	if prefix == "" {
		prefix = testenv.Prefix(t)
	}
	reg := prometheus.NewRegistry()
	log := testenv.Logger()
	srv, err := web.NewServer(full, reg, log)
	require.NoError(t, err)
	h, err := hub.New(rdb, reg, log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	apiKey := "test-api-key"
	d := Deps{Config: cfg, Keys: store.NewKeyspace(prefix), CookieKeys: func() (*keyring.Ring, error) { return ring, nil },
		Hotels: o.hotels, Metrics: reg, Log: log}
	mod, err := New(d)
	require.NoError(t, err)
	host := moduletest.New(t, srv, moduletest.Stores{Redis: rdb, LimitRedis: o.limitRdb, Hub: h, Postgres: testenv.Postgres(t), APIKey: apiKey})
	parts := o.parts
	if parts == nil {
		parts = []string{"heartbeat", "count", "push"}
	}
	ctx := context.Background()
	if slices.ContainsFunc(parts, func(p string) bool { return p == "heartbeat" || p == "count" || p == "push" }) {
		require.NoError(t, mod.StartTiers(ctx, host))
		require.NoError(t, mod.StartHotels(ctx, host))
	}
	for _, p := range parts {
		switch p {
		case "heartbeat":
			require.NoError(t, mod.StartHeartbeat(ctx, host))
		case "count":
			require.NoError(t, mod.StartCount(ctx, host))
		case "push":
			require.NoError(t, mod.StartPush(ctx, host))
		case "controller":
			require.NoError(t, mod.StartController(ctx, host))
		case "abuse":
			require.NoError(t, mod.StartAbuse(ctx, host))
		}
	}
	ts := httptest.NewServer(srv.Echo)
	e := &env{t: t, mod: mod, srv: ts, rdb: rdb, reg: reg, cfg: cfg, ring: ring, apiKey: apiKey, host: host}
	t.Cleanup(e.stop)
	return e
}

var stopOnce sync.Map

func (e *env) stop() {
	if _, done := stopOnce.LoadOrStore(e, true); done {
		return
	}
	e.srv.CloseClientConnections()
	e.srv.Close()
	e.host.Stop()
}

// client is one browser: it keeps its session cookie.
type client struct {
	e    *env
	http *http.Client
}

func (e *env) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{e: e, http: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
}

func (c *client) heartbeat(hotel string) *http.Response {
	c.e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, c.e.srv.URL+"/v1/viewers/"+hotel+"/heartbeat", nil)
	resp, err := c.http.Do(req)
	require.NoError(c.e.t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// post sends a heartbeat with an explicit cookie header and body.
func (e *env) post(hotel, cookie string, body io.Reader) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/viewers/"+hotel+"/heartbeat", body)
	if cookie != "" {
		req.Header.Set("Cookie", e.cfg.CookieName+"="+cookie)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func (e *env) get(path string, hdr http.Header) (*http.Response, string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// flush writes everything buffered and expires the count cache, so the next
// read sees every accepted heartbeat.
func (e *env) flush() {
	e.t.Helper()
	require.NoError(e.t, e.mod.writer.flush(context.Background()))
	e.mod.counter.cache.clear()
}

// estimate is what a HyperLogLog counts for exactly the sessions of these
// cookies (each counted once): random sessions sharing a register read as
// one, so a count of them is compared with this, not with their number.
func (e *env) estimate(t *testing.T, cookies []string) int64 {
	t.Helper()
	sessions := make([]any, len(cookies))
	for i, c := range cookies {
		sessions[i] = mustVerify(t, e, c)
	}
	scratch := testenv.Prefix(t) + "{estimate}:" + store.NewToken()
	require.NoError(t, e.rdb.PFAdd(t.Context(), scratch, sessions...).Err())
	n, err := e.rdb.PFCount(t.Context(), scratch).Result()
	require.NoError(t, err)
	return n
}

// countOf reads the count through the HTTP endpoint.
func (e *env) countOf(hotel string) Count {
	e.t.Helper()
	resp, body := e.get("/v1/viewers/"+hotel+"/count", nil)
	require.Equal(e.t, http.StatusOK, resp.StatusCode, body)
	var c Count
	require.NoError(e.t, jsonUnmarshal(body, &c))
	return c
}

func (e *env) metric(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

func sessionCookie(resp *http.Response, name string) string {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// commandCounter counts Redis commands by name, inside pipelines too.
type commandCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *commandCounter) add(cmd redis.Cmder) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[strings.ToLower(cmd.Name())]++
	c.mu.Unlock()
}

func (c *commandCounter) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func (c *commandCounter) reset() {
	c.mu.Lock()
	c.n = nil
	c.mu.Unlock()
}

// hashes returns n distinct, reproducible session hashes (splitmix64).
func hashes(seed uint64, n int) []uint64 {
	out := make([]uint64, n)
	x := seed
	for i := range out {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		out[i] = z ^ z>>31
	}
	return out
}
