package presence_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// ownStatus is a user's view of themself: a status and the invisible mark.
type ownStatus struct {
	Status       string `json:"status"`
	Since        int64  `json:"since"`
	LastActiveAt int64  `json:"lastActiveAt"`
	Invisible    bool   `json:"invisible"`
}

func (c *wsClient) ownReply(id string) ownStatus {
	c.t.Helper()
	f := c.reply(id)
	require.Equal(c.t, "presence:updated", f.Event, "%s", f.Payload)
	var u struct {
		Users []ownStatus `json:"users"`
	}
	require.NoError(c.t, json.Unmarshal(f.Payload, &u))
	require.Len(c.t, u.Users, 1)
	return u.Users[0]
}

// hookRecorder collects the statuses webhooks deliver, per user.
type hookRecorder struct {
	mu     sync.Mutex
	byUser map[string][]string
}

func newHookRecorder(t *testing.T) (*hookRecorder, string) {
	r := &hookRecorder{byUser: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var b struct {
			Events []statusJSON `json:"events"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, e := range b.Events {
			r.byUser[e.User] = append(r.byUser[e.User], fmt.Sprintf("%s v%d", e.Status, e.V))
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *hookRecorder) of(user string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.byUser[user]...)
}

// A follower cannot tell a user who goes invisible — while active on two
// devices, changing their manual status, reconnecting, and back — from one
// who really goes offline and comes back: the same frames with the same v,
// the same snapshot and query answers, the same webhooks and one-time
// notifications. bob goes invisible, carol really goes offline, in step.
func TestInvisibleLooksOffline(t *testing.T) {
	t.Parallel()
	rec, hookURL := newHookRecorder(t)
	cfg := testConfig(t)
	cfg.Presence.LastActiveGranularity = time.Millisecond
	cfg.Presence.Webhook.URL = hookURL
	cfg.Presence.Webhook.Secret = hookSecret
	cfg.Presence.Webhook.BatchWindow = 20 * time.Millisecond
	s := startServer(t, cfg)
	key := map[string]string{"X-API-Key": testAPIKey}

	alice := connect(t, s, "alice")
	alice.subscribe("bob", "carol")
	seen := map[string][]statusJSON{}
	see := func(user, want string) statusJSON {
		t.Helper()
		st := alice.statusOf(user, want)
		seen[user] = append(seen[user], st)
		return st
	}

	bob1 := connect(t, s, "bob")
	carol := connect(t, s, "carol")
	see("bob", "online")
	see("carol", "online")

	// Away: bob goes invisible, carol leaves.
	inv := bob1.ownReply(bob1.send("presence:update", map[string]any{"status": "invisible"}))
	require.Equal(t, ownStatus{Status: "online", Since: inv.Since, LastActiveAt: inv.LastActiveAt, Invisible: true}, inv,
		"bob sees himself as he is")
	carol.send("session:disconnect", nil)
	carol.waitClosed()
	bobOff := see("bob", "offline")
	carolOff := see("carol", "offline")

	// While away bob is active on two devices and changes his manual
	// status: nothing reaches a follower.
	bob2 := connect(t, s, "bob")
	bob2.send("session:ping", map[string]any{"active": true})
	busy := bob2.ownReply(bob2.send("presence:update", map[string]any{"status": "busy", "active": true}))
	require.Equal(t, "busy", busy.Status)
	require.True(t, busy.Invisible)
	bob1.send("session:ping", map[string]any{"idleMs": 0})
	alice.quiet("bob", 300*time.Millisecond)
	alice.quiet("carol", 0)

	// A new follower's snapshot, a server's query: bob is as offline as carol.
	dave := connect(t, s, "dave")
	snap := dave.subscribe("bob", "carol")
	requireLookAlike(t, snap["carol"], snap["bob"])
	require.Equal(t, bobOff, snap["bob"], "the snapshot shows what the change showed")
	_, body := httpDo(t, "POST", s.base+"/v1/presence/query", `{"users":["bob","carol"]}`, key)
	var q struct{ Users []statusJSON }
	require.NoError(t, json.Unmarshal([]byte(body), &q))
	requireLookAlike(t, q.Users[1], q.Users[0])
	require.Equal(t, bobOff, q.Users[0], "read from Redis: nothing moved while invisible")
	_, body = httpDo(t, "POST", s.base+"/v1/presence/query", `{"users":["bob"],"includeInvisible":true}`, key)
	require.Contains(t, body, `"status":"busy"`, "an API key may ask for the true status")
	require.Contains(t, body, `"invisible":true`)
	_, body = httpDo(t, "GET", s.base+"/v1/presence/users/bob", "", map[string]string{"Authorization": "Bearer " + token(t, "bob")})
	require.Contains(t, body, `"invisible":true`, "bob reads himself as he is")
	_, body = httpDo(t, "GET", s.base+"/v1/presence/users/bob", "", map[string]string{"Authorization": "Bearer " + token(t, "dave")})
	require.Contains(t, body, `"status":"offline"`)
	require.NotContains(t, body, "invisible")
	for _, u := range []string{"bob", "carol"} {
		dave.quietReply(dave.send("notifications:subscribe", map[string]any{"user": u, "on": "online"}))
	}

	// Back: bob clears it, carol reconnects.
	back := bob1.ownReply(bob1.send("presence:update", map[string]any{"status": nil}))
	require.Equal(t, "online", back.Status, "coming back is an interaction, as a connect is")
	require.False(t, back.Invisible)
	carol = connect(t, s, "carol")
	bobOn := see("bob", "online")
	carolOn := see("carol", "online")
	for range 2 {
		var n struct{ User string }
		require.NoError(t, json.Unmarshal(dave.next("notifications:received").Payload, &n))
	}

	// Invisible outlives the sessions: bob leaves invisible and returns
	// invisible; carol leaves.
	bob2.ownReply(bob2.send("presence:update", map[string]any{"status": "invisible"}))
	carol.send("session:disconnect", nil)
	see("bob", "offline")
	see("carol", "offline")
	bob1.send("session:disconnect", nil)
	bob2.send("session:disconnect", nil)
	bob1.waitClosed()
	bob2.waitClosed()
	bob3 := connect(t, s, "bob")
	bob3.send("session:ping", map[string]any{"active": true})
	alice.quiet("bob", 300*time.Millisecond)
	_, body = httpDo(t, "GET", s.base+"/v1/presence/users/bob", "", map[string]string{"Authorization": "Bearer " + token(t, "bob")})
	require.Contains(t, body, `"invisible":true`, "still invisible after reconnecting")

	// An administrator clears it with the API key; carol reconnects.
	code, body := httpDo(t, "PUT", s.base+"/v1/presence/privacy/bob", `{"invisible":false}`, key)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"invisible":false`)
	connect(t, s, "carol")
	see("bob", "online")
	see("carol", "online")

	require.Len(t, seen["bob"], len(seen["carol"]))
	for i := range seen["bob"] {
		requireLookAlike(t, seen["carol"][i], seen["bob"][i])
	}
	// Going away shows the last activity before it; coming back, activity
	// now; the same for both.
	for _, pair := range [][2]statusJSON{{bobOff, bobOn}, {carolOff, carolOn}} {
		require.LessOrEqual(t, pair[0].LastActiveAt, pair[0].Since)
		require.GreaterOrEqual(t, pair[1].LastActiveAt, pair[0].Since)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return len(rec.of("carol")) == 5 }, "carol's five changes delivered")
	testenv.Eventually(t, 5*time.Second, func() bool { return len(rec.of("bob")) >= 5 }, "bob's five changes delivered")
	require.Equal(t, rec.of("carol"), rec.of("bob"), "webhooks tell nothing more of bob than of carol")
}

