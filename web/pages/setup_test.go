package pages_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app/apptest"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// server starts a development process of every role, tuned so that what a
// person would see within seconds happens within a second or two.
func server(t *testing.T, tune ...func(*config.Config)) *apptest.Server {
	t.Helper()
	cfg := apptest.Config(t)
	cfg.Presence.Grace = time.Second
	cfg.Presence.SchedulerInterval = 100 * time.Millisecond
	cfg.Waitingroom.PositionInterval = time.Second
	cfg.Waitingroom.KeepaliveInterval = time.Second
	// A loop blocked in a Redis read can take seconds to notice the stop
	// on a busy machine; the browser tests are not about shutdown.
	cfg.HTTP.ShutdownTimeout = 15 * time.Second
	// A count read slower than count_timeout counts against the breaker,
	// which then serves the last count: on a loaded test machine a
	// PFCOUNT can take longer than the production 200 ms, and the hotel
	// page's count stayed at its first value (as the viewers tests found).
	cfg.Viewers.CountTimeout = 2 * time.Second
	for _, f := range tune {
		f(&cfg)
	}
	return apptest.Start(t, cfg)
}

// call makes an HTTP call and returns the status and body.
func call(t *testing.T, method, url string, headers map[string]string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, out
}

// admin makes a server-to-server call and requires status want.
func admin(t *testing.T, s *apptest.Server, method, path string, body any, want int) []byte {
	t.Helper()
	status, out := call(t, method, s.URL+path, map[string]string{"X-API-Key": s.App.Config.Auth.APIKey}, body)
	require.Equal(t, want, status, "%s %s: %s", method, path, out)
	return out
}

// createHotel creates a hotel and waits until the viewers module counts it.
func createHotel(t *testing.T, s *apptest.Server, id, city, name string) {
	t.Helper()
	admin(t, s, http.MethodPost, "/v1/admin/hotels", map[string]any{
		"id": id, "name": name, "city": city, "timezone": "Europe/Lisbon", "currency": "EUR",
		"roomTypes": []map[string]any{
			{"id": "double", "name": "Double", "capacity": 2, "rooms": 10, "basePrice": 12000},
			{"id": "suite", "name": "Suite", "capacity": 4, "rooms": 2, "basePrice": 30000},
		},
	}, http.StatusCreated)
	testenv.Eventually(t, 30*time.Second, func() bool {
		status, _ := call(t, http.MethodGet, s.URL+"/v1/viewers/"+id+"/count", nil, nil)
		return status == http.StatusOK
	}, "the viewers module learns hotel %s", id)
}

// createEvent creates an on-sale event of one section, rows × seats.
func createEvent(t *testing.T, s *apptest.Server, id string, rows, seats int) {
	t.Helper()
	now := time.Now().UTC()
	admin(t, s, http.MethodPost, "/v1/admin/events", map[string]any{
		"id": id, "name": "Browser Test Night", "currency": "EUR",
		"startsAt": now.Add(30 * 24 * time.Hour).Format(time.RFC3339), "saleOpensAt": now.Add(-time.Minute).Format(time.RFC3339),
		"holdMinutes": 10,
		"sections":    []map[string]any{{"id": "A", "name": "Section A", "rows": rows, "seatsPerRow": seats, "basePrice": 5000}},
	}, http.StatusCreated)
}

// viewer is another person's browser looking at a hotel page: its own
// cookie jar, so it is its own session.
func viewer(t *testing.T, s *apptest.Server, hotel string) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	res, err := c.Post(s.URL+"/v1/viewers/"+hotel+"/heartbeat", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNoContent, res.StatusCode)
}
