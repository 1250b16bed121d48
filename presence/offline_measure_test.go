package presence_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/presenced/presenced/app/apptest"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// TestMeasureTimeToOfflineAfterGatewayKill measures, for N sessions on a
// gateway process killed with SIGKILL, the time from the kill until a
// follower on another gateway sees each user offline. It is a measurement,
// not a check of speed: run it by hand,
//
//	PRESENCED_MEASURE_SESSIONS=10000 go test -run TestMeasureTimeToOffline -v ./presence/
//
// and read the p50 / p99 it logs. The defaults are kept: gateway_lease 5 s,
// scheduler_interval 1 s, and a session TTL of 3 minutes that would
// otherwise bound it.
func TestMeasureTimeToOfflineAfterGatewayKill(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("PRESENCED_MEASURE_SESSIONS"))
	if n <= 0 {
		t.Skip("set PRESENCED_MEASURE_SESSIONS to measure")
	}
	cfg := testConfig(t)
	cfg.Presence.PingInterval = time.Minute
	cfg.Presence.MissBudget = 3
	cfg.Presence.SchedulerInterval = time.Second
	cfg.Presence.StreamPoll = 100 * time.Millisecond
	cfg.Presence.CoalesceTick = 50 * time.Millisecond
	cfg.Presence.Shards = 16
	cfg.Realtime.SendQueue = 4096
	cfg.HTTP.MaxConnectionsPerIP = 0 // every client is on loopback here
	survivor := startServer(t, cfg)
	gw := cfg
	gw.Roles = []string{"presence"}
	base, proc := apptest.Child(t, gw)

	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprintf("m%d", i)
	}
	// Followers on the survivor, 1,000 users each (max_subscriptions).
	var mu sync.Mutex
	online := map[string]bool{}
	offlineAt := map[string]time.Time{}
	var followers []*websocket.Conn
	for start := 0; start < n; start += 1000 {
		part := users[start:min(start+1000, n)]
		ws, _, err := websocket.DefaultDialer.Dial(wsURL(survivor.base), http.Header{"Authorization": {"Bearer " + token(t, fmt.Sprintf("f%d", start))}})
		require.NoError(t, err)
		followers = append(followers, ws)
		sub, _ := json.Marshal(map[string]any{"v": 1, "event": "subscriptions:set", "payload": map[string]any{"users": part}, "id": "s"})
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, sub))
		go func() {
			for {
				_, msg, err := ws.ReadMessage()
				if err != nil {
					return
				}
				now := time.Now()
				var env struct {
					Event   string `json:"event"`
					Payload struct {
						Users []struct{ User, Status string } `json:"users"`
					} `json:"payload"`
				}
				if json.Unmarshal(msg, &env) != nil || env.Event != "presence:updated" {
					continue
				}
				mu.Lock()
				for _, u := range env.Payload.Users {
					switch u.Status {
					case "online":
						online[u.User] = true
					case "offline":
						if online[u.User] && offlineAt[u.User].IsZero() {
							offlineAt[u.User] = now
						}
					}
				}
				mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() {
		for _, f := range followers {
			_ = f.Close()
		}
	})

	// N sessions on the doomed gateway, opened 32 at a time.
	var g errgroup.Group
	g.SetLimit(32)
	conns := make([]*websocket.Conn, n)
	opened := time.Now()
	for i, u := range users {
		g.Go(func() error {
			for attempt := 0; ; attempt++ {
				ws, resp, err := websocket.DefaultDialer.Dial(wsURL(base), http.Header{"Authorization": {"Bearer " + token(t, u)}})
				if err == nil {
					conns[i] = ws
					return nil
				}
				if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || attempt > 50 {
					return err
				}
				time.Sleep(200 * time.Millisecond) // the gateway sheds bursts with 503
			}
		})
	}
	require.NoError(t, g.Wait())
	t.Logf("%d sessions opened in %s", n, time.Since(opened).Round(time.Millisecond))
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		seen := len(online)
		mu.Unlock()
		if seen == n {
			break
		}
		require.True(t, time.Now().Before(deadline), "followers saw %d of %d online", seen, n)
		time.Sleep(200 * time.Millisecond)
	}

	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	deadline = time.Now().Add(3 * time.Minute)
	for {
		mu.Lock()
		done := len(offlineAt)
		mu.Unlock()
		if done == n {
			break
		}
		require.True(t, time.Now().Before(deadline), "followers saw %d of %d offline", done, n)
		time.Sleep(200 * time.Millisecond)
	}
	took := make([]time.Duration, 0, n)
	for _, at := range offlineAt {
		took = append(took, at.Sub(killed))
	}
	slices.Sort(took)
	q := func(p float64) time.Duration { return took[int(p*float64(len(took)-1))].Round(time.Millisecond) }
	t.Logf("time to offline after SIGKILL of a gateway with %d sessions: p50 %s, p99 %s, max %s (gateway_lease %s, scheduler_interval %s, session TTL %s)",
		n, q(0.5), q(0.99), q(1), cfg.Presence.GatewayLease, cfg.Presence.SchedulerInterval, cfg.Presence.PingInterval*3)
}
