package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
)

type client struct {
	t    *testing.T
	base string
}

func (c client) do(method, path string, hdr map[string]string, body string) (int, http.Header, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	require.NoError(c.t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

// A sale through every plane with the real stores and no stand-ins: the
// admin creates the event and its waiting room, a buyer joins the line, the
// worker admits her, the booking plane verifies her pass against the live
// lease and holds seats, the browse plane shows them taken. With the
// coordination store down, holds fail closed.
func TestSaleAcrossPlanes(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	cfg := testConfig(t)
	cfg.Redis.URL = srv.URL
	cfg.Roles = []string{"admit", "booking", "browse", "worker"}
	cfg.Waitingroom.TickInterval = 100 * time.Millisecond
	cfg.Waitingroom.TickLeaseTTL = time.Second
	cfg.Outbox.PollInterval = 20 * time.Millisecond
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	for _, p := range []string{"booking.holds", "booking.expiry", "booking.seatmap", "booking.live", "outbox.relay", "waitingroom.admit", "waitingroom.ticker"} {
		require.Contains(t, a.Started(), p)
	}
	c := client{t: t, base: serve(t, a)}
	admin := map[string]string{auth.APIKeyHeader: a.Config.Auth.APIKey}
	event := fmt.Sprintf("sale-%d", time.Now().UnixNano())

	code, _, out := c.do("POST", "/v1/admin/events", admin,
		`{"id":"`+event+`","currency":"EUR","startsAt":"2031-01-01T20:00:00Z","sections":[{"id":"A","rows":2,"seatsPerRow":5,"basePrice":5000}]}`)
	require.Equal(t, 201, code, out)
	code, _, out = c.do("PUT", "/v1/admin/waitingrooms/"+event, admin, `{"capacity":5,"batch":5}`)
	require.Equal(t, 201, code, out)

	code, _, seatMap := c.do("GET", "/v1/events/"+event+"/seats", nil, "")
	require.Equal(t, 200, code)
	seats := seatMap["seats"].([]any)
	seat := func(i int) string { return fmt.Sprint(int64(seats[i].(map[string]any)["id"].(float64))) }

	user := "buyer-" + event
	tok, err := auth.SignDev(a.Config.Auth.JWTSecret, user, time.Hour, nil, "", "")
	require.NoError(t, err)
	bearer := map[string]string{"Authorization": "Bearer " + tok}
	var pass string
	testenv.Eventually(t, 10*time.Second, func() bool {
		code, _, out = c.do("POST", "/v1/waitingroom/"+event+"/join", bearer, "")
		if code == 200 && out["state"] == "admitted" {
			pass = out["pass"].(string)
			return true
		}
		return false
	}, "admitted by the worker")

	hold := func(key, pass, body string) (int, map[string]any) {
		code, _, out := c.do("POST", "/v1/events/"+event+"/holds", map[string]string{
			"Authorization": "Bearer " + tok, booking.HeaderAdmissionPass: pass, booking.HeaderIdempotencyKey: key,
		}, body)
		return code, out
	}
	code, out = hold("k0", "forged.pass.value", `{"seats":[`+seat(0)+`]}`)
	require.Equal(t, 403, code, out)
	code, out = hold("k1", pass, `{"seats":[`+seat(0)+`,`+seat(1)+`]}`)
	require.Equal(t, 201, code, out)
	require.Equal(t, float64(10000), out["total"])

	testenv.Eventually(t, 5*time.Second, func() bool {
		_, _, m := c.do("GET", "/v1/events/"+event+"/seats", nil, "")
		s := m["seats"].([]any)
		return s[0].(map[string]any)["status"] == "HELD" && s[1].(map[string]any)["status"] == "HELD"
	}, "the seat map shows the hold once the relay invalidated the snapshot")

	// The coordination store goes away: a pass cannot be checked, so
	// nobody is let in.
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(srv.URL, "redis://")})
	defer rdb.Close()
	require.NoError(t, srv.Stop())
	other := "other-" + event
	tok2, _ := auth.SignDev(a.Config.Auth.JWTSecret, other, time.Hour, nil, "", "")
	code, hdr, out := c.do("POST", "/v1/events/"+event+"/holds", map[string]string{
		"Authorization": "Bearer " + tok2, booking.HeaderAdmissionPass: pass, booking.HeaderIdempotencyKey: "x",
	}, `{"seats":[`+seat(5)+`]}`)
	require.Equal(t, 503, code, out)
	require.NotEmpty(t, hdr.Get("Retry-After"))
	code, _, out = c.do("POST", "/v1/waitingroom/"+event+"/join", bearer, "")
	require.Equal(t, 503, code, out)
	code, _, _ = c.do("GET", "/v1/events/"+event+"/seats?format=bitmap", nil, "")
	require.Equal(t, 200, code, "the seat map falls back to the database")

	pool, err := a.Postgres(context.Background(), "main")
	require.NoError(t, err)
	var held int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM seats WHERE event_id = $1 AND status <> 'AVAILABLE'`, event).Scan(&held))
	require.Equal(t, 2, held, "nothing granted during the outage")
}
