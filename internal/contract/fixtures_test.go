package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
)

// api calls the server the way a well-behaved client does, to set up.
type api struct {
	t    testing.TB
	base string
}

func (c api) do(method, path string, hdr map[string]string, body string) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	require.NoError(c.t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	_ = d.Decode(&out)
	return resp.StatusCode, out
}

func (c api) must(want int, method, path string, hdr map[string]string, body string) map[string]any {
	c.t.Helper()
	code, out := c.do(method, path, hdr, body)
	require.Equal(c.t, want, code, "%s %s: %v", method, path, out)
	return out
}

const (
	testAPIKey     = "contract-api-key"
	testWebhookKey = "whsec_contract"
)

// setUp creates what valid requests need: two events (one behind a
// waiting room every user passed), a promotion, a hotel, contacts, a paid
// reservation with its ticket and a pending one.
func setUp(t testing.TB, base, jwtSecret string) *fixtures {
	c := api{t: t, base: base}
	admin := map[string]string{auth.APIKeyHeader: testAPIKey}
	fx := &fixtures{apiKey: testAPIKey, webhookSecret: testWebhookKey, events: []string{"cf-arena", "cf-quiet"},
		sections: []string{"A", "B"}, promo: "EARLY", hotels: []string{"cf-hotel"}, city: "cfcity", roomTypes: []string{"dbl", "sgl"}}
	c.must(201, "POST", "/v1/admin/events", admin,
		`{"id":"cf-arena","name":"Arena","currency":"EUR","startsAt":"2031-01-01T20:00:00Z","sections":[`+
			`{"id":"A","rows":2,"seatsPerRow":5,"basePrice":5000},{"id":"B","rows":1,"seatsPerRow":5,"basePrice":3000}]}`)
	c.must(201, "POST", "/v1/admin/events", admin,
		`{"id":"cf-quiet","currency":"EUR","startsAt":"2031-02-01T20:00:00Z","sections":[{"id":"A","rows":1,"seatsPerRow":3,"basePrice":100}]}`)
	c.must(201, "PUT", "/v1/admin/waitingrooms/cf-arena", admin, `{"capacity":100000,"batch":10000}`)
	c.must(201, "PUT", "/v1/admin/waitingrooms/cf-quiet", admin, `{"capacity":0,"batch":1}`)
	c.must(201, "POST", "/v1/admin/events/cf-arena/promotions", admin, `{"code":"EARLY","discountBps":1000,"maxUses":1000}`)
	seatMap := c.must(200, "GET", "/v1/events/cf-arena/seats", nil, "")
	for _, s := range seatMap["seats"].([]any) {
		id, _ := s.(map[string]any)["id"].(json.Number).Int64()
		fx.seats = append(fx.seats, id)
	}
	c.must(201, "POST", "/v1/admin/hotels", admin, `{"id":"cf-hotel","name":"Casa","city":"cfcity","timezone":"Europe/Lisbon",`+
		`"currency":"EUR","openNights":60,"roomTypes":[{"id":"dbl","name":"Double","capacity":2,"rooms":3,"basePrice":12000},`+
		`{"id":"sgl","capacity":1,"rooms":2,"basePrice":8000}]}`)

	for i := range 4 {
		u := &user{id: fmt.Sprintf("cf-user-%d", i)}
		var err error
		u.token, err = auth.SignDev(jwtSecret, u.id, 3*time.Hour, nil, "", "")
		require.NoError(t, err)
		bearer := map[string]string{"Authorization": "Bearer " + u.token}
		testenv.Eventually(t, 20*time.Second, func() bool {
			code, out := c.do("POST", "/v1/waitingroom/cf-arena/join", bearer, "")
			if code == 200 && out["state"] == "admitted" {
				u.pass = out["pass"].(string)
				return true
			}
			return false
		}, "%s admitted", u.id)
		fx.users = append(fx.users, u)
	}
	c.must(200, "PUT", "/v1/presence/contacts/cf-user-0", admin, `{"contacts":["cf-user-1","cf-user-2"]}`)

	// users[0] buys seat 0 and holds seat 1.
	u := fx.users[0]
	buyer := map[string]string{"Authorization": "Bearer " + u.token, "X-Admission-Pass": u.pass, "Idempotency-Key": "fx-1"}
	res := c.must(201, "POST", "/v1/events/cf-arena/holds", buyer, fmt.Sprintf(`{"seats":[%d]}`, fx.seats[0]))
	paid := res["id"].(string)
	pay := c.must(201, "POST", "/v1/reservations/"+paid+"/payments", map[string]string{"Authorization": "Bearer " + u.token, "Idempotency-Key": "fx-pay"}, "")
	secret := pay["clientSecret"].(string)
	intent := strings.TrimSuffix(strings.TrimPrefix(pay["confirmUrl"].(string), "/v1/sandbox/psp/intents/"), "/confirm")
	fx.intents, fx.clientSecrets = []string{intent}, []string{secret}
	c.must(200, "POST", pay["confirmUrl"].(string), nil, `{"clientSecret":"`+secret+`"}`)
	mine := map[string]string{"Authorization": "Bearer " + u.token}
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, out := c.do("GET", "/v1/tickets", mine, "")
		if code != 200 {
			return false
		}
		for _, tk := range out["tickets"].([]any) {
			fx.tickets = append(fx.tickets, tk.(map[string]any)["id"].(string))
		}
		return len(fx.tickets) > 0
	}, "the paid reservation's ticket is issued")
	buyer["Idempotency-Key"] = "fx-2"
	res = c.must(201, "POST", "/v1/events/cf-arena/holds", buyer, fmt.Sprintf(`{"seats":[%d]}`, fx.seats[1]))
	fx.reservations = []string{paid, res["id"].(string)}

	other, err := auth.SignDev("another-secret-0123456789abcdef", "cf-user-0", time.Hour, nil, "", "")
	require.NoError(t, err)
	fx.otherTokens = []string{other, u.token[:len(u.token)-2] + "AA", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJjZi11c2VyLTAifQ."}
	return fx
}
