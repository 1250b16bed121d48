package presence_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The vertical slice: connect, subscribe, see a manual status change live,
// see the user go offline after an explicit disconnect.
func TestConnectSubscribeUpdateDisconnect(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	// Only an explicit disconnect can end bob's session before this grace.
	cfg.Presence.Grace = time.Minute
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	snap := alice.subscribe("bob")
	require.Equal(t, "offline", snap["bob"].Status, "bob has never connected")

	bob := connect(t, s, "bob")
	on := alice.statusOf("bob", "online")
	require.NotZero(t, on.Since)

	id := bob.send("presence:update", map[string]any{"status": "busy"})
	own := bob.reply(id)
	require.Equal(t, "presence:updated", own.Event)
	require.Contains(t, string(own.Payload), `"status":"busy"`)
	busy := alice.statusOf("bob", "busy")
	require.GreaterOrEqual(t, busy.Since, on.Since)
	require.Greater(t, busy.V, on.V)

	bob.send("session:disconnect", nil)
	alice.statusWithin("bob", "offline", 20*time.Second) // well inside the grace: immediate
}

// An abrupt close (no session:disconnect) keeps the user for the grace
// period, then the lifecycle ends the session and followers see offline.
func TestAbruptCloseGoesOfflineAfterGrace(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	bob := connect(t, s, "bob")
	alice.subscribe("bob")

	start := time.Now()
	bob.closeAbruptly()
	alice.statusWithin("bob", "offline", 5*time.Second)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, cfg.Presence.Grace, "not before the grace period")
	t.Logf("offline after %s (grace %s)", took, cfg.Presence.Grace)
}
