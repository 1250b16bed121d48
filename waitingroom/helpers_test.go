package waitingroom

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/admission"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/keyring"
	"github.com/presenced/presenced/internal/module/moduletest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web"
	"github.com/presenced/presenced/web/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	testSecret = "waitingroom-test-secret-0123456789abcdef"
	testAPIKey = "waitingroom-test-api-key"
)

// bundle is one process's waiting room over a test Redis.
type bundle struct {
	rdb    redis.UniversalClient
	keys   store.Keyspace
	cfg    config.Waitingroom
	ring   *keyring.Ring
	mod    *Module
	line   *lineStore
	ticker *admissionTicker
	reg    *prometheus.Registry
	srv    *web.Server
	host   *moduletest.Host
}

func testConfig() config.Waitingroom {
	cfg := config.Default().Waitingroom
	cfg.TickInterval = 50 * time.Millisecond
	cfg.TickLeaseTTL = 500 * time.Millisecond
	cfg.PositionInterval = 100 * time.Millisecond
	cfg.KeepaliveInterval = 300 * time.Millisecond
	cfg.StoreTimeout = 3 * time.Second
	cfg.RetryAfter = 2 * time.Second
	return cfg
}

// newRing returns a signing ring with kid.
func newRing(t testing.TB, kid string) *keyring.Ring {
	t.Helper()
	signing, _, err := keyring.Generate(kid)
	require.NoError(t, err)
	r, err := keyring.Parse(signing, nil)
	require.NoError(t, err)
	return r
}

// newBundle builds a module on rdb under prefix (several bundles on one
// prefix are several processes of one deployment).
func newBundle(t testing.TB, rdb redis.UniversalClient, prefix string, ring *keyring.Ring, mutate func(*config.Waitingroom)) *bundle {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	reg := prometheus.NewRegistry()
	h, err := hub.New(rdb, reg, testenv.Logger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	keys := store.NewKeyspace(prefix)
	m, err := New(Deps{Keys: keys, PassKeys: func() (*keyring.Ring, error) { return ring, nil }, Config: cfg, Metrics: reg, Log: testenv.Logger()})
	require.NoError(t, err)
	full := config.Default()
	full.Realtime.PingInterval = time.Second
	full.Realtime.PongTimeout = 3 * time.Second
	srv, err := web.NewServer(full, prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	users, err := auth.NewVerifier(context.Background(), config.Auth{JWTSecret: testSecret})
	require.NoError(t, err)
	host := moduletest.New(t, srv, moduletest.Stores{Redis: rdb, Hub: h, Users: users, APIKey: testAPIKey})
	require.NoError(t, m.StartVerify(context.Background(), host))
	if ring.CanSign() { // tests issue passes without mounting the admit plane
		m.issuer, err = admission.NewIssuer(ring, cfg.PassTTL)
		require.NoError(t, err)
	}
	ticker := newTicker(rdb, m.line, h, cfg, m.metrics, testenv.Logger())
	return &bundle{rdb: rdb, keys: keys, cfg: cfg, ring: ring, mod: m, line: m.line, ticker: ticker, reg: reg, srv: srv, host: host}
}

// redisKinds runs f against a single Redis and a Redis Cluster.
func redisKinds(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("single", func(t *testing.T) {
		t.Parallel()
		f(t, testenv.Redis(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		f(t, testenv.RedisCluster(t))
	})
}

func setup(t testing.TB, rdb redis.UniversalClient, mutate func(*config.Waitingroom)) *bundle {
	t.Helper()
	return newBundle(t, rdb, testenv.Prefix(t), newRing(t, "k1"), mutate)
}

// openRoom creates event's waiting room with s (defaults where zero).
func (b *bundle) openRoom(t testing.TB, event string, s Settings) {
	t.Helper()
	d := b.mod.defaults()
	if s.Capacity == 0 {
		s.Capacity = d.Capacity
	}
	if s.Batch == 0 {
		s.Batch = d.Batch
	}
	if s.LeaseSeconds == 0 {
		s.LeaseSeconds = d.LeaseSeconds
	}
	if s.HeartbeatTimeoutSeconds == 0 {
		s.HeartbeatTimeoutSeconds = d.HeartbeatTimeoutSeconds
	}
	if s.Mode == "" {
		s.Mode = ModeFIFO
	}
	require.NoError(t, s.validate())
	require.NoError(t, b.line.PutSettings(context.Background(), event, s))
}

func (b *bundle) join(t testing.TB, event, user string) placeInLine {
	t.Helper()
	_, p, err := b.line.Join(context.Background(), event, user)
	require.NoError(t, err)
	return p
}

// tick sweeps and runs one tick of event as a worker would, without the
// period guard.
func (b *bundle) tick(t testing.TB, event string) tickResult {
	t.Helper()
	return b.tickWith(t, event, b.tickOptions(0))
}

// tickWith sweeps and ticks event with o.
func (b *bundle) tickWith(t testing.TB, event string, o tickOptions) tickResult {
	t.Helper()
	swept, err := b.line.Sweep(context.Background(), event, o)
	require.NoError(t, err)
	o.Swept = swept
	r, err := b.line.Tick(context.Background(), event, o)
	require.NoError(t, err)
	return r
}

func (b *bundle) tickOptions(minGap time.Duration) tickOptions {
	return tickOptions{MinGap: minGap, CleanupLimit: b.cfg.CleanupLimit, SweepLimit: b.cfg.SweepLimit, Period: b.cfg.TickInterval, OutageGap: time.Hour, Window: b.cfg.ETAWindow}
}

// redisNow is the Redis clock in ms.
func redisNow(t testing.TB, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	// TIME is routed to any node; on a cluster the nodes share this host's clock.
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	return now.UnixMilli()
}

// setHeartbeat moves user's heartbeat to at (ms), to make entries stale.
func (b *bundle) setHeartbeat(t testing.TB, event, user string, at int64) {
	t.Helper()
	ctx := context.Background()
	line := keysOf(b.keys, event).line
	score, err := b.rdb.ZScore(ctx, line, user).Result()
	require.NoError(t, err)
	require.NoError(t, b.rdb.ZAddXX(ctx, line, redis.Z{Score: entryScore(entryPlace(score), at/1000), Member: user}).Err())
}

// heartbeat is user's last heartbeat (ms, to the second).
func (b *bundle) heartbeat(t testing.TB, event, user string) int64 {
	t.Helper()
	score, err := b.rdb.ZScore(context.Background(), keysOf(b.keys, event).line, user).Result()
	require.NoError(t, err)
	now := redisNow(t, b.rdb, "") / 1000
	silent := ((now-int64(score))%beatModulo + beatModulo) % beatModulo
	return (now - silent) * 1000
}

func (b *bundle) activeCount(t testing.TB, event string) int64 {
	t.Helper()
	n, err := b.rdb.ZCount(context.Background(), keysOf(b.keys, event).leases, fmt.Sprintf("(%d", redisNow(t, b.rdb, "")), "+inf").Result()
	require.NoError(t, err)
	return n
}

// server is the admit plane over HTTP.
type server struct {
	*bundle
	url string
}

func newServer(t *testing.T, b *bundle) *server {
	t.Helper()
	require.NoError(t, b.mod.StartAdmit(context.Background(), b.host))
	srv := b.srv
	ts := httptest.NewServer(srv.Echo)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Sockets.CloseAll(ctx)
		ts.Close()
	})
	return &server{bundle: b, url: ts.URL}
}

func token(t testing.TB, user string) string {
	t.Helper()
	tok, err := auth.SignDev(testSecret, user, time.Hour, nil, "", "")
	require.NoError(t, err)
	return tok
}

// call makes a request and decodes a JSON answer into out (when not nil).
func (s *server) call(t testing.TB, method, path, user string, body any, out any) (int, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		switch v := body.(type) {
		case string:
			rd = strings.NewReader(v)
		default:
			raw, err := json.Marshal(v)
			require.NoError(t, err)
			rd = bytes.NewReader(raw)
		}
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	switch user {
	case "":
	case "admin":
		req.Header.Set(auth.APIKeyHeader, testAPIKey)
	default:
		req.Header.Set("Authorization", "Bearer "+token(t, user))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, out), string(raw))
	}
	return resp.StatusCode, resp.Header
}

