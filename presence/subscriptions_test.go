package presence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// set replaces, add adds, remove removes; set and add answer with a
// snapshot carrying the request id; removed users stop arriving.
func TestSubscriptionCommands(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	bob := connect(t, s, "bob")
	carol := connect(t, s, "carol")

	snap := alice.subscribe("bob", "carol", "nobody")
	require.Len(t, snap, 3)
	require.Equal(t, "online", snap["bob"].Status)
	require.Equal(t, "offline", snap["nobody"].Status)

	id := alice.send("subscriptions:remove", map[string]any{"users": []string{"bob"}})
	bob.send("presence:update", map[string]any{"status": "busy"})
	carol.send("presence:update", map[string]any{"status": "busy"})
	alice.statusOf("carol", "busy")
	_ = id

	id = alice.send("subscriptions:add", map[string]any{"users": []string{"bob"}})
	f := alice.reply(id)
	require.Equal(t, "presence:updated", f.Event)
	var u updated
	require.NoError(t, json.Unmarshal(f.Payload, &u))
	require.Len(t, u.Users, 1)
	require.Equal(t, "busy", u.Users[0].Status, "the snapshot has bob's current status")

	snap = alice.subscribe("bob")
	require.Len(t, snap, 1)
	carol.send("presence:update", map[string]any{"status": "away"})
	bob.send("presence:update", map[string]any{"status": "away"})
	alice.statusOf("bob", "away")
	alice.quiet("carol", 200*time.Millisecond)

	rdb := redisFor(t, cfg)
	ctx := context.Background()
	subs, err := rdb.SMembers(ctx, cfg.Redis.Prefix+"{presence:alice}:subs").Result()
	require.NoError(t, err)
	require.Equal(t, []string{"bob"}, subs)
	followers, err := rdb.SMembers(ctx, cfg.Redis.Prefix+"{presence:carol}:followers").Result()
	require.NoError(t, err)
	require.Empty(t, followers, "the reverse set follows the forward one")
	followers, err = rdb.SMembers(ctx, cfg.Redis.Prefix+"{presence:bob}:followers").Result()
	require.NoError(t, err)
	require.Equal(t, []string{"alice"}, followers)
}

// Subscriptions belong to the user: set on one device, every other device,
// on this gateway or another, follows the same users. They outlive a
// reconnect within the grace period and end when the user goes offline.
func TestSubscriptionsAcrossDevicesAndGateways(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s1, s2 := startGateways(t, cfg)

	phone := connect(t, s1, "alice")
	desk := connect(t, s2, "alice")
	tab := connect(t, s1, "alice")
	bob := connect(t, s2, "bob")
	phone.subscribe("bob")
	desk.statusOf("bob", "online")
	tab.statusOf("bob", "online")
	bob.send("presence:update", map[string]any{"status": "busy"})
	for _, c := range []*wsClient{phone, desk, tab} {
		c.statusOf("bob", "busy")
	}

	// A reload keeps them: the new connection's first snapshot has bob.
	desk.closeAbruptly()
	desk = dialWS(t, s2.base, map[string][]string{"Authorization": {"Bearer " + token(t, "alice")}})
	f := desk.next("presence:updated")
	require.Contains(t, string(f.Payload), `"user":"bob"`)

	// Going offline ends them.
	phone.send("session:disconnect", nil)
	tab.send("session:disconnect", nil)
	desk.send("session:disconnect", nil)
	rdb := redisFor(t, cfg)
	testenv.Eventually(t, 5*time.Second, func() bool {
		n, err := rdb.Exists(context.Background(), cfg.Redis.Prefix+"{presence:alice}:subs").Result()
		require.NoError(t, err, "an error must not pass for a missing key")
		m, err := rdb.SCard(context.Background(), cfg.Redis.Prefix+"{presence:bob}:followers").Result()
		require.NoError(t, err, "an error must not pass for an empty set")
		return n == 0 && m == 0
	}, "alice's subscriptions and bob's followers are gone")
	again := connect(t, s1, "alice")
	again.quiet("bob", 200*time.Millisecond)
}

