package presence_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/presence"
)

const hookSecret = "webhook-secret-0123456789"

// verify checks a signature header the way a receiver would.
func verify(t *testing.T, header string, body []byte) {
	t.Helper()
	parts := map[string]string{}
	for _, kv := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(kv, "=")
		parts[k] = v
	}
	mac := hmac.New(sha256.New, []byte(hookSecret))
	mac.Write([]byte(parts["t"] + "."))
	mac.Write(body)
	require.Equal(t, hex.EncodeToString(mac.Sum(nil)), parts["v1"], "signature")
}

// Status changes are posted in signed batches; a failing receiver gets
// retries; the hot path never waits for it.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []map[string]any
	fails := 2
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		verify(t, r.Header.Get(presence.WebhookSignatureHeader), body)
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
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
}

func TestSignWebhook(t *testing.T) {
	t.Parallel()
	body := []byte(`{"events":[]}`)
	h := presence.SignWebhook(hookSecret, time.Unix(1700000000, 0), body)
	require.True(t, strings.HasPrefix(h, "t=1700000000,v1="))
	verify(t, h, body)
}