// answer is the union of the queued and admitted answers.
type answer struct {
	State         string     `json:"state"`
	Position      *int64     `json:"position"`
	AheadOfYou    *int64     `json:"aheadOfYou"`
	EtaSeconds    *int64     `json:"etaSeconds"`
	EtaIsEstimate bool       `json:"etaIsEstimate"`
	Paused        bool       `json:"paused"`
	OpensAt       *time.Time `json:"opensAt"`
	Lottery       string     `json:"lottery"`
	Pass          string     `json:"pass"`
	ExpiresAt     time.Time  `json:"expiresAt"`
	Code          string     `json:"code"`
	Message       string     `json:"message"`
}

// dialWS opens the waiting-room socket of event for user.
func (s *server) dialWS(t testing.TB, event, user string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(s.url, "http") + "/v1/waitingroom/" + event + "/ws?token=" + token(t, user)
	c, resp, err := websocket.DefaultDialer.Dial(u, nil)
	if c != nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, resp, err
}

// readFrame reads one envelope and decodes its payload.
func readFrame(t testing.TB, c *websocket.Conn, timeout time.Duration) (wire.Envelope, answer, error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	_, msg, err := c.ReadMessage()
	if err != nil {
		return wire.Envelope{}, answer{}, err
	}
	var env wire.Envelope
	require.NoError(t, json.Unmarshal(msg, &env))
	var a answer
	require.NoError(t, json.Unmarshal(env.Payload, &a), string(msg))
	return env, a, nil
}

func randKey() int64 { return randomDrawKey() }

// counterValue reads a counter from a registry (label "" for one without
// labels).
func counterValue(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" {
				return m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) next() int64 { return c.n.Add(1) }

// LeaseExpiry and ReleaseLease read and end leases as booking would, for
// tests that look at the line's admissions.
func (l *lineStore) LeaseExpiry(ctx context.Context, event, user string) (time.Time, error) {
	return admission.NewLeases(l.rdb, l.keys, 0).Expiry(ctx, event, user)
}

func (l *lineStore) ReleaseLease(ctx context.Context, event, user string) error {
	return admission.NewLeases(l.rdb, l.keys, 0).Release(ctx, event, user)
}
