package presence

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web"
)

// A reconnect storm beyond what the gateway opens at once is told to come
// back later (503, jittered Retry-After) before any socket or store work.
func TestOpeningStormIsShedWithRetryAfter(t *testing.T) {
	t.Parallel()
	const secret = "gateway-test-secret-0123456789abcdef"
	users, err := auth.NewVerifier(context.Background(), config.Auth{JWTSecret: secret})
	require.NoError(t, err)
	m := newTestModule(t, testenv.Redis(t), testenv.Prefix(t), nil)
	m.users = users
	g := newGateway(m)
	t.Cleanup(func() { close(g.jobs) })
	for i := 0; i < maxOpening; i++ {
		g.opening <- struct{}{}
	}
	e := echo.New()
	e.HTTPErrorHandler = web.ErrorHandler(testenv.Logger())
	e.GET("/ws", g.handle)
	srv := httptest.NewServer(e)
	defer srv.Close()
	tok, err := auth.SignDev(secret, "storm", time.Minute, nil, "", "")
	require.NoError(t, err)
	req, _ := http.NewRequest("GET", srv.URL+"/ws", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
}
