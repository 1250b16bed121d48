package presence_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Online on connect; idle after the threshold without interaction; back to
// online on reported activity, through a ping or presence:update.
func TestOnlineIdleFromActivity(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.IdleThreshold = 600 * time.Millisecond
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	alice.subscribe("bob")
	start := time.Now()
	bob := connect(t, s, "bob")
	on := alice.statusOf("bob", "online")

	idle := alice.statusOf("bob", "idle")
	require.GreaterOrEqual(t, time.Since(start), cfg.Presence.IdleThreshold, "idle only after the threshold")
	require.Greater(t, idle.Since, on.Since)

	bob.send("session:ping", map[string]any{"active": true})
	alice.statusOf("bob", "online")
	alice.statusOf("bob", "idle")

	// idleMs: the client measured 100 ms since the last interaction.
	bob.send("session:ping", map[string]any{"idleMs": 100})
	alice.statusOf("bob", "online")

	// A device can declare itself inactive (app in the background).
	id := bob.send("presence:update", map[string]any{"active": false})
	require.Contains(t, string(bob.reply(id).Payload), `"status":"idle"`)
	alice.statusOf("bob", "idle")
	id = bob.send("presence:update", map[string]any{"status": "online"})
	require.Contains(t, string(bob.reply(id).Payload), `"status":"online"`)
	alice.statusOf("bob", "online")
}

// Manual statuses override online and idle until cleared, survive a
// reconnect within the grace period, and end when the user goes offline.
func TestManualStatusRules(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.IdleThreshold = 500 * time.Millisecond
	// A reload must come back within the grace period even on a loaded
	// machine, where a connect has taken longer than the default 600 ms.
	cfg.Presence.Grace = 3 * time.Second
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	alice.subscribe("bob")
	bob := connect(t, s, "bob")
	alice.statusOf("bob", "online")

	id := bob.send("presence:update", map[string]any{"status": "busy"})
	require.Equal(t, "presence:updated", bob.reply(id).Event)
	alice.statusOf("bob", "busy")
	// Idle passes underneath, unseen: the manual status stays.
	alice.quiet("bob", 2*cfg.Presence.IdleThreshold)
	bob.send("session:ping", map[string]any{"active": true})
	alice.quiet("bob", 200*time.Millisecond)

	id = bob.send("presence:update", map[string]any{"status": "away"})
	bob.reply(id)
	alice.statusOf("bob", "away")

	// Cleared: back to the automatic status, here with the device active
	// in the same request (a separate ping can be more than the 500 ms idle
	// threshold ago on a loaded machine): online.
	id = bob.send("presence:update", map[string]any{"status": nil, "active": true})
	require.Contains(t, string(bob.reply(id).Payload), `"status":"online"`)
	alice.statusOf("bob", "online")

	// A reload within the grace period keeps the manual status.
	id = bob.send("presence:update", map[string]any{"status": "busy"})
	bob.reply(id)
	alice.statusOf("bob", "busy")
	bob.closeAbruptly()
	bob = connect(t, s, "bob")
	alice.quiet("bob", cfg.Presence.Grace+time.Second)

	// Offline ends it: the next connection is plain online.
	bob.send("session:disconnect", nil)
	alice.statusOf("bob", "offline")
	connect(t, s, "bob")
	alice.statusOf("bob", "online")
}

// Forbidden requests are answered with an error event naming the request.
func TestForbiddenStatusChanges(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := startServer(t, cfg)
	bob := connect(t, s, "bob")

	e := bob.errorReply(bob.send("presence:update", map[string]any{"status": "sleeping"}))
	require.Equal(t, "invalid_status", e.Code)
	e = bob.errorReply(bob.send("presence:update", map[string]any{"status": "offline"}))
	require.Equal(t, "invalid_transition", e.Code)
	e = bob.errorReply(bob.send("presence:update", map[string]any{"status": "idle", "active": true}))
	require.Equal(t, "bad_payload", e.Code)
	e = bob.errorReply(bob.send("presence:update", map[string]any{}))
	require.Equal(t, "bad_payload", e.Code)
	e = bob.errorReply(bob.send("session:ping", map[string]any{"idleMs": -5}))
	require.Equal(t, "bad_payload", e.Code)
}

// A session that stops pinging expires (TTL = interval × miss budget); the
// socket is still open, but the user is offline, and neither a manual
// status nor a ping brings them back: only a new connection does.
func TestOfflineOnlyBackThroughANewConnection(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.PingInterval = 500 * time.Millisecond
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	alice.subscribe("bob", "carol")

	// Bob's session, and so its TTL, begins after start: reading the clock
	// once alice saw him online would start it late by the push's delay.
	start := time.Now()
	bob := connect(t, s, "bob")
	alice.statusOf("bob", "online")
	alice.statusWithin("bob", "offline", 5*time.Second)
	ttl := cfg.Presence.PingInterval * time.Duration(cfg.Presence.MissBudget)
	require.GreaterOrEqual(t, time.Since(start), ttl, "not before the session TTL")

	e := bob.errorReply(bob.send("presence:update", map[string]any{"status": "busy"}))
	require.Equal(t, "invalid_transition", e.Code, "manual while offline")
	require.Equal(t, 4009, bob.waitClosed().Code)
	alice.quiet("bob", 300*time.Millisecond)

	carol := connect(t, s, "carol")
	alice.statusOf("carol", "online")
	alice.statusWithin("carol", "offline", 5*time.Second)
	e = carol.errorReply(carol.send("session:ping", map[string]any{"active": true}))
	require.Equal(t, "invalid_transition", e.Code, "offline to online without a new connection")
	require.Equal(t, 4009, carol.waitClosed().Code)
	alice.quiet("carol", 300*time.Millisecond)

	connect(t, s, "carol")
	alice.statusOf("carol", "online")
}

