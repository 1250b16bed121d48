package presence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/app/apptest"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/spectest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/wire"
)

func TestMain(m *testing.M) {
	apptest.RunChildIfAsked()
	testenv.Main(m)
}

const (
	testSecret = "presence-test-secret-0123456789abcdef"
	testAPIKey = "presence-test-api-key"
)

// testConfig is a presence + worker process with intervals small enough
// for behaviour tests.
func testConfig(t testing.TB) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Roles = []string{"presence", "worker"}
	cfg.DataDir = t.TempDir()
	cfg.Redis.URL = testenv.RedisURL(t)
	cfg.Redis.Prefix = testenv.Prefix(t)
	cfg.Postgres.URL = testenv.PostgresURL(t)
	cfg.Auth.JWTSecret = testSecret
	cfg.Auth.APIKey = testAPIKey
	cfg.Auth.DevSecrets = false
	// The worker role runs payments too, which outside development mode
	// needs its provider and keys.
	cfg.Payments.Primary, cfg.Payments.Sandbox.Enabled = "sandbox", "on"
	cfg.Payments.Sandbox.WebhookSecrets = []string{"whsec_presence_tests_000000"}
	cfg.Payments.TicketKey = "t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	cfg.Payments.ManifestKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	// As apptest's: under -race on a loaded two-core machine stopping every
	// loop has taken more than 5 s (a gateway after a Redis restart); a loop
	// that ignores its context is still named by the error.
	cfg.HTTP.ShutdownTimeout = 15 * time.Second
	p := &cfg.Presence
	p.IdleThreshold = time.Minute
	// Sessions live 10 s without pings; tests of the TTL shorten it.
	p.PingInterval = 5 * time.Second
	p.MissBudget = 2
	p.Grace = 600 * time.Millisecond
	p.SchedulerInterval = 50 * time.Millisecond
	p.StreamPoll = 10 * time.Millisecond
	p.CoalesceTick = 20 * time.Millisecond
	p.Shards = 4
	return cfg
}

// server is one running presenced process.
type server struct {
	app  *app.App
	base string // http://host:port
	stop func()
}

func startServer(t testing.TB, cfg config.Config) *server {
	t.Helper()
	a, err := app.New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	spectest.Validate(t, a.Server.Echo)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ln) }()
	var once sync.Once
	s := &server{app: a, base: "http://" + ln.Addr().String()}
	s.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(20 * time.Second):
				t.Error("server did not stop")
			}
		})
	}
	t.Cleanup(s.stop)
	return s
}

// startGateways starts a server with every role and a second one serving
// only presence, sharing cfg's stores: two gateways of one deployment.
func startGateways(t testing.TB, cfg config.Config) (all, gateway *server) {
	t.Helper()
	second := cfg
	second.Roles = []string{"presence"}
	return startServer(t, cfg), startServer(t, second)
}

func token(t testing.TB, user string, rooms ...string) string {
	t.Helper()
	tok, err := auth.SignDev(testSecret, user, time.Hour, rooms, "", "")
	require.NoError(t, err)
	return tok
}

// wsClient is a test client of /v1/presence/ws.
type wsClient struct {
	t      *testing.T
	user   string
	ws     *websocket.Conn
	frames chan frame
	closed chan *websocket.CloseError
	seq    int
	wmu    sync.Mutex
	// pending holds status updates read but not yet waited for, per user.
	pending map[string][]statusJSON
}

type frame struct {
	Event         string          `json:"event"`
	Payload       json.RawMessage `json:"payload"`
	CorrelationID string          `json:"correlationId"`
	V             int             `json:"v"`
	TS            int64           `json:"ts"`
	at            time.Time
}

type updated struct {
	Users  []statusJSON `json:"users"`
	Resync bool         `json:"resync"`
}

type statusJSON struct {
	User         string `json:"user"`
	Status       string `json:"status"`
	Since        int64  `json:"since"`
	LastActiveAt int64  `json:"lastActiveAt"`
	V            int64  `json:"v"`
}

type errorJSON struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Users   []string `json:"users"`
}

func wsURL(base string) string {
	return "ws" + strings.TrimPrefix(base, "http") + "/v1/presence/ws"
}

// connect opens a connection as user and waits for the initial snapshot.
func connect(t *testing.T, s *server, user string, rooms ...string) *wsClient {
	t.Helper()
	c := dialWS(t, s.base, http.Header{"Authorization": {"Bearer " + token(t, user, rooms...)}})
	c.user = user
	f := c.next("presence:updated")
	var u updated
	require.NoError(t, json.Unmarshal(f.Payload, &u))
	require.True(t, u.Resync, "the first frame is the snapshot")
	return c
}

func dialWS(t *testing.T, base string, hdr http.Header) *wsClient {
	t.Helper()
	return dialWSAt(t, wsURL(base), hdr)
}

// dialWSAt dials the gateway's full WebSocket address u (with a query).
func dialWSAt(t *testing.T, u string, hdr http.Header) *wsClient {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(u, hdr)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	require.NoError(t, err)
	c := &wsClient{t: t, ws: ws, frames: make(chan frame, 1024), closed: make(chan *websocket.CloseError, 1)}
	go c.readLoop()
	t.Cleanup(func() { _ = ws.Close() })
	return c
}

func (c *wsClient) readLoop() {
	for {
		_, msg, err := c.ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if ok := asCloseError(err, &ce); ok {
				c.closed <- ce
			} else {
				c.closed <- &websocket.CloseError{Code: websocket.CloseAbnormalClosure, Text: err.Error()}
			}
			close(c.frames)
			return
		}
		var f frame
		if json.Unmarshal(msg, &f) == nil {
			f.at = time.Now()
			c.frames <- f
		}
	}
}

