package pages_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app/apptest"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/web/pages"
)

func TestIndexSaysWhatThisProcessServes(t *testing.T) {
	cfg := apptest.Config(t)
	cfg.Roles = []string{"browse"}
	s := apptest.Start(t, cfg)

	status, body := call(t, http.MethodGet, s.URL+"/", nil, nil)
	require.Equal(t, http.StatusOK, status)
	page := withoutBreaks(body)
	require.Contains(t, page, "<code>browse</code>")
	require.Contains(t, page, "<code>booking.seatmap</code>")
	require.Contains(t, page, "<code>GET /v1/events/:event/seats</code>")
	require.Contains(t, page, "<code>GET /v1/hotels</code>")
	// The browse plane serves hotel search: the hotel pages are here; the
	// presence gateway and the waiting room are not.
	require.Contains(t, page, `href="/demo/hotels"`)
	require.NotContains(t, page, `href="/demo/presence"`)
	require.NotContains(t, page, "/demo/sale/")
	require.NotContains(t, page, "<code>presence</code>")

	status, _ = call(t, http.MethodGet, s.URL+"/demo/presence", nil, nil)
	require.Equal(t, http.StatusNotFound, status)
	res, err := http.Get(s.URL + "/demo/hotels")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	// Nothing from elsewhere: scripts, styles and sockets of this origin only.
	host := strings.TrimPrefix(s.URL, "http://")
	require.Equal(t, "default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'; connect-src 'self' ws://"+host+" wss://"+host+"; frame-ancestors 'none'",
		res.Header.Get("Content-Security-Policy"))
}

func TestIndexListsOnlyCallableRoutes(t *testing.T) {
	cfg := apptest.Config(t)
	cfg.Roles = []string{"admit"}
	s := apptest.Start(t, cfg)
	status, body := call(t, http.MethodGet, s.URL+"/", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, withoutBreaks(body), "<code>GET /v1/waitingroom/:event/ws</code>")
	require.Contains(t, withoutBreaks(body), "<code>PUT /v1/admin/waitingrooms/:event</code>")
	// The waiting room's admin group has middleware, for which echo adds
	// catch-all entries: they are not routes.
	require.NotContains(t, string(body), "echo_route_not_found")
	require.Contains(t, string(body), `href="/demo/sale/demo-arena"`)
}

func TestClientAndAssetsAreServedFromTheBinary(t *testing.T) {
	cfg := apptest.Config(t)
	cfg.Roles = []string{"count"}
	s := apptest.Start(t, cfg)

	res, err := http.Get(s.URL + "/js/presenced.js")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Type"), "javascript")
	for _, p := range []string{"/css/site.css", "/js/pages/sale.js"} {
		status, _ := call(t, http.MethodGet, s.URL+p, nil, nil)
		require.Equal(t, http.StatusOK, status, p)
	}
	for _, p := range []string{"/js/../templates/layout.html", "/js/nope.js", "/demo/hotels/bad%20id"} {
		status, _ := call(t, http.MethodGet, s.URL+p, nil, nil)
		require.Equal(t, http.StatusNotFound, status, p)
		status, _ = call(t, http.MethodHead, s.URL+p, nil, nil)
		require.Equal(t, http.StatusNotFound, status, "HEAD "+p)
	}
}

// Probes and caches ask with HEAD: the same status and headers as GET,
// no body.
func TestPagesAndAssetsAnswerHead(t *testing.T) {
	cfg := apptest.Config(t)
	cfg.Roles = []string{"all"}
	s := apptest.Start(t, cfg)
	for _, p := range []string{"/", "/js/presenced.js", "/js/pages/sale.js", "/css/site.css",
		"/demo/hotels", "/demo/hotels/h1", "/demo/presence", "/demo/sale/e1", "/demo/checkout", "/demo/ops"} {
		want := http.StatusOK
		if p == "/demo/hotels/h1" {
			want = http.StatusNotFound // no such hotel
		}
		get, err := http.Get(s.URL + p)
		require.NoError(t, err)
		get.Body.Close()
		require.Equal(t, want, get.StatusCode, p)

		head, err := http.Head(s.URL + p)
		require.NoError(t, err)
		body, err := io.ReadAll(head.Body)
		head.Body.Close()
		require.NoError(t, err)
		require.Equal(t, want, head.StatusCode, "HEAD "+p)
		require.Empty(t, body, "HEAD "+p)
		if want != http.StatusOK {
			continue // an error answers HEAD without a body or its type
		}
		for _, h := range []string{"Content-Type", "Cache-Control", "Content-Security-Policy"} {
			require.Equal(t, get.Header.Get(h), head.Header.Get(h), "HEAD %s: %s", p, h)
		}
	}
}

