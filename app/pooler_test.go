package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// A sale through every plane with every pool behind PgBouncer in
// transaction mode (postgres.query_exec_mode: cache_describe), with fewer server
// connections than the pools ask for: the event is created (COPY), the
// buyer is admitted, holds two seats, a rival is refused them, and the
// seat map shows them held once the relay, whose leader lock needs a
// pinned server session, has published the change.
func TestSaleBehindTransactionPooler(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	bouncer := testenv.PgBouncer(t, cfg.Postgres.URL, "transaction", 4)
	cfg.Roles = []string{"admit", "booking", "browse", "worker"}
	cfg.Postgres.URL = bouncer
	pc, err := pgx.ParseConfig(bouncer)
	require.NoError(t, err)
	cfg.Postgres.ReadOnlyURL = fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", store.DevReadOnlyLogin, pc.Host, pc.Port, pc.Database)
	cfg.Postgres.QueryExecMode = "cache_describe"
	cfg.Postgres.MigrateOnStart = false // migrations bypass the pooler: see docs/operations.md
	cfg.Waitingroom.TickInterval = 100 * time.Millisecond
	cfg.Waitingroom.TickLeaseTTL = time.Second
	cfg.Outbox.PollInterval = 20 * time.Millisecond
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	c := client{t: t, base: serve(t, a)}
	admin := map[string]string{auth.APIKeyHeader: a.Config.Auth.APIKey}
	event := fmt.Sprintf("pooled-%d", time.Now().UnixNano())

	code, _, out := c.do("POST", "/v1/admin/events", admin,
		`{"id":"`+event+`","currency":"EUR","startsAt":"2031-01-01T20:00:00Z","sections":[{"id":"A","rows":2,"seatsPerRow":5,"basePrice":5000}]}`)
	require.Equal(t, 201, code, out)
	code, _, out = c.do("PUT", "/v1/admin/waitingrooms/"+event, admin, `{"capacity":5,"batch":5}`)
	require.Equal(t, 201, code, out)
	code, _, seatMap := c.do("GET", "/v1/events/"+event+"/seats", nil, "")
	require.Equal(t, 200, code, seatMap)
	seats := seatMap["seats"].([]any)
	seat := func(i int) string { return fmt.Sprint(int64(seats[i].(map[string]any)["id"].(float64))) }

	admitted := func(user string) (string, map[string]string) {
		tok, err := auth.SignDev(a.Config.Auth.JWTSecret, user, time.Hour, nil, "", "")
		require.NoError(t, err)
		bearer := map[string]string{"Authorization": "Bearer " + tok}
		var pass string
		testenv.Eventually(t, 20*time.Second, func() bool {
			code, _, out := c.do("POST", "/v1/waitingroom/"+event+"/join", bearer, "")
			if code == 200 && out["state"] == "admitted" {
				pass = out["pass"].(string)
				return true
			}
			return false
		}, "%s admitted", user)
		return tok, map[string]string{"Authorization": "Bearer " + tok, booking.HeaderAdmissionPass: pass}
	}
	_, buyer := admitted("buyer-" + event)
	buyer[booking.HeaderIdempotencyKey] = "k1"
	code, _, out = c.do("POST", "/v1/events/"+event+"/holds", buyer, `{"seats":[`+seat(0)+`,`+seat(1)+`]}`)
	require.Equal(t, 201, code, out)
	_, rival := admitted("rival-" + event)
	rival[booking.HeaderIdempotencyKey] = "k2"
	code, _, out = c.do("POST", "/v1/events/"+event+"/holds", rival, `{"seats":[`+seat(1)+`,`+seat(2)+`]}`)
	require.Equal(t, 409, code, out)

	testenv.Eventually(t, 20*time.Second, func() bool {
		_, _, m := c.do("GET", "/v1/events/"+event+"/seats", nil, "")
		s := m["seats"].([]any)
		return s[0].(map[string]any)["status"] == "HELD" && s[1].(map[string]any)["status"] == "HELD" &&
			s[2].(map[string]any)["status"] == "AVAILABLE"
	}, "the seat map shows the hold once the relay published it")
}