// Limits: subscriptions per user, followers per subject, changes per
// minute. Each breach is an error event; the connection stays usable.
func TestSubscriptionLimits(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.MaxSubscriptions = 3
	cfg.Presence.MaxFollowers = 2
	cfg.Presence.SubscriptionChangesPerMinute = 6
	s := startServer(t, cfg)
	a := connect(t, s, "a")
	e := a.errorReply(a.send("subscriptions:set", map[string]any{"users": []string{"w", "x", "y", "z"}}))
	require.Equal(t, "limit_exceeded", e.Code)
	a.subscribe("w", "x", "y")
	e = a.errorReply(a.send("subscriptions:add", map[string]any{"users": []string{"z"}}))
	require.Equal(t, "limit_exceeded", e.Code)
	require.Contains(t, e.Message, "3")

	b := connect(t, s, "b")
	b.subscribe("w")
	c := connect(t, s, "c")
	e = c.errorReply(c.send("subscriptions:set", map[string]any{"users": []string{"w", "v"}}))
	require.Equal(t, "limit_exceeded", e.Code)
	require.Equal(t, []string{"w"}, e.Users, "w has the most followers allowed")
	require.Len(t, c.subscribe("v"), 1, "still usable")

	// a has used 3 of 6 changes this minute (refusals by limits count).
	a.subscribe("w")
	a.subscribe("x")
	a.subscribe("y")
	e = a.errorReply(a.send("subscriptions:set", map[string]any{"users": []string{"x"}}))
	require.Equal(t, "rate_limited", e.Code)
	id := a.send("presence:update", map[string]any{"status": "busy"})
	require.Equal(t, "presence:updated", a.reply(id).Event, "the connection survives")
}

func TestSubscriptionSetAtTheLimitOfOneThousand(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := startServer(t, cfg)
	a := connect(t, s, "many")
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("user-%04d", i)
	}
	snap := a.subscribe(ids...)
	require.Len(t, snap, 1000)
	e := a.errorReply(a.send("subscriptions:add", map[string]any{"users": []string{"one-more"}}))
	require.Equal(t, "limit_exceeded", e.Code)
	u := connect(t, s, "user-0500")
	_ = u
	a.statusOf("user-0500", "online")
	require.Less(t, len(strings.Join(ids, "")), int(cfg.Presence.MaxMessageBytes))
}

// One-time notification: the first time the user comes online, once.
func TestOneTimeOnlineNotification(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.MaxNotifications = 2
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	id := alice.send("notifications:subscribe", map[string]any{"user": "bob", "on": "online"})
	e := alice.errorReply(alice.send("notifications:subscribe", map[string]any{"user": "bob", "on": "offline"}))
	require.Equal(t, "bad_payload", e.Code)
	_ = id

	bob := connect(t, s, "bob")
	f := alice.next("notifications:received")
	require.JSONEq(t, `"bob"`, string(mustField(t, f.Payload, "user")))
	require.JSONEq(t, `"online"`, string(mustField(t, f.Payload, "on")))
	bob.send("session:disconnect", nil)
	bob.waitClosed()
	connect(t, s, "bob")
	select {
	case f := <-alice.frames:
		require.NotEqual(t, "notifications:received", f.Event, "only once")
	case <-time.After(300 * time.Millisecond):
	}

	alice.quietReply(alice.send("notifications:subscribe", map[string]any{"user": "c1", "on": "online"}))
	alice.quietReply(alice.send("notifications:subscribe", map[string]any{"user": "c2", "on": "online"}))
	e = alice.errorReply(alice.send("notifications:subscribe", map[string]any{"user": "c3", "on": "online"}))
	require.Equal(t, "limit_exceeded", e.Code)
	connect(t, s, "c1")
	alice.next("notifications:received")
	id = alice.send("notifications:subscribe", map[string]any{"user": "c3", "on": "online"})
	alice.quietReply(id)
	connect(t, s, "c3")
	f = alice.next("notifications:received")
	require.JSONEq(t, `"c3"`, string(mustField(t, f.Payload, "user")), "a fired notification frees its place")
}

func mustField(t *testing.T, raw json.RawMessage, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	v, ok := m[key]
	require.True(t, ok, "no %s in %s", key, raw)
	return v
}