func TestDemoSignInMintsDevelopmentTokensOnly(t *testing.T) {
	s := apptest.Start(t, apptest.Config(t))

	status, body := call(t, http.MethodPost, s.URL+"/demo/token", nil, pages.TokenRequest{User: "alice"})
	require.Equal(t, http.StatusOK, status, string(body))
	var tok pages.TokenAnswer
	require.NoError(t, json.Unmarshal(body, &tok))
	v, err := auth.NewVerifier(t.Context(), s.App.Config.Auth)
	require.NoError(t, err)
	claims, err := v.Verify(tok.Token)
	require.NoError(t, err)
	require.Equal(t, "alice", claims.Subject)

	// Bad input is a 400 and mints nothing.
	for _, bad := range []string{`{"user":""}`, `{"user":"a b"}`, `{"user":"x","admin":true}`, `not json`,
		`{"User":"alice"}`, `{"user":"alice","user":"mallory"}`, "{\"user\":\"\xff\"}", strings.Repeat("[", 1000)} {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/demo/token", strings.NewReader(bad))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusBadRequest, res.StatusCode, bad)
	}
	res, err := http.Post(s.URL+"/demo/token", "application/json", strings.NewReader(`{"user":"`+strings.Repeat("a", 2000)+`"}`))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode, "a body over 1 KiB")
}

func TestNoDemoSignInBesideARealIssuer(t *testing.T) {
	for name, tune := range map[string]func(*config.Config){
		// A configured secret is some issuer's: the demo must not sign with it.
		"configured secret": func(c *config.Config) { c.Auth.JWTSecret = strings.Repeat("s", 32) },
		// Production: development secrets off (the demo pages switched on).
		"dev secrets off": func(c *config.Config) {
			c.Auth.DevSecrets = false
			c.Auth.JWTSecret = strings.Repeat("s", 32)
			c.Auth.APIKey = strings.Repeat("k", 32)
			c.Web.DemoPages = "on"
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := apptest.Config(t)
			cfg.Roles = []string{"presence"}
			tune(&cfg)
			s := apptest.Start(t, cfg)
			status, _ := call(t, http.MethodPost, s.URL+"/demo/token", nil, pages.TokenRequest{User: "alice"})
			require.Equal(t, http.StatusNotFound, status)
			// The page is there and says how to sign in instead.
			status, body := call(t, http.MethodGet, s.URL+"/demo/presence", nil, nil)
			require.Equal(t, http.StatusOK, status)
			require.Contains(t, string(body), `"signIn":false`)
		})
	}
}

func TestDemoPagesOffOutsideDevelopment(t *testing.T) {
	cfg := apptest.Config(t)
	cfg.Roles = []string{"presence"}
	cfg.Auth.DevSecrets = false
	cfg.Auth.JWTSecret = strings.Repeat("s", 32)
	cfg.Auth.APIKey = strings.Repeat("k", 32)
	s := apptest.Start(t, cfg)
	status, _ := call(t, http.MethodGet, s.URL+"/demo/presence", nil, nil)
	require.Equal(t, http.StatusNotFound, status)
	status, body := call(t, http.MethodGet, s.URL+"/", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(body), "No demo pages on this process")
	require.Contains(t, withoutBreaks(body), "<code>GET /v1/presence/ws</code>")
}

// withoutBreaks is a page without the <wbr> that let identifiers wrap.
func withoutBreaks(body []byte) string {
	return strings.ReplaceAll(string(body), "<wbr>", "")
}

// A hotel's page is titled with the hotel's name, with or without dates,
// and carries its city for the search; an unknown hotel is 404.
func TestHotelPageIsTitledWithTheHotelsName(t *testing.T) {
	s := server(t)
	id := "pt-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	createHotel(t, s, id, "titletown", "Title Test Hotel")
	status, body := call(t, http.MethodGet, s.URL+"/demo/hotels/"+id, nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(body), "<title>Title Test Hotel · presenced</title>")
	require.Contains(t, string(body), `<h1 id="hotel-name">Title Test Hotel</h1>`)
	require.Contains(t, string(body), `"city":"titletown"`)

	status, _ = call(t, http.MethodGet, s.URL+"/demo/hotels/no-such-hotel-"+id, nil, nil)
	require.Equal(t, http.StatusNotFound, status)
}
