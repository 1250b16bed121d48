package app

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/waitingroom"
)

// The admit and worker parts share one module: a room created through the
// admin API is ticked, the join turns into a pass, and the verifier built
// for the booking plane accepts it (with the development pass key).
func TestWaitingroomWiring(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"admit", "worker"}
	cfg.Waitingroom.TickInterval = 100 * time.Millisecond
	cfg.Waitingroom.TickLeaseTTL = time.Second
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	require.Contains(t, a.Started(), "waitingroom.admit")
	require.Contains(t, a.Started(), "waitingroom.ticker")
	base := serve(t, a)

	do := func(method, path, hdr, val, body string) (int, map[string]any) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(hdr, val)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, _ := do(http.MethodPut, "/v1/admin/waitingrooms/sale", auth.APIKeyHeader, a.Config.Auth.APIKey, `{"capacity":1}`)
	require.Equal(t, http.StatusCreated, code)
	tok, err := auth.SignDev(a.Config.Auth.JWTSecret, "alice", time.Hour, nil, "", "")
	require.NoError(t, err)
	var ans map[string]any
	testenv.Eventually(t, 5*time.Second, func() bool {
		code, ans = do(http.MethodPost, "/v1/waitingroom/sale/join", "Authorization", "Bearer "+tok, "")
		return code == http.StatusOK && ans["state"] == "admitted"
	}, "alice admitted by the ticker")
	v, err := a.waitingroom()
	require.NoError(t, err)
	require.ErrorIs(t, v.Verify(context.Background(), ans["pass"].(string), "sale", "alice"), waitingroom.ErrUnavailable,
		"the worker ends leases but holds no pass keys to check passes with")
	require.NoError(t, v.StartVerify(context.Background(), &partHost{a: a, part: "test", needs: deps(needRedis)}))
	require.NoError(t, v.Verify(context.Background(), ans["pass"].(string), "sale", "alice"))
	require.ErrorIs(t, v.Verify(context.Background(), ans["pass"].(string), "sale", "bob"), waitingroom.ErrNotAdmitted)
	code, _ = do(http.MethodGet, "/v1/waitingroom/keys", "Accept", "application/json", "")
	require.Equal(t, http.StatusOK, code)
}
