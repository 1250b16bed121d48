package app

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
)

// A stay through every plane with the real stores: the admin creates a
// hotel on the booking plane; the ingest plane learns it exists (made-up
// hotels stay 404) and counts its viewers; the browse plane finds it by
// city with its live viewer count; a guest holds its last room and the
// search drops it once the worker's relay passed; a cancel brings it back.
func TestStaysAcrossPlanes(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"ingest", "count", "browse", "booking", "worker"}
	cfg.Viewers.HotelRefresh = 50 * time.Millisecond
	cfg.Viewers.FlushWindow = 50 * time.Millisecond
	cfg.Outbox.PollInterval = 20 * time.Millisecond
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	for _, p := range []string{"booking.stays", "booking.search", "booking.directory", "viewers.hotels", "viewers.reader"} {
		require.Contains(t, a.Started(), p)
	}
	c := client{t: t, base: serve(t, a)}
	admin := map[string]string{auth.APIKeyHeader: a.Config.Auth.APIKey}
	hotel := fmt.Sprintf("casa-%d", time.Now().UnixNano())
	city := fmt.Sprintf("porto-%d", time.Now().UnixNano())
	spec := `{"id":"` + hotel + `","name":"Casa Azul","city":"` + city + `","timezone":"Europe/Lisbon","currency":"EUR",` +
		`"openNights":30,"roomTypes":[{"id":"dbl","name":"Double","capacity":2,"rooms":1,"basePrice":12000}]}`

	code, _, out := c.do("POST", "/v1/admin/hotels", admin, spec)
	require.Equal(t, 201, code, out)
	code, _, _ = c.do("POST", "/v1/admin/hotels", admin, spec)
	require.Equal(t, 409, code)
	code, _, _ = c.do("POST", "/v1/admin/hotels", admin, `{"id":"x","city":"Porto Centro","timezone":"Mars/Olympus","currency":"EUR","roomTypes":[]}`)
	require.Equal(t, 422, code)
	code, _, _ = c.do("POST", "/v1/admin/hotels", admin, `{"id":"x","stars":5}`)
	require.Equal(t, 400, code, "unknown fields are refused")
	code, _, _ = c.do("POST", "/v1/admin/hotels", nil, spec)
	require.Equal(t, 401, code)

	code, _, _ = c.do("POST", "/v1/viewers/made-up-"+hotel+"/heartbeat", nil, "")
	require.Equal(t, 404, code, "viewers knows which hotels exist")
	testenv.Eventually(t, 10*time.Second, func() bool {
		code, _, _ := c.do("POST", "/v1/viewers/"+hotel+"/heartbeat", nil, "")
		return code == 204
	}, "the ingest plane learns the new hotel")

	in, outDate := time.Now().AddDate(0, 0, 3).Format("2006-01-02"), time.Now().AddDate(0, 0, 5).Format("2006-01-02")
	search := "/v1/hotels?city=" + city + "&checkIn=" + in + "&checkOut=" + outDate + "&guests=2"
	testenv.Eventually(t, 10*time.Second, func() bool {
		code, _, res := c.do("GET", search, nil, "")
		if code != 200 || len(res["hotels"].([]any)) != 1 {
			return false
		}
		h := res["hotels"].([]any)[0].(map[string]any)
		return h["id"] == hotel && h["viewers"] == float64(1) && h["lowestTotal"] == float64(24000)
	}, "search finds the hotel with its live viewer count")

	tok, err := auth.SignDev(a.Config.Auth.JWTSecret, "guest-"+hotel, time.Hour, nil, "", "")
	require.NoError(t, err)
	guest := map[string]string{"Authorization": "Bearer " + tok, booking.HeaderIdempotencyKey: "stay-1"}
	body := `{"roomType":"dbl","checkIn":"` + in + `","checkOut":"` + outDate + `","rooms":1,"guests":2}`
	code, _, out = c.do("POST", "/v1/hotels/"+hotel+"/holds", guest, body)
	require.Equal(t, 201, code, out)
	require.Equal(t, "stay", out["kind"])
	require.Equal(t, float64(24000), out["total"])
	id := out["id"].(string)
	code, hdr, again := c.do("POST", "/v1/hotels/"+hotel+"/holds", guest, body)
	require.Equal(t, 201, code)
	require.Equal(t, "true", hdr.Get("Idempotent-Replayed"))
	require.Equal(t, out, again)
	code, _, _ = c.do("POST", "/v1/hotels/"+hotel+"/holds", guest, `{"roomType":"dbl","checkIn":"`+in+`","checkOut":"`+outDate+`","rooms":1,"extra":1}`)
	require.Equal(t, 400, code, "strict JSON")
	code, _, _ = c.do("POST", "/v1/hotels/"+hotel+"/holds", map[string]string{booking.HeaderIdempotencyKey: "k"}, body)
	require.Equal(t, 401, code, "a user token is required")

	testenv.Eventually(t, 10*time.Second, func() bool {
		code, _, res := c.do("GET", search, nil, "")
		return code == 200 && len(res["hotels"].([]any)) == 0
	}, "the full hotel leaves the search once the relay passed")

	code, _, res := c.do("GET", "/v1/reservations/"+id, map[string]string{"Authorization": "Bearer " + tok}, "")
	require.Equal(t, 200, code)
	require.Equal(t, hotel, res["hotel"])
	code, _, res = c.do("DELETE", "/v1/reservations/"+id, map[string]string{"Authorization": "Bearer " + tok}, "")
	require.Equal(t, http.StatusOK, code, res)
	require.Equal(t, "CANCELLED", res["status"])
	testenv.Eventually(t, 10*time.Second, func() bool {
		code, _, res := c.do("GET", search, nil, "")
		return code == 200 && len(res["hotels"].([]any)) == 1
	}, "free again after the cancel")
}
