package presence

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web/socket"
	"github.com/presenced/presenced/web/wire"
)

// openingGateway serves a gateway's upgrade handler with its opening slots
// taken, as during a burst, and returns a function making one upgrade
// request and returning its response.
func openingGateway(t *testing.T, mutate func(*config.Presence)) (*gateway, func() *http.Response) {
	t.Helper()
	const secret = "gateway-test-secret-0123456789abcdef"
	users, err := auth.NewVerifier(context.Background(), config.Auth{JWTSecret: secret})
	require.NoError(t, err)
	m := newTestModule(t, testenv.Redis(t), testenv.Prefix(t), mutate)
	m.users = users
	m.sockets, err = socket.NewSockets(config.Default().Realtime, prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	g := newGateway(m)
	close(g.listening)
	t.Cleanup(func() { close(g.jobs) })
	for i := 0; i < cap(g.opening); i++ {
		g.opening <- struct{}{}
	}
	e := echo.New()
	e.HTTPErrorHandler = wire.ErrorHandler(testenv.Logger())
	e.GET("/ws", g.handle)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	tok, err := auth.SignDev(secret, "storm", time.Minute, nil, "", "")
	require.NoError(t, err)
	return g, func() *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"/ws", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
}

// A reconnect storm beyond what the gateway opens at once and can queue is
// told to come back later (503, jittered Retry-After) before any socket or
// store work: at once when queueing is off, after opening_wait otherwise.
func TestOpeningStormIsShedWithRetryAfter(t *testing.T) {
	t.Parallel()
	for name, wait := range map[string]time.Duration{"no wait": 0, "wait expires": 20 * time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			_, get := openingGateway(t, func(p *config.Presence) { p.MaxOpening = 4; p.OpeningWait = wait })
			resp := get()
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			require.NotEmpty(t, resp.Header.Get("Retry-After"))
		})
	}
}

// A burst beyond the opening slots waits for one instead of being refused:
// a connection queued while every slot is taken goes through when one
// frees (here it reaches the upgrade, which a plain GET fails with 400).
func TestOpeningBurstWaitsForASlot(t *testing.T) {
	t.Parallel()
	g, get := openingGateway(t, func(p *config.Presence) { p.MaxOpening = 2; p.OpeningWait = config.MaxOpeningWait })
	got := make(chan *http.Response, 1)
	go func() { got <- get() }()
	testenv.Eventually(t, 10*time.Second, func() bool { return g.waiting.Load() == 1 }, "the connection waits for a slot")
	<-g.opening
	resp := <-got
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "admitted: the upgrade itself refuses a plain GET")
}

// With max_opening 0 the gateway sizes its slots to the machine.
func TestOpeningSlotsSizedToTheMachine(t *testing.T) {
	t.Parallel()
	require.Equal(t, openingPerCPU*runtime.GOMAXPROCS(0), openingSlots(config.Default().Presence))
	require.Equal(t, 7, openingSlots(config.Presence{MaxOpening: 7}))
}
