package booking

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web"
)

// fuzzServer is a booking plane over HTTP against the real stores, built
// once per fuzz target.
func fuzzServer(f *testing.F) (*bundle, string, string) {
	b := setup(f)
	cfg := config.Default()
	cfg.HTTP.BodyLimitBytes = 4096
	srv, err := web.NewServer(cfg, prometheus.NewRegistry(), testenv.Logger())
	if err != nil {
		f.Fatal(err)
	}
	v, err := auth.NewVerifier(context.Background(), config.Auth{JWTSecret: testSecret})
	if err != nil {
		f.Fatal(err)
	}
	b.holds.Routes(srv.Echo.Group(""), v.Middleware(), auth.RequireAPIKey("admin-key"))
	ts := httptest.NewServer(srv.Echo)
	f.Cleanup(ts.Close)
	tok, err := auth.SignDev(testSecret, b.uid("fuzzer"), time.Hour, nil, "", "")
	if err != nil {
		f.Fatal(err)
	}
	return b, ts.URL, tok
}

func status(t *testing.T, req *http.Request) int {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0 // the client refused to send it (a header it cannot encode)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// FuzzHoldRequest: whatever a buyer sends as the hold body, the
// Idempotency-Key and the event in the path, the answer is never a 500.
// Seeds: testdata/fuzz/FuzzHoldRequest.
func FuzzHoldRequest(f *testing.F) {
	b, base, tok := fuzzServer(f)
	event, seats := b.event(f, "A:1x50@100")
	pass := b.desk.admit(event, b.uid("fuzzer"))
	f.Add(`{"seats":[`+itoa(seats[0])+`]}`, "key-1", event)
	f.Fuzz(func(t *testing.T, body, key, ev string) {
		req, err := http.NewRequest("POST", base+"/v1/events/"+ev+"/holds", strings.NewReader(body))
		if err != nil {
			return // not a URL
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set(HeaderAdmissionPass, pass)
		req.Header.Set(HeaderIdempotencyKey, key)
		if code := status(t, req); code == http.StatusInternalServerError {
			t.Fatalf("500 for body %q key %q event %q", body, key, ev)
		}
	})
}

// FuzzAdminEvent: no event specification an operator (or a stolen API
// key) sends is a 500. Seeds: testdata/fuzz/FuzzAdminEvent.
func FuzzAdminEvent(f *testing.F) {
	_, base, _ := fuzzServer(f)
	f.Add(`{"id":"fz-1","name":"Arena","currency":"EUR","startsAt":"2030-01-01T20:00:00Z","sections":[{"id":"A","name":"Floor","rows":2,"seatsPerRow":3,"basePrice":100}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := http.NewRequest("POST", base+"/v1/admin/events", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-API-Key", "admin-key")
		if code := status(t, req); code == http.StatusInternalServerError {
			t.Fatalf("500 for %q", body)
		}
	})
}