// A user's other sessions learn their own status and privacy settings when
// one session (or an administrator) changes them; followers never see it.
func TestOwnSessionsSeeTheirTrueStatus(t *testing.T) {
	t.Parallel()
	s := startServer(t, testConfig(t))
	bob1 := connect(t, s, "bob")
	bob2 := connect(t, s, "bob")
	bob1.ownReply(bob1.send("presence:update", map[string]any{"status": "invisible"}))
	f := bob2.next("presence:updated")
	require.JSONEq(t, `{"self":true,"users":[{"user":"bob","status":"online","since":0,"v":2,"invisible":true}]}`,
		string(normalizeSelf(t, f.Payload)))

	require.Equal(t, "nobody", bob1.setPrivacy(map[string]any{"status": "nobody"})["status"])
	f = bob2.next("privacy:updated")
	require.JSONEq(t, `{"status":"nobody","lastActiveAt":"everyone"}`, string(f.Payload))

	code, body := httpDo(t, "PUT", s.base+"/v1/presence/privacy/bob", `{"invisible":false}`, map[string]string{"X-API-Key": testAPIKey})
	require.Equal(t, http.StatusOK, code, body)
	for _, c := range []*wsClient{bob1, bob2} {
		var u struct {
			Self  bool        `json:"self"`
			Users []ownStatus `json:"users"`
		}
		require.NoError(t, json.Unmarshal(c.next("presence:updated").Payload, &u))
		require.True(t, u.Self)
		require.False(t, u.Users[0].Invisible)
	}
}

