package presence_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A gateway process killed without any chance to clean up: its users go
// offline within the session TTL plus one scheduler period, as seen by a
// follower connected to another gateway. The lifecycle (pings stream,
// deadlines, scheduler, cleanup) runs in the surviving process.
func TestKilledGatewayUsersGoOffline(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.PingInterval = 500 * time.Millisecond
	cfg.Presence.MissBudget = 2
	cfg.Presence.Grace = 5 * time.Second // a clean close would take longer than the TTL
	survivor := startServer(t, cfg)

	gw := cfg
	gw.Roles = []string{"presence"}
	base, proc := childServer(t, gw)
	doomed := &server{base: base}

	alice := connect(t, survivor, "alice")
	alice.subscribe("bob", "carol")
	bob := connect(t, doomed, "bob")
	carol := connect(t, doomed, "carol")
	alice.statusOf("bob", "online")
	alice.statusOf("carol", "online")

	// A few pings move bob's deadline along, through the survivor's consumers.
	var lastPing time.Time
	for i := 0; i < 5; i++ {
		bob.send("session:ping", map[string]any{"active": true})
		carol.send("session:ping", nil)
		lastPing = time.Now()
		time.Sleep(200 * time.Millisecond)
	}
	alice.quiet("bob", 100*time.Millisecond)

	require.NoError(t, proc.Signal(syscall.SIGKILL))
	killed := time.Now()
	ttl := cfg.Presence.PingInterval * time.Duration(cfg.Presence.MissBudget)
	bound := ttl + cfg.Presence.SchedulerInterval
	alice.statusWithin("bob", "offline", 10*time.Second)
	alice.statusWithin("carol", "offline", 10*time.Second)
	sincePing := time.Since(lastPing)
	t.Logf("offline %s after the kill, %s after the last ping (TTL %s + scheduler %s)", time.Since(killed), sincePing, ttl, cfg.Presence.SchedulerInterval)
	require.GreaterOrEqual(t, sincePing, ttl, "not before the TTL")
	// Generous slack for a loaded machine: the bound is TTL + one period.
	require.Less(t, sincePing, bound+time.Second)
}
