package presence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/config"
)

// subscribeQuery is the ?subscribe= of a connection naming users.
func subscribeQuery(users ...string) string {
	q := url.Values{}
	for _, u := range users {
		q.Add("subscribe", u)
	}
	return "?" + q.Encode()
}

// connectSubscribing connects as user naming subscriptions and returns the
// client with its snapshot.
func connectSubscribing(t *testing.T, s *server, user string, users ...string) (*wsClient, updated) {
	t.Helper()
	c := dialWSAt(t, wsURL(s.base)+subscribeQuery(users...), http.Header{"Authorization": {"Bearer " + token(t, user)}})
	c.user = user
	var u updated
	require.NoError(t, json.Unmarshal(c.next("presence:updated").Payload, &u))
	require.True(t, u.Resync, "the first frame is the snapshot")
	return c, u
}

func statusesByUser(u updated) map[string]string {
	out := map[string]string{}
	for _, s := range u.Users {
		out[s.User] = s.Status
	}
	return out
}

func members(t *testing.T, cfg config.Config, user, part string) []string {
	t.Helper()
	m, err := redisFor(t, cfg).SMembers(context.Background(), cfg.Redis.Prefix+"{presence:"+user+"}:"+part).Result()
	require.NoError(t, err)
	return m
}

// A connection that names its subscriptions opens following them: the
// snapshot holds their statuses, both sides of the index are written, and
// the set replaces the user's on every device, as a subscriptions:set does.
func TestSubscriptionsNamedAtConnect(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s1, s2 := startGateways(t, cfg)
	bob := connect(t, s2, "bob")
	dave := connect(t, s1, "dave")

	phone, snap := connectSubscribing(t, s1, "alice", "bob", "carol")
	require.Equal(t, map[string]string{"bob": "online", "carol": "offline"}, statusesByUser(snap))
	require.ElementsMatch(t, []string{"bob", "carol"}, members(t, cfg, "alice", "subs"))
	require.Equal(t, []string{"alice"}, members(t, cfg, "bob", "followers"))
	require.Equal(t, []string{"alice"}, members(t, cfg, "carol", "followers"))
	bob.send("presence:update", map[string]any{"status": "busy"})
	phone.statusOf("bob", "busy")

	// A second device on the other gateway names another set: it replaces
	// the user's, and the first device follows it (told over the control
	// channel).
	desk, snap := connectSubscribing(t, s2, "alice", "dave")
	require.Equal(t, map[string]string{"dave": "online"}, statusesByUser(snap))
	require.Equal(t, []string{"dave"}, members(t, cfg, "alice", "subs"))
	require.Empty(t, members(t, cfg, "bob", "followers"))
	require.Empty(t, members(t, cfg, "carol", "followers"))
	phone.statusOf("dave", "online")
	dave.send("presence:update", map[string]any{"status": "busy"})
	phone.statusOf("dave", "busy")
	desk.statusOf("dave", "busy")
	bob.send("presence:update", map[string]any{"status": nil})
	phone.quiet("bob", 300*time.Millisecond)

	// A third device on a gateway already following the user's set: the
	// change is applied there and the other device there is told.
	tab, snap := connectSubscribing(t, s2, "alice", "dave", "bob")
	require.Equal(t, map[string]string{"dave": "busy", "bob": "online"}, statusesByUser(snap))
	desk.statusOf("bob", "online")
	phone.statusOf("bob", "online")
	bob.send("presence:update", map[string]any{"status": "busy"})
	for _, c := range []*wsClient{phone, desk, tab} {
		c.statusOf("bob", "busy")
	}
	require.Equal(t, []string{"alice"}, members(t, cfg, "bob", "followers"))
}

// What a subscriptions:set refuses before touching Redis refuses the
// connection before its upgrade: no session opens, nothing is written.
func TestSubscriptionsNamedAtConnectRefusedBeforeTheUpgrade(t *testing.T) {
	t.Parallel()
	cfg := contactsConfig(t)
	cfg.Presence.MaxSubscriptions = 3
	s := startServer(t, cfg)
	u := func(n string) string { return n + "-" + cfg.Redis.Prefix }
	alice, bob, carol := u("alice"), u("bob"), u("carol")
	putContacts(t, s, alice, carol)
	auth := map[string]string{"Authorization": "Bearer " + token(t, alice)}
	get := func(users ...string) (int, string) {
		return httpDo(t, "GET", s.base+"/v1/presence/ws"+subscribeQuery(users...), "", auth)
	}

	code, body := get(carol, "has space")
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "bad_request")
	code, body = get(carol, "")
	require.Equal(t, http.StatusBadRequest, code, body)
	code, body = httpDo(t, "GET", s.base+"/v1/presence/ws?subscribe=%zz", "", auth)
	require.Equal(t, http.StatusBadRequest, code, body)
	code, body = get("w", "x", "y", "z")
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "limit_exceeded")
	code, body = get(carol, bob)
	require.Equal(t, http.StatusForbidden, code, body)
	var e struct {
		Error errorJSON `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e))
	require.Equal(t, "forbidden", e.Error.Code)
	require.Equal(t, []string{bob}, e.Error.Users, "names only the refused users")

	rdb := redisFor(t, cfg)
	for _, k := range []string{"subs", "sessions"} {
		n, err := rdb.Exists(context.Background(), cfg.Redis.Prefix+"{presence:"+alice+"}:"+k).Result()
		require.NoError(t, err)
		require.Zero(t, n, "a refused connection writes no %s", k)
	}

	// A contact is fine.
	c := dialWSAt(t, wsURL(s.base)+subscribeQuery(carol), http.Header{"Authorization": {auth["Authorization"]}})
	var snap updated
	require.NoError(t, json.Unmarshal(c.next("presence:updated").Payload, &snap))
	require.Equal(t, map[string]string{carol: "offline"}, statusesByUser(snap))
}

// A set refused inside the open's script (a subject already has the most
// followers allowed) still opens the session, with the subscriptions the
// user had, and says so in an error event after the snapshot.
func TestSubscriptionsNamedAtConnectOverTheFollowerCap(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.MaxFollowers = 1
	s := startServer(t, cfg)
	b := connect(t, s, "b")
	b.subscribe("w")

	c, snap := connectSubscribing(t, s, "c", "v", "w")
	require.Empty(t, snap.Users, "the set it had: none")
	e := c.nextError()
	require.Equal(t, "limit_exceeded", e.Code)
	require.Equal(t, []string{"w"}, e.Users)
	require.Empty(t, members(t, cfg, "c", "subs"))
	require.Empty(t, members(t, cfg, "v", "followers"))
	require.Len(t, c.subscribe("v"), 1, "the connection is usable")
}

// A followed user changing while a session opens does not overtake the
// snapshot: the connection's first frame is always the snapshot.
func TestSnapshotComesFirstWhileFollowedUsersChange(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := startServer(t, cfg)
	flapper := connect(t, s, "flapper")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		statuses := []any{"busy", nil}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			flapper.send("presence:update", map[string]any{"status": statuses[i%2]})
			time.Sleep(200 * time.Microsecond)
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 60 {
		// connectSubscribing requires the first frame to be the snapshot.
		c, snap := connectSubscribing(t, s, fmt.Sprintf("watcher-%d", i), "flapper")
		require.Len(t, snap.Users, 1)
		_ = c.ws.Close()
	}
}
