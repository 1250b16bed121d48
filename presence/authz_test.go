package presence_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

func contactsConfig(t *testing.T) config.Config {
	cfg := testConfig(t)
	cfg.Presence.Policy = config.PresencePolicyContacts
	return cfg
}

func apiKey() map[string]string { return map[string]string{"X-API-Key": testAPIKey} }

func putContacts(t *testing.T, s *server, owner string, contacts ...string) {
	t.Helper()
	if contacts == nil {
		contacts = []string{}
	}
	body, _ := json.Marshal(map[string]any{"contacts": contacts})
	code, resp := httpDo(t, "PUT", s.base+"/v1/presence/contacts/"+owner, string(body), apiKey())
	require.Equal(t, 200, code, resp)
}

func redisFor(t *testing.T, cfg config.Config) *redis.Client {
	opt, err := redis.ParseURL(cfg.Redis.URL)
	require.NoError(t, err)
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Under the contacts policy a stranger sees nothing: the request is refused,
// nothing is written, and no update leaks later.
func TestStrangersSeeNothing(t *testing.T) {
	t.Parallel()
	cfg := contactsConfig(t)
	s := startServer(t, cfg)
	u := func(n string) string { return n + "-" + cfg.Redis.Prefix }
	alice, bob, carol := u("alice"), u("bob"), u("carol")
	putContacts(t, s, alice, carol)

	ca := connect(t, s, alice)
	cb := connect(t, s, bob)
	e := ca.errorReply(ca.send("subscriptions:set", map[string]any{"users": []string{carol, bob}}))
	require.Equal(t, "forbidden", e.Code)
	require.Equal(t, []string{bob}, e.Users, "names only the refused users, and says nothing of their status")
	e = ca.errorReply(ca.send("subscriptions:add", map[string]any{"users": []string{bob}}))
	require.Equal(t, "forbidden", e.Code)
	e = ca.errorReply(ca.send("notifications:subscribe", map[string]any{"user": bob, "on": "online"}))
	require.Equal(t, "forbidden", e.Code)

	rdb := redisFor(t, cfg)
	n, err := rdb.Exists(context.Background(), cfg.Redis.Prefix+"{presence:"+alice+"}:subs").Result()
	require.NoError(t, err)
	require.Zero(t, n, "a refused subscription writes nothing")
	n, err = rdb.Exists(context.Background(), cfg.Redis.Prefix+"{presence:"+bob+"}:notify").Result()
	require.NoError(t, err)
	require.Zero(t, n)

	cb.send("presence:update", map[string]any{"status": "busy"})
	ca.quiet(bob, 300*time.Millisecond)

	code, body := httpDo(t, "GET", s.base+"/v1/presence/users/"+bob, "", map[string]string{"Authorization": "Bearer " + token(t, alice)})
	require.Equal(t, 403, code)
	require.NotContains(t, body, "busy")
	code, _ = httpDo(t, "GET", s.base+"/v1/presence/users/"+carol, "", map[string]string{"Authorization": "Bearer " + token(t, alice)})
	require.Equal(t, 200, code, "a contact is visible")
	code, _ = httpDo(t, "GET", s.base+"/v1/presence/users/"+bob, "", nil)
	require.Equal(t, 401, code)

	// The contact list is directional: carol does not see alice.
	cc := connect(t, s, carol)
	e = cc.errorReply(cc.send("subscriptions:set", map[string]any{"users": []string{alice}}))
	require.Equal(t, "forbidden", e.Code)
	snap := ca.subscribe(carol)
	require.Equal(t, "online", snap[carol].Status)
}

// A shared room from the token makes users visible to each other.
func TestSharedRoomMakesVisible(t *testing.T) {
	t.Parallel()
	cfg := contactsConfig(t)
	s := startServer(t, cfg)
	u := func(n string) string { return n + "-" + cfg.Redis.Prefix }
	alice, bob, dave := u("alice"), u("bob"), u("dave")
	cb := connect(t, s, bob, "room-1", "room-2")
	connect(t, s, dave, "room-9")
	ca := connect(t, s, alice, "room-2")
	snap := ca.subscribe(bob)
	require.Equal(t, "online", snap[bob].Status)
	e := ca.errorReply(ca.send("subscriptions:add", map[string]any{"users": []string{dave}}))
	require.Equal(t, "forbidden", e.Code)
	require.Equal(t, []string{dave}, e.Users)
	cb.send("presence:update", map[string]any{"status": "away"})
	ca.statusOf(bob, "away")
}

// Removing someone from a contact list removes the subscription at once.
func TestContactRemovalRevokes(t *testing.T) {
	t.Parallel()
	cfg := contactsConfig(t)
	s := startServer(t, cfg)
	u := func(n string) string { return n + "-" + cfg.Redis.Prefix }
	alice, bob := u("alice"), u("bob")
	putContacts(t, s, alice, bob)
	ca := connect(t, s, alice)
	cb := connect(t, s, bob)
	ca.subscribe(bob)

	putContacts(t, s, alice)
	e := ca.nextError()
	require.Equal(t, "forbidden", e.Code)
	require.Equal(t, []string{bob}, e.Users)
	cb.send("presence:update", map[string]any{"status": "busy"})
	ca.quiet(bob, 300*time.Millisecond)

	code, body := httpDo(t, "GET", s.base+"/v1/presence/contacts/"+alice, "", apiKey())
	require.Equal(t, 200, code)
	require.JSONEq(t, `{"user":"`+alice+`","contacts":[]}`, body)
}

func TestContactAPI(t *testing.T) {
	t.Parallel()
	cfg := contactsConfig(t)
	s := startServer(t, cfg)
	owner := "owner-" + cfg.Redis.Prefix
	url := s.base + "/v1/presence/contacts/" + owner

	code, _ := httpDo(t, "PUT", url, `{"contacts":["a"]}`, nil)
	require.Equal(t, 401, code, "API key required")
	code, _ = httpDo(t, "PUT", url, `{"contacts":["a"]}`, map[string]string{"X-API-Key": "wrong"})
	require.Equal(t, 401, code)
	code, body := httpDo(t, "PUT", url, `{"contacts":["b","a","b"]}`, apiKey())
	require.Equal(t, 200, code, body)
	require.JSONEq(t, `{"user":"`+owner+`","contacts":["a","b"]}`, body)
	code, body = httpDo(t, "PUT", url, `{"contacts":["`+owner+`"]}`, apiKey())
	require.Equal(t, 400, code, body)
	code, _ = httpDo(t, "PUT", url, `{"contacts":["x{y}"]}`, apiKey())
	require.Equal(t, 400, code)
	code, _ = httpDo(t, "PUT", url, `{"contact":["a"]}`, apiKey())
	require.Equal(t, 400, code, "unknown field")
	// Not replaced with U+FFFD: two different ids must not become one.
	code, _ = httpDo(t, "PUT", url, "{\"contacts\":[\"\xff\",\"\xfe\"]}", apiKey())
	require.Equal(t, 400, code, "invalid UTF-8")
	code, body = httpDo(t, "GET", url, "", apiKey())
	require.Equal(t, 200, code)
	require.JSONEq(t, `{"user":"`+owner+`","contacts":["a","b"]}`, body, "refused writes changed nothing")
}

// The read API for servers: a batch of statuses by API key.
func TestQueryAPI(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.MaxQueryUsers = 3
	s := startServer(t, cfg)
	connect(t, s, "qa")
	url := s.base + "/v1/presence/query"
	code, _ := httpDo(t, "POST", url, `{"users":["qa"]}`, nil)
	require.Equal(t, 401, code)
	code, body := httpDo(t, "POST", url, `{"users":["qa","nobody"]}`, apiKey())
	require.Equal(t, 200, code, body)
	var u updated
	require.NoError(t, json.Unmarshal([]byte(body), &u))
	require.Len(t, u.Users, 2)
	require.Equal(t, "online", u.Users[0].Status)
	require.Equal(t, "offline", u.Users[1].Status)
	require.Zero(t, u.Users[1].Since)
	code, _ = httpDo(t, "POST", url, `{"users":["a","b","c","d"]}`, apiKey())
	require.Equal(t, 422, code)
	code, _ = httpDo(t, "POST", url, `{"users":[]}`, apiKey())
	require.Equal(t, 400, code)
	code, _ = httpDo(t, "POST", url, `{"users":["a"`, apiKey())
	require.Equal(t, 400, code)
}

func TestTokenRequired(t *testing.T) {
	t.Parallel()
	s := startServer(t, testConfig(t))
	code, body := httpDo(t, "GET", s.base+"/v1/presence/ws", "", nil)
	require.Equal(t, 401, code, body)
	code, _ = httpDo(t, "GET", s.base+"/v1/presence/ws?token=garbage", "", nil)
	require.Equal(t, 401, code)
	// ?token= works for clients that cannot set headers.
	ws, _, err := websocket.DefaultDialer.Dial(wsURL(s.base)+"?token="+token(t, "tq"), nil)
	require.NoError(t, err)
	defer ws.Close()
	_, msg, err := ws.ReadMessage()
	require.NoError(t, err)
	require.Contains(t, string(msg), `"event":"presence:updated"`)
}

// Visibility granted through a shared room is withdrawn when the room goes:
// alice's newest token drops r1, and mallory (who followed her through r1)
// stops getting her updates at once; mallory's own reconnect without r1
// does not bring her back in the snapshot.
func TestLeavingARoomRevokes(t *testing.T) {
	t.Parallel()
	cfg := contactsConfig(t)
	s := startServer(t, cfg)
	u := func(n string) string { return n + "-" + cfg.Redis.Prefix }
	alice, mallory := u("alice"), u("mallory")
	a1 := connect(t, s, alice, "r1")
	m := connect(t, s, mallory, "r1")
	require.Equal(t, "online", m.subscribe(alice)[alice].Status)

	// alice's newest token has no r1 (a second device, or a reconnect).
	a2 := connect(t, s, alice, "r2")
	e := m.nextError()
	require.Equal(t, "forbidden", e.Code)
	require.Equal(t, []string{alice}, e.Users)
	a1.send("presence:update", map[string]any{"status": "busy"})
	m.quiet(alice, 300*time.Millisecond)
	code, _ := httpDo(t, "GET", s.base+"/v1/presence/users/"+alice, "", map[string]string{"Authorization": "Bearer " + token(t, mallory, "r1")})
	require.Equal(t, 403, code)
	_ = a2

	// The other way round: mallory follows bob through r3, then
	// reconnects with a token without r3.
	bob := u("bob")
	connect(t, s, bob, "r3")
	m2 := connect(t, s, mallory, "r1", "r3")
	m2.subscribe(bob)
	m.closeAbruptly()
	m2.closeAbruptly()
	m3 := dialWS(t, s.base, http.Header{"Authorization": {"Bearer " + token(t, mallory)}})
	f := m3.next("presence:updated")
	require.Contains(t, string(f.Payload), `"resync":true`)
	require.NotContains(t, string(f.Payload), bob, "the snapshot no longer holds bob")
}
