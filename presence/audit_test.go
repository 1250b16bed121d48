package presence_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/presence"
)

// Every change a person makes is audited — manual statuses, invisible,
// visibility, by the user from a session or by an administrator — and
// none of the automatic ones; the records page newest first and reach the
// webhook.
func TestAuditRecords(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var hooked []presence.AuditRecord
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var b presence.WebhookBody
		if err := json.Unmarshal(body, &b); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		mu.Lock()
		hooked = append(hooked, b.Audit...)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	cfg := testConfig(t)
	cfg.Presence.Webhook.URL = hook.URL
	cfg.Presence.Webhook.Secret = hookSecret
	cfg.Presence.Webhook.BatchWindow = 20 * time.Millisecond
	s := startServer(t, cfg)
	key := map[string]string{"X-API-Key": testAPIKey}

	// Automatic changes only: connect, activity, idle by device, leave.
	// Ids of this run's own: the records live in the binary's shared
	// PostgreSQL, which a second run (-count) finds filled.
	sfx := strconv.FormatInt(time.Now().UnixNano(), 36)
	bobID, carolID := "aubob"+sfx, "aucarol"+sfx
	carol := connect(t, s, carolID)
	carol.send("session:ping", map[string]any{"active": true})
	carol.reply(carol.send("presence:update", map[string]any{"active": false}))
	carol.send("session:disconnect", nil)
	carol.waitClosed()

	bob := connect(t, s, bobID)
	bob.reply(bob.send("presence:update", map[string]any{"status": "busy"}))
	bob.reply(bob.send("presence:update", map[string]any{"status": "invisible"}))
	bob.reply(bob.send("presence:update", map[string]any{"status": nil}))
	bob.setPrivacy(map[string]any{"lastActiveAt": "nobody"})
	code, body := httpDo(t, "PUT", s.base+"/v1/presence/privacy/"+bobID, `{"invisible":true}`, key)
	require.Equal(t, http.StatusOK, code, body)

	type row struct{ Actor, Kind, Old, New string }
	want := []row{
		{"admin:api-key", "invisible", "false", "true"},
		{"user:" + bobID, "visibility", "status=everyone,lastActiveAt=everyone", "status=everyone,lastActiveAt=nobody"},
		{"user:" + bobID, "status", "busy", "online"},
		{"user:" + bobID, "invisible", "true", "false"},
		{"user:" + bobID, "invisible", "false", "true"},
		{"user:" + bobID, "status", "online", "busy"},
	}
	var all []presence.AuditRecord
	testenv.Eventually(t, 5*time.Second, func() bool {
		all = nil
		next := ""
		for {
			_, body := httpDo(t, "GET", s.base+"/v1/presence/audit/"+bobID+"?limit=2&before="+next, "", key)
			var page presence.AuditPage
			require.NoError(t, json.Unmarshal([]byte(body), &page))
			all = append(all, page.Records...)
			if page.Next == "" {
				return len(all) == len(want)
			}
			next = page.Next
		}
	}, "six records, in pages of two")
	got := make([]row, len(all))
	for i, r := range all {
		got[i] = row{r.Actor, r.Kind, r.Old, r.New}
		require.Equal(t, bobID, r.User)
		require.NotZero(t, r.At)
		require.NotEmpty(t, r.RequestID)
		if r.Actor == "user:"+bobID {
			require.NotEmpty(t, r.Device, "the session the change came from")
		}
	}
	// Within one writer batch, ids follow the queue: newest first.
	require.ElementsMatch(t, want, got)
	_, body = httpDo(t, "GET", s.base+"/v1/presence/audit/"+carolID, "", key)
	require.JSONEq(t, `{"user":"`+carolID+`","records":[]}`, body, "nothing automatic is audited")

	// Each is an outbox event too, committed with it.
	pool, err := pgxpool.New(context.Background(), cfg.Postgres.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var events int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox WHERE kind = 'presence.audit' AND aggregate_id = $1`, bobID).Scan(&events))
	require.Equal(t, len(want), events)

	testenv.Eventually(t, 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(hooked) == len(want)
	}, "every record reaches the webhook")

	code, _ = httpDo(t, "GET", s.base+"/v1/presence/audit/"+bobID+"?limit=0", "", key)
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = httpDo(t, "GET", s.base+"/v1/presence/audit/"+bobID, "", nil)
	require.Equal(t, http.StatusUnauthorized, code)
}

// Records older than presence.audit_retention are deleted: a writer
// purges as it starts (and hourly after).
func TestAuditRetention(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.AuditRetention = time.Hour
	pool, err := pgxpool.New(context.Background(), cfg.Postgres.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	user := "rtbob" + strconv.FormatInt(time.Now().UnixNano(), 36) // the shared PostgreSQL outlives a run
	_, err = pool.Exec(context.Background(), `INSERT INTO presence_audit (user_id, actor, kind, old_value, new_value, at)
		VALUES ($1, 'user:' || $1, 'status', 'online', 'busy', now() - interval '2 hours'),
		       ($1, 'user:' || $1, 'status', 'busy', 'away', now() - interval '10 minutes')`, user)
	require.NoError(t, err)
	s := startServer(t, cfg)
	testenv.Eventually(t, 5*time.Second, func() bool {
		_, body := httpDo(t, "GET", s.base+"/v1/presence/audit/"+user, "", map[string]string{"X-API-Key": testAPIKey})
		var page presence.AuditPage
		require.NoError(t, json.Unmarshal([]byte(body), &page))
		return len(page.Records) == 1 && page.Records[0].New == "away"
	}, "only the record within the retention is kept")
}