func asCloseError(err error, ce **websocket.CloseError) bool {
	e, ok := err.(*websocket.CloseError)
	if ok {
		*ce = e
	}
	return ok
}

// send writes an event and returns its id.
func (c *wsClient) send(event string, payload any) string {
	c.t.Helper()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.seq++
	id := fmt.Sprintf("r%d", c.seq)
	p, err := json.Marshal(payload)
	require.NoError(c.t, err)
	env := wire.Envelope{V: 1, Event: event, Payload: p, ID: id}
	if payload == nil {
		env.Payload = nil
	}
	b, _ := json.Marshal(env)
	require.NoError(c.t, c.ws.WriteMessage(websocket.TextMessage, b))
	return id
}

func (c *wsClient) sendRaw(b []byte) {
	c.t.Helper()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	require.NoError(c.t, c.ws.WriteMessage(websocket.TextMessage, b))
}

const waitFor = 5 * time.Second

// next returns the next frame of event, skipping others.
func (c *wsClient) next(event string) frame {
	c.t.Helper()
	return c.nextWithin(event, waitFor)
}

func (c *wsClient) nextWithin(event string, d time.Duration) frame {
	c.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("%s: connection closed while waiting for %s", c.user, event)
			}
			if f.Event == event {
				return f
			}
			c.stash(f)
		case <-deadline:
			c.t.Fatalf("%s: no %s within %s", c.user, event, d)
		}
	}
}

// reply waits for the frame answering request id.
func (c *wsClient) reply(id string) frame {
	c.t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("%s: connection closed while waiting for the reply to %s", c.user, id)
			}
			if f.CorrelationID == id {
				return f
			}
			c.stash(f)
		case <-deadline:
			c.t.Fatalf("%s: no reply to %s", c.user, id)
		}
	}
}

// quietReply asserts that request id got no error (success is silent).
func (c *wsClient) quietReply(id string) {
	c.t.Helper()
	deadline := time.After(200 * time.Millisecond)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("%s: connection closed", c.user)
			}
			require.NotEqual(c.t, id, f.CorrelationID, "unexpected reply %s %s", f.Event, f.Payload)
			c.stash(f)
		case <-deadline:
			return
		}
	}
}

func (c *wsClient) errorReply(id string) errorJSON {
	c.t.Helper()
	f := c.reply(id)
	require.Equal(c.t, "error", f.Event, "reply to %s: %s", id, f.Payload)
	var e errorJSON
	require.NoError(c.t, json.Unmarshal(f.Payload, &e))
	return e
}

func (c *wsClient) nextError() errorJSON {
	c.t.Helper()
	f := c.next("error")
	var e errorJSON
	require.NoError(c.t, json.Unmarshal(f.Payload, &e))
	return e
}

// statusOf waits until an update about user shows want, and returns it.
func (c *wsClient) statusOf(user, want string) statusJSON {
	c.t.Helper()
	return c.statusWithin(user, want, waitFor)
}

// Updates read while waiting for one user are kept, in order, for the
// waits on other users: one frame often carries several users.
func (c *wsClient) stash(f frame) {
	if f.Event != "presence:updated" {
		return
	}
	var u updated
	require.NoError(c.t, json.Unmarshal(f.Payload, &u))
	if c.pending == nil {
		c.pending = map[string][]statusJSON{}
	}
	for _, st := range u.Users {
		c.pending[st.User] = append(c.pending[st.User], st)
	}
}

func (c *wsClient) statusWithin(user, want string, d time.Duration) statusJSON {
	c.t.Helper()
	deadline := time.After(d)
	for {
		for len(c.pending[user]) > 0 {
			st := c.pending[user][0]
			c.pending[user] = c.pending[user][1:]
			if st.Status == want {
				return st
			}
		}
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("%s: connection closed while waiting for %s to be %s", c.user, user, want)
			}
			c.stash(f)
		case <-deadline:
			c.t.Fatalf("%s: %s did not become %s within %s", c.user, user, want, d)
		}
	}
}

// quiet asserts that no update about user arrives for d.
func (c *wsClient) quiet(user string, d time.Duration) {
	c.t.Helper()
	require.Empty(c.t, c.pending[user], "unexpected update of %s", user)
	deadline := time.After(d)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return
			}
			c.stash(f)
			require.Empty(c.t, c.pending[user], "unexpected update of %s: %s", user, f.Payload)
		case <-deadline:
			return
		}
	}
}

// subscribe sets the subscriptions and returns the snapshot reply.
func (c *wsClient) subscribe(users ...string) map[string]statusJSON {
	c.t.Helper()
	if users == nil {
		users = []string{}
	}
	id := c.send("subscriptions:set", map[string]any{"users": users})
	f := c.reply(id)
	require.Equal(c.t, "presence:updated", f.Event, "%s", f.Payload)
	var u updated
	require.NoError(c.t, json.Unmarshal(f.Payload, &u))
	out := map[string]statusJSON{}
	for _, st := range u.Users {
		out[st.User] = st
	}
	return out
}

// closeAbruptly drops the TCP connection without a close frame.
func (c *wsClient) closeAbruptly() {
	_ = c.ws.UnderlyingConn().Close()
}

// waitClosed returns the close frame the server sent.
func (c *wsClient) waitClosed() *websocket.CloseError {
	c.t.Helper()
	select {
	case ce := <-c.closed:
		return ce
	case <-time.After(waitFor):
		c.t.Fatalf("%s: connection not closed", c.user)
		return nil
	}
}

func httpDo(t *testing.T, method, url string, body string, hdr map[string]string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
