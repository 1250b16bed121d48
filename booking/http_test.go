package booking

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web"
)

const testSecret = "booking-test-secret-booking-test-secret"

// httpClient calls one booking plane over HTTP: method, path, body and
// headers in; status, headers and body out.
type httpClient func(method, path, body string, hdr map[string]string) (int, http.Header, string)

// serveHTTP mounts b's booking plane on a real server with the process's
// middleware (body limit 4 KiB) and API key "admin-key".
func serveHTTP(t *testing.T, b *bundle) httpClient {
	t.Helper()
	cfg := config.Default()
	cfg.HTTP.BodyLimitBytes = 4096
	srv, err := web.NewServer(cfg, prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	v, err := auth.NewVerifier(context.Background(), config.Auth{JWTSecret: testSecret})
	require.NoError(t, err)
	b.holds.Routes(srv.Echo.Group(""), v.Middleware(), auth.RequireAPIKey("admin-key"))
	ts := httptest.NewServer(srv.Echo)
	t.Cleanup(ts.Close)
	return func(method, path, body string, hdr map[string]string) (int, http.Header, string) {
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(out)
	}
}

func TestHoldOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	do := serveHTTP(t, b)

	spec := `{"id":"http-` + b.run[:len(b.run)-1] + `","currency":"usd","startsAt":"2030-01-01T20:00:00Z","sections":[{"id":"A","rows":1,"seatsPerRow":4,"basePrice":2500}]}`
	code, _, body := do("POST", "/v1/admin/events", spec, nil)
	require.Equal(t, 401, code, body)
	code, _, body = do("POST", "/v1/admin/events", spec, map[string]string{"X-API-Key": "admin-key"})
	require.Equal(t, 201, code, body)
	var sum EventSummary
	require.NoError(t, json.Unmarshal([]byte(body), &sum))
	require.Equal(t, 4, sum.Seats)
	code, _, _ = do("POST", "/v1/admin/events", spec, map[string]string{"X-API-Key": "admin-key"})
	require.Equal(t, 409, code)
	code, _, body = do("POST", "/v1/admin/events", `{"id":"x","currency":"EUR","startsAt":"2030-01-01T20:00:00Z","sections":[]}`,
		map[string]string{"X-API-Key": "admin-key"})
	require.Equal(t, 422, code, body)

	var seat int64
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT min(id) FROM seats WHERE event_id = $1`, sum.ID).Scan(&seat))
	user := b.uid("web")
	tok, err := auth.SignDev(testSecret, user, time.Hour, nil, "", "")
	require.NoError(t, err)
	hdr := map[string]string{
		"Authorization": "Bearer " + tok, HeaderAdmissionPass: b.desk.admit(sum.ID, user),
		HeaderIdempotencyKey: "abc", "Content-Type": "application/json",
	}
	path := "/v1/events/" + sum.ID + "/holds"
	seatsJSON := `{"seats":[` + itoa(seat) + `]}`
	code, _, _ = do("POST", path, seatsJSON, map[string]string{HeaderAdmissionPass: hdr[HeaderAdmissionPass]})
	require.Equal(t, 401, code, "no token")
	code, _, body = do("POST", path, `{"seats":"all"}`, hdr)
	require.Equal(t, 400, code, body)
	require.Contains(t, body, `"code":"bad_request"`)
	code, _, body = do("POST", path, `{"seats":[1],"extra":true}`, hdr)
	require.Equal(t, 400, code, "unknown fields are refused: %s", body)
	code, _, body = do("POST", path, `{"seats":[`+strings.Repeat("1,", 3000)+`1]}`, hdr)
	require.Equal(t, 413, code, body)

	code, h1, first := do("POST", path, seatsJSON, hdr)
	require.Equal(t, 201, code, first)
	require.Empty(t, h1.Get("Idempotent-Replayed"))
	code, h2, again := do("POST", path, seatsJSON, hdr)
	require.Equal(t, 201, code)
	require.Equal(t, "true", h2.Get("Idempotent-Replayed"))
	require.Equal(t, first, again)
	var r Reservation
	require.NoError(t, json.Unmarshal([]byte(first), &r))
	require.Equal(t, "USD", r.Currency)

	authOnly := map[string]string{"Authorization": "Bearer " + tok}
	code, _, body = do("GET", "/v1/reservations/"+r.ID, "", authOnly)
	require.Equal(t, 200, code, body)
	other, _ := auth.SignDev(testSecret, b.uid("other"), time.Hour, nil, "", "")
	code, _, _ = do("GET", "/v1/reservations/"+r.ID, "", map[string]string{"Authorization": "Bearer " + other})
	require.Equal(t, 404, code, "someone else's reservation does not exist for you")
	code, _, _ = do("GET", "/v1/reservations/not-a-uuid", "", authOnly)
	require.Equal(t, 404, code)
	code, _, body = do("DELETE", "/v1/reservations/"+r.ID, "", authOnly)
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"status":"CANCELLED"`)
}
