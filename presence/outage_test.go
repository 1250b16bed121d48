package presence_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// Redis going away is answered with unavailable, never with a made-up
// status; when it comes back empty, sessions it lost are told so and
// reconnect, and followers get the fresh statuses.
func TestRedisOutageAndDataLoss(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	cfg := testConfig(t)
	cfg.Redis.URL = srv.URL
	cfg.Redis.DialTimeout = 200 * time.Millisecond
	cfg.Redis.ReadTimeout = 500 * time.Millisecond
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	alice.subscribe("bob")
	bob := connect(t, s, "bob")
	alice.statusOf("bob", "online")

	require.NoError(t, srv.Stop())
	e := bob.errorReply(bob.send("presence:update", map[string]any{"status": "busy"}))
	require.Equal(t, "unavailable", e.Code)
	carol := dialWS(t, s.base, http.Header{"Authorization": {"Bearer " + token(t, "carol")}})
	require.Equal(t, "unavailable", carol.nextError().Code)
	require.Equal(t, 1013, carol.waitClosed().Code)

	testenv.RestartRedisServer(t, srv.URL)

	// The restarted Redis lost bob's session: his next request ends it (a
	// bare ping is answered by the gateway's next ping flush, within a
	// second here).
	testenv.Eventually(t, 15*time.Second, func() bool {
		id := bob.send("session:ping", nil)
		select {
		case f := <-bob.frames:
			return f.CorrelationID == id && f.Event == "error" && string(mustField(t, f.Payload, "code")) == `"invalid_transition"`
		case <-time.After(2 * time.Second):
			return false
		}
	}, "bob's lost session ended")
	require.Equal(t, 4009, bob.waitClosed().Code)
	// A connection the restart broke may still wait in the pool: an open
	// that meets it is refused with 1013, and the client comes back.
	testenv.Eventually(t, 10*time.Second, func() bool {
		again := dialWS(t, s.base, http.Header{"Authorization": {"Bearer " + token(t, "bob")}})
		select {
		case f, ok := <-again.frames:
			return ok && f.Event == "presence:updated"
		case <-time.After(2 * time.Second):
			return false
		}
	}, "bob back")
	alice.statusWithin("bob", "online", 10*time.Second)
}
