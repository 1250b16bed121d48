package presence_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// hookSecret is a Standard Webhooks secret; receivers verify deliveries
// with that project's library, as a customer's would.
const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// Status changes are posted in signed batches; a failing receiver gets
// retries; the hot path never waits for it.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []map[string]any
	var refusedIDs, deliveredIDs []string
	fails := 2
	receiver, err := standardwebhooks.NewWebhook(hookSecret)
	require.NoError(t, err)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := receiver.Verify(body, r.Header); err != nil {
			t.Errorf("a delivery does not verify: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			refusedIDs = append(refusedIDs, r.Header.Get("webhook-id"))
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		deliveredIDs = append(deliveredIDs, r.Header.Get("webhook-id"))
		var b struct {
			Events []map[string]any `json:"events"`
		}
		require.NoError(t, json.Unmarshal(body, &b))
		events = append(events, b.Events...)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()

	cfg := testConfig(t)
	cfg.Presence.Webhook.URL = hook.URL
	cfg.Presence.Webhook.Secret = hookSecret
	cfg.Presence.Webhook.BatchWindow = 50 * time.Millisecond
	cfg.Presence.Webhook.Backoff = 20 * time.Millisecond
	s := startServer(t, cfg)
	bob := connect(t, s, "bob")
	id := bob.send("presence:update", map[string]any{"status": "busy"})
	bob.reply(id)
	bob.send("session:disconnect", nil)

	testenv.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) >= 3
	}, "three changes delivered")
	mu.Lock()
	defer mu.Unlock()
	got := map[string]bool{}
	for _, e := range events {
		require.Equal(t, "bob", e["user"])
		require.NotContains(t, e, "ts")
		got[e["status"].(string)] = true
	}
	require.Equal(t, map[string]bool{"online": true, "busy": true, "offline": true}, got)
	require.Zero(t, fails, "the failed attempts were retried")
	for _, id := range refusedIDs {
		require.Contains(t, deliveredIDs, id, "a retry carries the same webhook-id")
	}
}
