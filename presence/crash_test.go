package presence_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/presenced/presenced/app/apptest"
	"github.com/redis/go-redis/v9"
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
	base, proc := apptest.Child(t, gw)
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

	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
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

// With sessions that would live for minutes (the default ping TTL), a
// killed gateway's users still go offline within seconds: its liveness
// lease lapses and a worker ends its sessions. A user also connected to
// the surviving gateway stays online: only the dead gateway's sessions end.
func TestKilledGatewayLeaseEndsItsSessionsOnly(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.PingInterval = time.Minute // a TTL of 3 minutes
	cfg.Presence.MissBudget = 3
	cfg.Presence.GatewayLease = time.Second
	survivor := startServer(t, cfg)

	gw := cfg
	gw.Roles = []string{"presence"}
	base, proc := apptest.Child(t, gw)
	doomed := &server{base: base}

	alice := connect(t, survivor, "alice")
	alice.subscribe("bob", "dave")
	connect(t, doomed, "bob")
	connect(t, doomed, "dave")
	connect(t, survivor, "dave") // dave's second device
	alice.statusOf("bob", "online")

	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	alice.statusWithin("bob", "offline", 15*time.Second)
	t.Logf("bob offline %s after the kill (lease %s, TTL %s)", time.Since(killed), cfg.Presence.GatewayLease, 3*time.Minute)
	// No flap for the user connected elsewhere: whatever alice hears of
	// dave within a while after bob went offline, it is never offline.
	for end := time.After(2 * time.Second); ; {
		for _, st := range alice.pending["dave"] {
			require.NotEqual(t, "offline", st.Status, "dave is connected to the survivor")
		}
		alice.pending["dave"] = nil
		select {
		case f := <-alice.frames:
			alice.stash(f)
			continue
		case <-end:
		}
		break
	}
	code, body := httpDo(t, "GET", survivor.base+"/v1/presence/users/dave", "", map[string]string{"Authorization": "Bearer " + token(t, "alice")})
	require.Equal(t, 200, code)
	require.Contains(t, body, `"status":"online"`)
}

// A gateway that stalls past its lease (a long pause, a partition) is
// reaped like a dead one; when it wakes it learns so at its next renewal
// and closes its connections with 1012, so clients come back with live
// sessions instead of sitting on ended ones.
func TestStalledGatewayReconnectsItsClients(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Presence.GatewayLease = time.Second
	s := startServer(t, cfg)
	bob := connect(t, s, "bob")

	rdb := redisFor(t, cfg)
	ctx := context.Background()
	leases := cfg.Redis.Prefix + "{presence-gw:all}:leases"
	ids, err := rdb.ZRange(ctx, leases, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, ids, 1, "one gateway holds a lease")
	// The lease lapsed and a worker claimed it, as gw_claim.lua does, before
	// the gateway's next renewal: a lease only marked lapsed could be
	// renewed first on a loaded machine, and rightly nothing would happen.
	// The claim is dated long ago, so a worker takes it again and ends the
	// gateway's sessions.
	gw := strings.TrimSuffix(leases, ":leases")
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, leases, ids[0])
		p.ZAdd(ctx, gw+":reaping", redis.Z{Score: 1, Member: ids[0]})
		p.ZAdd(ctx, gw+":reaped", redis.Z{Score: float64(time.Now().UnixMilli()), Member: ids[0]})
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 1012, bob.waitClosed().Code)
	connect(t, s, "bob")
	code, body := httpDo(t, "GET", s.base+"/v1/presence/users/bob", "", map[string]string{"Authorization": "Bearer " + token(t, "alice")})
	require.Equal(t, 200, code)
	require.Contains(t, body, `"status":"online"`)
}
