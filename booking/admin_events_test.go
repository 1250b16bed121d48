package booking

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/spectest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/web"
)

// adminServer serves the holds plane's routes with the admin key "admin-key".
func adminServer(t *testing.T, b *bundle) func(method, path string) (int, []byte) {
	t.Helper()
	srv, err := web.NewServer(config.Default(), prometheus.NewRegistry(), testenv.Logger())
	require.NoError(t, err)
	spectest.Validate(t, srv.Echo)
	v, err := auth.NewVerifier(context.Background(), config.Auth{JWTSecret: testSecret})
	require.NoError(t, err)
	b.holds.Routes(srv.Echo.Group(""), v.Middleware(), auth.RequireAPIKey("admin-key"))
	ts := httptest.NewServer(srv.Echo)
	t.Cleanup(ts.Close)
	return func(method, path string) (int, []byte) {
		req, err := http.NewRequest(method, ts.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", "admin-key")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, body
	}
}

func TestAdminReadsEventsWithSaleStateAndCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	do := adminServer(t, b)
	prefix := "adm-" + b.run
	opensLater := func(s *EventSpec) { s.ID = prefix + "b"; s.SaleOpensAt = time.Now().Add(24 * time.Hour) }
	onSale, seats := b.event(t, "A:1x3@1000", func(s *EventSpec) { s.ID = prefix + "a" })
	scheduled, _ := b.event(t, "A:1x2@1000", opensLater)

	status, res, err := b.hold(t, onSale, "buyer", "k1", seats[:2], "")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)

	code, body := do("GET", "/v1/admin/events/"+onSale)
	require.Equal(t, http.StatusOK, code, string(body))
	var ev EventView
	require.NoError(t, json.Unmarshal(body, &ev))
	require.Equal(t, SaleOnSale, ev.Sale)
	require.Equal(t, SeatCounts{Total: 3, Available: 1, Held: 2}, ev.Seats)
	require.Equal(t, ReservationCounts{Pending: 1}, ev.Reservations)

	// One page of one, then the next by cursor: both events of this test,
	// in id order, whatever other tests created.
	code, body = do("GET", "/v1/admin/events?limit=1&after="+prefix)
	require.Equal(t, http.StatusOK, code, string(body))
	var page EventList
	require.NoError(t, json.Unmarshal(body, &page))
	require.Len(t, page.Events, 1)
	require.Equal(t, onSale, page.Events[0].ID)
	require.Equal(t, onSale, page.Next)
	code, body = do("GET", "/v1/admin/events?limit=1&after="+page.Next)
	require.Equal(t, http.StatusOK, code, string(body))
	require.NoError(t, json.Unmarshal(body, &page))
	require.Equal(t, scheduled, page.Events[0].ID)
	require.Equal(t, SaleScheduled, page.Events[0].Sale)

	code, body = do("GET", "/v1/admin/events?limit=0")
	require.Equal(t, http.StatusBadRequest, code, string(body))
	code, _ = do("GET", "/v1/admin/events/"+prefix+"missing")
	require.Equal(t, http.StatusNotFound, code)
	// Ids PostgreSQL would refuse (a NUL, invalid UTF-8) are the client's
	// mistake: a 4xx, never a store error.
	for _, bad := range []string{"%00x", "%ff%fe"} {
		code, body = do("GET", "/v1/admin/events/"+bad)
		require.Equal(t, http.StatusNotFound, code, string(body))
		code, body = do("DELETE", "/v1/admin/events/"+bad)
		require.Equal(t, http.StatusNotFound, code, string(body))
		code, body = do("GET", "/v1/admin/events?after="+bad)
		require.Equal(t, http.StatusBadRequest, code, string(body))
	}

	// A pending reservation keeps the event; once it ended, the event goes
	// with its seats and that reservation.
	code, body = do("DELETE", "/v1/admin/events/"+onSale)
	require.Equal(t, http.StatusConflict, code, string(body))
	require.Contains(t, string(body), `"code":"event_in_use"`)
	_, err = b.holds.Cancel(context.Background(), res.ID, b.uid("buyer"))
	require.NoError(t, err)
	code, body = do("DELETE", "/v1/admin/events/"+onSale)
	require.Equal(t, http.StatusNoContent, code, string(body))
	code, _ = do("GET", "/v1/admin/events/"+onSale)
	require.Equal(t, http.StatusNotFound, code)
	var left int
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM seats WHERE event_id = $1) + (SELECT count(*) FROM reservations WHERE event_id = $1)`, onSale).Scan(&left))
	require.Zero(t, left)
	code, _ = do("DELETE", "/v1/admin/events/"+onSale)
	require.Equal(t, http.StatusNotFound, code)
}

func TestAdminCannotDeleteAnEventWithPayments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	do := adminServer(t, b)
	ev, seats := b.event(t, "A:1x1@1000")
	_, res, err := b.hold(t, ev, "payer", "k1", seats, "")
	require.NoError(t, err)
	_, err = b.holds.Cancel(context.Background(), res.ID, b.uid("payer"))
	require.NoError(t, err)
	// A payment record of a cancelled reservation (a refund's history) is
	// money: the event stays.
	_, err = b.db.Exec(context.Background(), `
INSERT INTO payments (id, reservation_id, user_id, idempotency_key, provider, provider_ref, amount, currency, status, fraud_verdict, charged_at)
VALUES (gen_random_uuid(), $1::uuid, 'payer', 'k-'||$1::text, 'sandbox', 'ref-'||$1::text, 1000, 'EUR', 'REFUNDED', 'accept', now())`, res.ID)
	require.NoError(t, err)
	code, body := do("DELETE", "/v1/admin/events/"+ev)
	require.Equal(t, http.StatusConflict, code, string(body))
}