// normalizeSelf zeroes the moments of a self frame, for comparing.
func normalizeSelf(t *testing.T, payload []byte) []byte {
	var u map[string]any
	require.NoError(t, json.Unmarshal(payload, &u))
	for _, s := range u["users"].([]any) {
		st := s.(map[string]any)
		st["since"] = 0
		delete(st, "lastActiveAt")
	}
	b, err := json.Marshal(u)
	require.NoError(t, err)
	return b
}

// requireLookAlike: what a follower sees of bob and of carol differs only
// in the user and the moments of the changes.
func requireLookAlike(t *testing.T, carol, bob statusJSON) {
	t.Helper()
	require.Equal(t, carol.Status, bob.Status)
	require.Equal(t, carol.V, bob.V)
	require.Equal(t, carol.Since == 0, bob.Since == 0)
	require.Equal(t, carol.LastActiveAt == 0, bob.LastActiveAt == 0)
}

// Past presence.offline_retention an invisible user reads as one whose
// offline record expired: no since, v 0, and v 1 on coming back.
func TestInvisiblePastRetentionLooksExpired(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.OfflineRetention = 1500 * time.Millisecond
	s := startServer(t, cfg)
	alice := connect(t, s, "alice")
	alice.subscribe("bob", "carol")
	bob := connect(t, s, "bob")
	carol := connect(t, s, "carol")
	alice.statusOf("bob", "online")
	alice.statusOf("carol", "online")
	bob.ownReply(bob.send("presence:update", map[string]any{"status": "invisible"}))
	carol.send("session:disconnect", nil)
	alice.statusOf("bob", "offline")
	alice.statusOf("carol", "offline")
	time.Sleep(cfg.Presence.OfflineRetention + 200*time.Millisecond)
	// Unfollowed, so the new follower's snapshot is read from Redis, not
	// from what this gateway last saw.
	alice.subscribe()

	erin := connect(t, s, "erin")
	snap := erin.subscribe("bob", "carol")
	require.Equal(t, statusJSON{User: "carol", Status: "offline"}, snap["carol"])
	require.Equal(t, statusJSON{User: "bob", Status: "offline"}, snap["bob"])

	bob.ownReply(bob.send("presence:update", map[string]any{"status": nil}))
	connect(t, s, "carol")
	require.EqualValues(t, 1, erin.statusOf("bob", "online").V, "as a user whose record expired")
	require.EqualValues(t, 1, erin.statusOf("carol", "online").V)
}