// Pings keep a session alive past its TTL.
func TestPingsKeepTheSessionAlive(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.PingInterval = 300 * time.Millisecond
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	alice.subscribe("bob")
	bob := connect(t, s, "bob")
	alice.statusOf("bob", "online")
	stop := time.After(3 * cfg.Presence.PingInterval * time.Duration(cfg.Presence.MissBudget))
	tick := time.NewTicker(cfg.Presence.PingInterval / 2)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-tick.C:
			bob.send("session:ping", nil)
		case f := <-alice.frames:
			require.NotEqual(t, "presence:updated", f.Event, "no change while pinging: %s", f.Payload)
		case <-stop:
			done = true
		}
	}
}

// Two devices: closing one keeps the user online; closing both ends offline
// after the grace. Any active device beats an inactive one.
func TestTwoDevices(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	alice.subscribe("bob")
	phone := connect(t, s, "bob")
	alice.statusOf("bob", "online")
	laptop := connect(t, s, "bob")

	id := phone.send("presence:update", map[string]any{"active": false})
	require.Contains(t, string(phone.reply(id).Payload), `"status":"online"`, "the laptop is still active")
	id = laptop.send("presence:update", map[string]any{"active": false})
	require.Contains(t, string(laptop.reply(id).Payload), `"status":"idle"`)
	alice.statusOf("bob", "idle")
	phone.send("session:ping", map[string]any{"active": true})
	alice.statusOf("bob", "online")

	laptop.send("session:ping", map[string]any{"active": true})
	phone.closeAbruptly()
	alice.quiet("bob", cfg.Presence.Grace+time.Second)

	start := time.Now()
	laptop.closeAbruptly()
	alice.statusOf("bob", "offline")
	require.GreaterOrEqual(t, time.Since(start), cfg.Presence.Grace)
}

// An explicit disconnect is immediate; an abrupt close waits for the grace
// period; and a reconnect within the grace never shows offline.
func TestCloseTimingAndReconnectWithinGrace(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.Grace = time.Second
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	alice.subscribe("bob", "carol", "dave")

	bob := connect(t, s, "bob")
	alice.statusOf("bob", "online")
	start := time.Now()
	bob.send("session:disconnect", nil)
	alice.statusOf("bob", "offline")
	explicit := time.Since(start)
	require.Less(t, explicit, cfg.Presence.Grace, "explicit disconnect does not wait for the grace")
	require.Equal(t, 1000, bob.waitClosed().Code)

	carol := connect(t, s, "carol")
	alice.statusOf("carol", "online")
	start = time.Now()
	carol.closeAbruptly()
	alice.statusOf("carol", "offline")
	abrupt := time.Since(start)
	require.GreaterOrEqual(t, abrupt, cfg.Presence.Grace)
	t.Logf("explicit disconnect: offline after %s; abrupt close: after %s (grace %s)", explicit, abrupt, cfg.Presence.Grace)

	dave := connect(t, s, "dave")
	alice.statusOf("dave", "online")
	for i := 0; i < 3; i++ {
		dave.closeAbruptly()
		time.Sleep(cfg.Presence.Grace / 3)
		dave = connect(t, s, "dave")
	}
	alice.quiet("dave", 3*cfg.Presence.Grace)
}

// since marks the last change; lastActiveAt is rounded down to the
// configured granularity.
func TestSinceAndLastActiveAt(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.LastActiveGranularity = time.Hour
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	alice.subscribe("bob")
	before := time.Now().UnixMilli()
	bob := connect(t, s, "bob")
	on := alice.statusOf("bob", "online")
	require.GreaterOrEqual(t, on.Since, before-5)
	require.LessOrEqual(t, on.Since, time.Now().UnixMilli()+5)
	require.Zero(t, on.LastActiveAt%int64(time.Hour/time.Millisecond), "rounded to the hour")
	require.NotZero(t, on.LastActiveAt)

	id := bob.send("presence:update", map[string]any{"status": "busy"})
	var u updated
	require.NoError(t, json.Unmarshal(bob.reply(id).Payload, &u))
	require.Equal(t, "busy", u.Users[0].Status)
	require.Greater(t, u.Users[0].Since, int64(0))
	require.Zero(t, u.Users[0].LastActiveAt%int64(time.Hour/time.Millisecond))

	code, body := httpDo(t, "GET", s.base+"/v1/presence/users/bob", "", map[string]string{"Authorization": "Bearer " + token(t, "alice")})
	require.Equal(t, 200, code, body)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, "busy", st.Status)
	require.Zero(t, st.LastActiveAt%int64(time.Hour/time.Millisecond))
}
