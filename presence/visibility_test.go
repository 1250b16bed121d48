package presence_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func (c *wsClient) setPrivacy(p map[string]any) map[string]string {
	c.t.Helper()
	f := c.reply(c.send("privacy:set", p))
	require.Equal(c.t, "privacy:updated", f.Event, "%s", f.Payload)
	var out map[string]string
	require.NoError(c.t, json.Unmarshal(f.Payload, &out))
	return out
}

// Who may see bob's status: everyone, his contacts, nobody. A follower who
// loses sight gets forbidden at once and is unsubscribed; one who may not
// see him is refused, as a stranger under the contacts policy is.
func TestStatusVisibility(t *testing.T) {
	t.Parallel()
	s := startServer(t, testConfig(t))
	key := map[string]string{"X-API-Key": testAPIKey}
	alice := connect(t, s, "vsalice")
	carol := connect(t, s, "vscarol")
	alice.subscribe("vsbob")
	carol.subscribe("vsbob")
	bob := connect(t, s, "vsbob")
	alice.statusOf("vsbob", "online")
	carol.statusOf("vsbob", "online")

	require.Equal(t, map[string]string{"status": "nobody", "lastActiveAt": "everyone"}, bob.setPrivacy(map[string]any{"status": "nobody"}))
	for _, c := range []*wsClient{alice, carol} {
		e := c.nextError()
		require.Equal(t, "forbidden", e.Code)
		require.Equal(t, []string{"vsbob"}, e.Users)
		e = c.errorReply(c.send("subscriptions:add", map[string]any{"users": []string{"vsbob"}}))
		require.Equal(t, "forbidden", e.Code)
	}
	code, _ := httpDo(t, "GET", s.base+"/v1/presence/users/vsbob", "", map[string]string{"Authorization": "Bearer " + token(t, "vsalice")})
	require.Equal(t, http.StatusForbidden, code)
	code, _ = httpDo(t, "GET", s.base+"/v1/presence/users/vsbob", "", map[string]string{"Authorization": "Bearer " + token(t, "vsbob")})
	require.Equal(t, http.StatusOK, code, "a user always sees themself")

	// Contacts: bob lists alice; she may follow him again, carol may not.
	code, body := httpDo(t, "PUT", s.base+"/v1/presence/contacts/vsbob", `{"contacts":["vsalice"]}`, key)
	require.Equal(t, http.StatusOK, code, body)
	bob.setPrivacy(map[string]any{"status": "contacts"})
	require.Equal(t, "online", alice.subscribe("vsbob")["vsbob"].Status)
	require.Equal(t, "forbidden", carol.errorReply(carol.send("subscriptions:add", map[string]any{"users": []string{"vsbob"}})).Code)

	// Dropped from his list, alice loses sight at once.
	code, body = httpDo(t, "PUT", s.base+"/v1/presence/contacts/vsbob", `{"contacts":[]}`, key)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, []string{"vsbob"}, alice.nextError().Users)

	// An administrator opens it again.
	code, body = httpDo(t, "PUT", s.base+"/v1/presence/privacy/vsbob", `{"visibility":{"status":"everyone"}}`, key)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"visibility":{"status":"everyone","lastActiveAt":"everyone"}`)
	require.Equal(t, "online", carol.subscribe("vsbob")["vsbob"].Status)

	require.Equal(t, "bad_payload", bob.errorReply(bob.send("privacy:set", map[string]any{"status": "friends"})).Code)
	require.Equal(t, map[string]string{"status": "everyone", "lastActiveAt": "everyone"}, bob.setPrivacy(map[string]any{}),
		"an empty privacy:set reads the settings")
}

// Who may see bob's lastActiveAt: followers kept from it get his status
// without it, at once when he changes it, and in every frame after.
func TestLastActiveVisibility(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.LastActiveGranularity = time.Millisecond
	s := startServer(t, cfg)
	key := map[string]string{"X-API-Key": testAPIKey}
	alice := connect(t, s, "laalice")
	carol := connect(t, s, "lacarol")
	alice.subscribe("labob")
	carol.subscribe("labob")
	bob := connect(t, s, "labob")
	require.NotZero(t, alice.statusOf("labob", "online").LastActiveAt)
	carol.statusOf("labob", "online")

	code, body := httpDo(t, "PUT", s.base+"/v1/presence/contacts/labob", `{"contacts":["laalice"]}`, key)
	require.Equal(t, http.StatusOK, code, body)
	bob.setPrivacy(map[string]any{"lastActiveAt": "contacts"})
	// carol is sent his status again, without it; alice nothing new.
	hidden := carol.statusOf("labob", "online")
	require.Zero(t, hidden.LastActiveAt)
	require.NotZero(t, hidden.Since)
	alice.quiet("labob", 200*time.Millisecond)

	bob.reply(bob.send("presence:update", map[string]any{"status": "busy"}))
	require.NotZero(t, alice.statusOf("labob", "busy").LastActiveAt)
	require.Zero(t, carol.statusOf("labob", "busy").LastActiveAt)
	// So does a read of him, and a new follower's snapshot.
	_, body = httpDo(t, "GET", s.base+"/v1/presence/users/labob", "", map[string]string{"Authorization": "Bearer " + token(t, "lacarol")})
	require.NotContains(t, body, "lastActiveAt")
	_, body = httpDo(t, "GET", s.base+"/v1/presence/users/labob", "", map[string]string{"Authorization": "Bearer " + token(t, "laalice")})
	require.Contains(t, body, "lastActiveAt")
	dave := connect(t, s, "ladave")
	snap := dave.subscribe("labob")
	require.Equal(t, "busy", snap["labob"].Status)
	require.Zero(t, snap["labob"].LastActiveAt)

	bob.setPrivacy(map[string]any{"lastActiveAt": "everyone"})
	require.NotZero(t, carol.statusOf("labob", "busy").LastActiveAt, "shown again at once")
	require.NotZero(t, dave.statusOf("labob", "busy").LastActiveAt)
}
