package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/booking"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/cluster"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/presence"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// call is one JSON request to a plane.
func call(t *testing.T, method, url string, hdr map[string]string, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, map[string]any{"error": err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// The split cluster: every plane its own process, a three-master Redis
// Cluster, a primary and a streaming replica. Long (a minute or more on a
// loaded 2-core machine): skipped with -short, run by scripts/test.sh.
func TestSplitCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the split cluster starts eleven processes and two databases; run without -short")
	}
	dir := t.TempDir()
	bin := testenv.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cluster.Options{Bin: bin, Dir: filepath.Join(dir, "cluster"), Log: testenv.Logger(),
		Env: []string{"PRESENCED_WAITINGROOM_TICK_INTERVAL=200ms", "PRESENCED_WAITINGROOM_TICK_LEASE_TTL=2s", "PRESENCED_OUTBOX_POLL_INTERVAL=50ms", "PRESENCED_PAYMENTS_MONITOR_INTERVAL=1s"}})
	if err != nil {
		for _, p := range cluster.Planes {
			if b, _ := os.ReadFile(filepath.Join(dir, "cluster", p.Name+".log")); len(b) > 0 {
				t.Logf("%s.log: %s", p.Name, lastLines(string(b), 5))
			}
		}
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Down()) })

	secrets, err := auth.ReadDevSecrets(filepath.Join(dir, "cluster", "data"))
	require.NoError(t, err)
	admin := map[string]string{auth.APIKeyHeader: secrets.APIKey}
	user := func(name string) map[string]string {
		tok, err := auth.SignDev(secrets.JWTSecret, name, time.Hour, nil, "", "")
		require.NoError(t, err)
		return map[string]string{"Authorization": "Bearer " + tok}
	}
	admitted := func(t *testing.T, event, name string) string {
		var pass string
		testenv.Eventually(t, 30*time.Second, func() bool {
			code, out := call(t, "POST", c.URL("admit")+"/v1/waitingroom/"+event+"/join", user(name), "")
			if code == 200 && out["state"] == "admitted" {
				pass, _ = out["pass"].(string)
				return true
			}
			return false
		}, "%s admitted on the admit plane by a worker", name)
		return pass
	}
	newEvent := func(t *testing.T, id string, capacity, batch int) []string {
		code, out := call(t, "POST", c.URL("booking")+"/v1/admin/events", admin,
			`{"id":"`+id+`","currency":"EUR","startsAt":"2031-01-01T20:00:00Z","sections":[{"id":"A","rows":2,"seatsPerRow":5,"basePrice":5000}]}`)
		require.Equal(t, 201, code, out)
		code, out = call(t, "PUT", c.URL("admit")+"/v1/admin/waitingrooms/"+id, admin, fmt.Sprintf(`{"capacity":%d,"batch":%d}`, capacity, batch))
		require.Equal(t, 201, code, out)
		var seats []string
		testenv.Eventually(t, 30*time.Second, func() bool {
			code, out := call(t, "GET", c.URL("browse")+"/v1/events/"+id+"/seats", nil, "")
			if code != 200 {
				return false
			}
			list, _ := out["seats"].([]any)
			seats = seats[:0]
			for _, s := range list {
				seats = append(seats, fmt.Sprint(int64(s.(map[string]any)["id"].(float64))))
			}
			return len(seats) == 10
		}, "the new event's seat map on the browse plane (from the replica)")
		return seats
	}
	seatStatus := func(t *testing.T, event string, i int) string {
		code, out := call(t, "GET", c.URL("browse")+"/v1/events/"+event+"/seats", nil, "")
		if code != 200 {
			return fmt.Sprint(code)
		}
		return out["seats"].([]any)[i].(map[string]any)["status"].(string)
	}

	t.Run("sale across planes", func(t *testing.T) {
		event := fmt.Sprintf("split-%d", time.Now().UnixNano())
		seats := newEvent(t, event, 5, 5)
		pass := admitted(t, event, "buyer")
		hdr := user("buyer")
		hdr[booking.HeaderAdmissionPass] = pass
		hdr[booking.HeaderIdempotencyKey] = "k1"
		// A live seat-map viewer on the browse plane, before the hold.
		live := sse(t, c.URL("browse")+"/v1/events/"+event+"/live")
		_, ok := awaitSSE(live, 30*time.Second, func(e sseEvent) bool { return e.Event == "reset" })
		require.True(t, ok, "the live stream opens with a reset")
		code, out := call(t, "POST", c.URL("booking")+"/v1/events/"+event+"/holds", hdr, `{"seats":[`+seats[0]+`,`+seats[1]+`]}`)
		require.Equal(t, 201, code, out)
		reservation, _ := out["id"].(string)
		require.NotEmpty(t, reservation, out)
		inv, ok := awaitSSE(live, 30*time.Second, func(e sseEvent) bool { return e.Event == "invalidate" })
		require.True(t, ok, "the hold on the booking plane reaches the browse plane's live viewer (relayed by a worker)")
		require.JSONEq(t, `{"type":"invalidate","section":"A"}`, inv.Data)
		rival := user("rival")
		rival[booking.HeaderAdmissionPass] = admitted(t, event, "rival")
		rival[booking.HeaderIdempotencyKey] = "k2"
		code, out = call(t, "POST", c.URL("booking")+"/v1/events/"+event+"/holds", rival, `{"seats":[`+seats[1]+`]}`)
		require.Equal(t, 409, code, out)
		testenv.Eventually(t, 30*time.Second, func() bool {
			return seatStatus(t, event, 0) == "HELD" && seatStatus(t, event, 1) == "HELD"
		}, "the browse plane shows the hold: relayed by a worker, read from the replica")

		// Payment on the booking plane (the sandbox provider delivers its
		// webhook there), tickets issued by a worker's fulfillment.
		pay := user("buyer")
		pay[payments.HeaderIdempotencyKey] = "pay-1"
		code, out = call(t, "POST", c.URL("booking")+"/v1/reservations/"+reservation+"/payments", pay, "")
		require.Equal(t, 201, code, out)
		confirm, _ := json.Marshal(payments.SandboxConfirm{ClientSecret: out["clientSecret"].(string)})
		code, out = call(t, "POST", c.URL("booking")+out["confirmUrl"].(string), nil, string(confirm))
		require.Equal(t, 200, code, out)
		testenv.Eventually(t, 60*time.Second, func() bool {
			code, out := call(t, "GET", c.URL("booking")+"/v1/tickets", user("buyer"), "")
			list, _ := out["tickets"].([]any)
			return code == 200 && len(list) == 2
		}, "two tickets, issued by a worker after the webhook")
		testenv.Eventually(t, 30*time.Second, func() bool { return seatStatus(t, event, 0) == "SOLD" }, "the browse plane shows the seat sold")
	})

	t.Run("load-shedding ladder: live pushes paused, admission paused then shrunk", func(t *testing.T) {
		event := fmt.Sprintf("ladder-%d", time.Now().UnixNano())
		seats := newEvent(t, event, 5, 5)
		live := sse(t, c.URL("browse")+"/v1/events/"+event+"/live")
		_, ok := awaitSSE(live, 30*time.Second, func(e sseEvent) bool { return e.Event == "reset" })
		require.True(t, ok)

		// Rung 2, on the browse plane: viewers told to poll.
		code, out := call(t, "PUT", c.URL("browse")+"/v1/admin/events/"+event+"/live", admin, `{"paused":true,"pollMs":10000}`)
		require.Equal(t, 200, code, out)
		paused, ok := awaitSSE(live, 30*time.Second, func(e sseEvent) bool { return e.Event != "reset" })
		require.True(t, ok)
		require.Equal(t, "paused", paused.Event, paused.Data)

		// Rung 4, on the admit plane: the line holds while workers tick it.
		code, out = call(t, "PUT", c.URL("admit")+"/v1/admin/waitingrooms/"+event, admin, `{"capacity":5,"batch":5,"paused":true}`)
		require.Equal(t, 200, code, out)
		code, out = call(t, "POST", c.URL("admit")+"/v1/waitingroom/"+event+"/join", user("ladder-fan"), "")
		require.Equal(t, 200, code, out)
		pausedTicks := func() float64 {
			series := `presenced_waitingroom_ticks_total{result="paused"}`
			return metric(t, c.URL("worker"), series) + metric(t, c.URL("worker-2"), series)
		}
		ticks := pausedTicks()
		testenv.Eventually(t, 30*time.Second, func() bool { return pausedTicks() >= ticks+2 }, "workers tick the paused room")
		code, out = call(t, "GET", c.URL("admit")+"/v1/waitingroom/"+event+"/status", user("ladder-fan"), "")
		require.Equal(t, 200, code, out)
		require.Equal(t, "queued", out["state"], "nobody admitted while paused")

		// Rung 3: resumed with a smaller batch and capacity, at the next tick.
		code, out = call(t, "PUT", c.URL("admit")+"/v1/admin/waitingrooms/"+event, admin, `{"capacity":1,"batch":1,"paused":false}`)
		require.Equal(t, 200, code, out)
		hdr := user("ladder-fan")
		hdr[booking.HeaderAdmissionPass] = admitted(t, event, "ladder-fan")
		hdr[booking.HeaderIdempotencyKey] = "l1"
		code, out = call(t, "POST", c.URL("booking")+"/v1/events/"+event+"/holds", hdr, `{"seats":[`+seats[0]+`]}`)
		require.Equal(t, 201, code, out)
		testenv.Eventually(t, 30*time.Second, func() bool { return seatStatus(t, event, 0) == "HELD" }, "the hold relayed while pushes are paused")

		// Rung 2 undone: the next message is the reset (no invalidation
		// was pushed while paused), then invalidations flow again.
		code, out = call(t, "PUT", c.URL("browse")+"/v1/admin/events/"+event+"/live", admin, `{"paused":false}`)
		require.Equal(t, 200, code, out)
		// A repeated pause notice (the stream re-announces a pause, e.g.
		// after its connection was renewed) is no invalidation: skip it.
		next, ok := awaitSSE(live, 30*time.Second, func(e sseEvent) bool { return e.Event != "paused" })
		require.True(t, ok)
		require.Equal(t, "reset", next.Event, "nothing pushed while paused")
	})

	t.Run("viewers counted on ingest, read on count", func(t *testing.T) {
		hotel := fmt.Sprintf("split-hotel-%d", time.Now().UnixNano())
		code, out := call(t, "POST", c.URL("booking")+"/v1/admin/hotels", admin,
			`{"id":"`+hotel+`","city":"split","timezone":"UTC","currency":"EUR","openNights":1,"roomTypes":[{"id":"room","capacity":2,"rooms":1,"basePrice":100}]}`)
		require.Equal(t, 201, code, out)
		// Each plane learns the hotel from the database (viewers.hotel_refresh).
		testenv.Eventually(t, 30*time.Second, func() bool {
			code, _ := call(t, "GET", c.URL("count")+"/v1/viewers/"+hotel+"/count", nil, "")
			return code == 200
		}, "the count plane knows the new hotel")
		stream := sse(t, c.URL("count")+"/v1/viewers/"+hotel+"/stream")
		// Three browsers without a cookie: three viewers.
		for i := 0; i < 3; i++ {
			testenv.Eventually(t, 30*time.Second, func() bool {
				code, _ := call(t, "POST", c.URL("ingest")+"/v1/viewers/"+hotel+"/heartbeat", nil, "")
				return code == 204
			}, "a heartbeat counted on the ingest plane")
		}
		testenv.Eventually(t, 30*time.Second, func() bool {
			code, out := call(t, "GET", c.URL("count")+"/v1/viewers/"+hotel+"/count", nil, "")
			return code == 200 && out["count"] == 3.0
		}, "the count plane reads the ingest plane's three viewers")
		_, ok := awaitSSE(stream, 30*time.Second, func(e sseEvent) bool {
			var n struct{ Count int64 }
			return e.Event == "count:updated" && json.Unmarshal([]byte(e.Data), &n) == nil && n.Count == 3
		})
		require.True(t, ok, "the count plane's stream pushes the count of 3")
	})

	t.Run("booking plane stopped: browsing and the line go on", func(t *testing.T) {
		event := fmt.Sprintf("nobooking-%d", time.Now().UnixNano())
		newEvent(t, event, 5, 5)
		require.NoError(t, c.Stop("booking"))
		code, _ := call(t, "GET", c.URL("browse")+"/v1/events/"+event+"/seats", nil, "")
		require.Equal(t, 200, code, "browse")
		admitted(t, event, "fan-while-booking-down")
		code, out := call(t, "GET", c.URL("admit")+"/v1/admin/waitingrooms/"+event, admin, "")
		require.Equal(t, 200, code, out)
		require.NoError(t, c.Start(ctx, "booking"))
	})

	t.Run("presence across gateways; a gateway SIGKILLed", func(t *testing.T) {
		dial := func(plane, name string) *websocket.Conn {
			hdr := http.Header{}
			hdr.Set("Authorization", user(name)["Authorization"])
			conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(c.URL(plane), "http")+"/v1/presence/ws", hdr)
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			return conn
		}
		// statusOf reads frames until one carries who's status, or the
		// deadline passes.
		statusOf := func(conn *websocket.Conn, who string, want string, within time.Duration) bool {
			deadline := time.Now().Add(within)
			for time.Now().Before(deadline) {
				_ = conn.SetReadDeadline(deadline)
				var f struct {
					Event   string
					Payload presence.UpdatedPayload
				}
				if err := conn.ReadJSON(&f); err != nil {
					return false
				}
				for _, u := range f.Payload.Users {
					if u.User == who && u.Status == want {
						return true
					}
				}
			}
			return false
		}
		alice := dial("presence-2", "alice")
		// The snapshot after the upgrade means alice's session is registered.
		_ = alice.SetReadDeadline(time.Now().Add(30 * time.Second))
		var snapshot map[string]any
		require.NoError(t, alice.ReadJSON(&snapshot))
		require.Equal(t, "presence:updated", snapshot["event"], snapshot)
		bob := dial("presence", "bob")
		require.NoError(t, bob.WriteJSON(map[string]any{"v": 1, "event": "subscriptions:set", "payload": map[string]any{"users": []string{"alice"}}, "id": "s1"}))
		require.True(t, statusOf(bob, "alice", "online", 30*time.Second), "bob on gateway presence sees alice on gateway presence-2 online")

		// alice's gateway dies without closing anything: her session ends
		// when a worker finds the gateway's liveness lease lapsed
		// (presence.gateway_lease 5 s + scheduler_interval 1 s), well
		// before the session TTL (3 min) would.
		killed := time.Now()
		require.NoError(t, c.Kill("presence-2"))
		require.True(t, statusOf(bob, "alice", "offline", 60*time.Second), "alice offline on bob's gateway after hers died")
		t.Logf("alice offline on the other gateway %v after SIGKILL (gateway_lease 5s + scheduler_interval 1s)", time.Since(killed).Round(100*time.Millisecond))
		require.NoError(t, c.Start(ctx, "presence-2"))
	})

	t.Run("relay stopped: the outbox alert fires on scraped series", func(t *testing.T) {
		event := fmt.Sprintf("norelay-%d", time.Now().UnixNano())
		seats := newEvent(t, event, 5, 5)
		hdr := user("late-buyer")
		hdr[booking.HeaderAdmissionPass] = admitted(t, event, "late-buyer")
		hdr[booking.HeaderIdempotencyKey] = "k1"

		// What Prometheus scrapes from every running plane: the outbox and
		// monitor series, by series.
		scrape := func() map[string]string {
			out := map[string]string{}
			for _, p := range cluster.Planes {
				if c.URL(p.Name) == "" {
					continue
				}
				resp, err := http.Get(c.URL(p.Name) + "/metrics")
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, line := range strings.Split(string(body), "\n") {
					if !strings.HasPrefix(line, "presenced_outbox_") && !strings.HasPrefix(line, "presenced_payments_monitor_violations") {
						continue
					}
					name, value, ok := strings.Cut(line, " ")
					require.True(t, ok, line)
					labels := `instance="` + p.Name + `"`
					if i := strings.IndexByte(name, '{'); i >= 0 {
						labels = name[i+1:len(name)-1] + "," + labels
						name = name[:i]
					}
					out[name+"{"+labels+"}"] = value
				}
			}
			return out
		}
		before := scrape()
		require.NoError(t, c.Stop("worker"))
		require.NoError(t, c.Stop("worker-2"))
		defer func() {
			if c.Proc("worker") == nil {
				require.NoError(t, c.Start(ctx, "worker"))
			}
			if c.Proc("worker-2") == nil {
				require.NoError(t, c.Start(ctx, "worker-2"))
			}
		}()
		code, out := call(t, "POST", c.URL("booking")+"/v1/events/"+event+"/holds", hdr, `{"seats":[`+seats[3]+`]}`)
		require.Equal(t, 201, code, out)
		// No relay runs, yet the booking plane, which wrote the event,
		// exports its age, and the age grows.
		const age = "presenced_outbox_oldest_unpublished_age_seconds"
		first := metric(t, c.URL("booking"), age)
		testenv.Eventually(t, 30*time.Second, func() bool { return metric(t, c.URL("booking"), age) >= first+1 },
			"the booking plane's scrape shows the unpublished hold aging")
		after := scrape()
		ageKey := age + `{instance="booking"}`
		require.Contains(t, after, ageKey, "the age series of the booking plane")
		ageNow, err := strconv.ParseFloat(after[ageKey], 64)
		require.NoError(t, err)
		require.Less(t, ageNow, 60.0)

		// Two minutes of the scrape before the stop, then eight of the one
		// after (a series gone from it goes stale), evaluated by promtool
		// against rules.yml.
		// The age, scraped once, goes on growing with the clock while no
		// relay runs: a minute per minute from the value scraped.
		afterValues := func(key string) (string, bool) {
			a, ok := after[key]
			if key == ageKey {
				return fmt.Sprintf("%d+60x8", int(ageNow)), true
			}
			return a + "x8", ok
		}
		var series []string
		for key, b := range before {
			vals := b + " " + b + " stale"
			if a, ok := afterValues(key); ok {
				vals = b + " " + b + " " + a
			}
			series = append(series, fmt.Sprintf("      - series: '%s'\n        values: '%s'", key, vals))
		}
		for key := range after {
			if _, ok := before[key]; !ok {
				a, _ := afterValues(key)
				series = append(series, fmt.Sprintf("      - series: '%s'\n        values: '_ _ %s'", key, a))
			}
		}
		require.NotEmpty(t, before, "the workers export the outbox and monitor series")
		rules, err := filepath.Abs("../../deploy/prometheus/rules.yml")
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), "drill_test.yml")
		require.NoError(t, os.WriteFile(file, []byte(`rule_files: ['`+rules+`']
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
`+strings.Join(series, "\n")+`
    alert_rule_test:
      - eval_time: 2m
        alertname: PresencedOutboxStale
        exp_alerts: []
      - eval_time: 5m
        alertname: PresencedOutboxStale
        exp_alerts:
          - exp_labels:
              severity: page
              tier: t1
            exp_annotations:
              summary: "The oldest unpublished outbox event is 3m `+strconv.Itoa(int(ageNow))+`s old"
              runbook: "docs/operations.md#drills"
      - eval_time: 1m
        alertname: PresencedOutboxNoRelay
        exp_alerts: []
      - eval_time: 5m
        alertname: PresencedOutboxNoRelay
        exp_alerts:
          - exp_labels:
              severity: page
              tier: t1
            exp_annotations:
              summary: "No process leads the outbox relay"
              runbook: "docs/operations.md#drills"
      - eval_time: 8m
        alertname: PresencedCorrectnessMonitorsSilent
        exp_alerts:
          - exp_labels:
              severity: page
              tier: t0-money
              check: double_owned_seats
            exp_annotations:
              summary: "No worker reports the correctness monitors (worker plane down?)"
`), 0o644))
		promtool := os.Getenv("PRESENCED_TEST_PROMTOOL")
		if promtool == "" {
			promtool = testenv.Tool(t, "promtool", "bash scripts/test.sh installs it")
		}
		pout, err := exec.Command(promtool, "test", "rules", file).CombinedOutput()
		require.NoError(t, err, "promtool on the scraped series:\n%s\n%s", pout, strings.Join(series, "\n"))

		require.NoError(t, c.Start(ctx, "worker"))
		require.NoError(t, c.Start(ctx, "worker-2"))
		testenv.Eventually(t, 30*time.Second, func() bool { return seatStatus(t, event, 3) == "HELD" },
			"the relay, back, publishes the hold made while it was down")
	})

	t.Run("Redis master killed: joins and holds fail closed, browsing goes on, no double sale", func(t *testing.T) {
		event := fmt.Sprintf("redisdown-%d", time.Now().UnixNano())
		seats := newEvent(t, event, 5, 5)
		a := user("fan-a")
		a[booking.HeaderAdmissionPass] = admitted(t, event, "fan-a")
		a[booking.HeaderIdempotencyKey] = "a1"
		code, out := call(t, "POST", c.URL("booking")+"/v1/events/"+event+"/holds", a, `{"seats":[`+seats[0]+`]}`)
		require.Equal(t, 201, code, out)

		require.NoError(t, c.KillRedis(0))
		a[booking.HeaderIdempotencyKey] = "a2"
		testenv.Eventually(t, 60*time.Second, func() bool {
			code, _ := call(t, "POST", c.URL("admit")+"/v1/waitingroom/"+event+"/join", user("fan-b"), "")
			hold, _ := call(t, "POST", c.URL("booking")+"/v1/events/"+event+"/holds", a, `{"seats":[`+seats[1]+`]}`)
			return code == 503 && hold == 503
		}, "joins and holds answer 503 once the cluster is down")
		code, _ = call(t, "GET", c.URL("browse")+"/v1/events/"+event+"/seats", nil, "")
		require.Equal(t, 200, code, "browsing goes on (from the database when the snapshot cache is gone)")

		require.NoError(t, c.RestartRedis(ctx, 0))
		testenv.Eventually(t, 60*time.Second, func() bool { return c.RedisHealthy(ctx) == nil }, "every Redis node sees the cluster whole again")
		// The restarted master kept nothing (no persistence, no replica):
		// if the event's slot was on it, its room and line are gone, and
		// the operator applies the room's settings again (idempotent).
		code, out = call(t, "PUT", c.URL("admit")+"/v1/admin/waitingrooms/"+event, admin, `{"capacity":5,"batch":5}`)
		require.Contains(t, []int{200, 201}, code, out)
		b := user("fan-b")
		b[booking.HeaderAdmissionPass] = admitted(t, event, "fan-b")
		b[booking.HeaderIdempotencyKey] = "b1"
		code, out = call(t, "POST", c.URL("booking")+"/v1/events/"+event+"/holds", b, `{"seats":[`+seats[0]+`]}`)
		require.Equal(t, 409, code, "seat 0 is fan-a's: %v", out)
		b[booking.HeaderIdempotencyKey] = "b2"
		code, out = call(t, "POST", c.URL("booking")+"/v1/events/"+event+"/holds", b, `{"seats":[`+seats[2]+`]}`)
		require.Equal(t, 201, code, out)

		db, err := pgxpool.New(ctx, c.Primary.URL("presenced"))
		require.NoError(t, err)
		defer db.Close()
		var taken, owners int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM seats WHERE event_id = $1 AND status <> 'AVAILABLE'`, event).Scan(&taken))
		require.Equal(t, 2, taken, "fan-a's seat 0 and fan-b's seat 2, nothing granted during the outage")
		require.NoError(t, db.QueryRow(ctx, `SELECT count(DISTINCT reservation_id) FROM seats WHERE event_id = $1 AND reservation_id IS NOT NULL`, event).Scan(&owners))
		require.Equal(t, 2, owners)
	})

	t.Run("worker killed mid-tick: the other worker admits, nobody twice", func(t *testing.T) {
		event := fmt.Sprintf("workerkill-%d", time.Now().UnixNano())
		const capacity, fans = 40, 60
		newEvent(t, event, capacity, 1)
		// The whole line joins a paused room, then admission starts: one
		// per tick (200 ms), so admitting takes seconds and the kill lands
		// while a worker is ticking.
		room := func(paused bool) {
			code, out := call(t, "PUT", c.URL("admit")+"/v1/admin/waitingrooms/"+event, admin, fmt.Sprintf(`{"capacity":%d,"batch":1,"paused":%t}`, capacity, paused))
			require.Equal(t, 200, code, out)
		}
		room(true)
		for i := 0; i < fans; i++ {
			code, out := call(t, "POST", c.URL("admit")+"/v1/waitingroom/"+event+"/join", user(fmt.Sprintf("wk-fan-%d", i)), "")
			require.Equal(t, 200, code, out)
		}
		room(false)
		stats := func() map[string]any {
			code, out := call(t, "GET", c.URL("admit")+"/v1/admin/waitingrooms/"+event, admin, "")
			require.Equal(t, 200, code, out)
			return out["stats"].(map[string]any)
		}
		// The ticker is the worker whose admissions grow while this
		// event's line is the only one with people in it: it holds the
		// tick lease of the event's shard.
		var ticker, other string
		testenv.Eventually(t, 30*time.Second, func() bool {
			a0, b0 := metric(t, c.URL("worker"), "presenced_waitingroom_admitted_total"), metric(t, c.URL("worker-2"), "presenced_waitingroom_admitted_total")
			active := stats()["active"].(float64)
			if active >= capacity-5 {
				t.Fatalf("checkout nearly full (%v) before a ticker was seen", active)
			}
			testenv.Eventually(t, 10*time.Second, func() bool { return stats()["active"].(float64) > active }, "an admission")
			a1, b1 := metric(t, c.URL("worker"), "presenced_waitingroom_admitted_total"), metric(t, c.URL("worker-2"), "presenced_waitingroom_admitted_total")
			switch {
			case a1 > a0 && b1 == b0:
				ticker, other = "worker", "worker-2"
			case b1 > b0 && a1 == a0:
				ticker, other = "worker-2", "worker"
			default:
				return false // the lease moved meanwhile: look again
			}
			return true
		}, "one worker admits: it holds the tick lease")
		otherAdmitted := metric(t, c.URL(other), "presenced_waitingroom_admitted_total")
		otherAcquired := metric(t, c.URL(other), `presenced_waitingroom_tick_lease_changes_total{change="acquired"}`)
		before := stats()["active"].(float64)
		require.NoError(t, c.Kill(ticker))
		t.Logf("SIGKILLed %s, the ticker, at %v admitted of %d", ticker, before, capacity)
		testenv.Eventually(t, 60*time.Second, func() bool { return stats()["active"].(float64) == capacity }, "the other worker takes the tick lease and fills checkout")
		require.Greater(t, metric(t, c.URL(other), `presenced_waitingroom_tick_lease_changes_total{change="acquired"}`), otherAcquired, "%s acquired the dead worker's lease", other)
		require.Greater(t, metric(t, c.URL(other), "presenced_waitingroom_admitted_total"), otherAdmitted, "%s admitted the rest", other)
		// Stays at capacity: nobody admitted twice, nobody beyond it.
		admittedUsers := 0
		for i := 0; i < fans; i++ {
			code, out := call(t, "GET", c.URL("admit")+"/v1/waitingroom/"+event+"/status", user(fmt.Sprintf("wk-fan-%d", i)), "")
			require.Equal(t, 200, code, out)
			if out["state"] == "admitted" {
				admittedUsers++
			}
		}
		require.Equal(t, capacity, admittedUsers)
		st := stats()
		require.Equal(t, float64(capacity), st["active"], "active leases")
		require.Equal(t, float64(fans-capacity), st["queued"], "still in line")
		require.NoError(t, c.Start(ctx, ticker))
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// metric reads one series (name with its labels, as exposed) from a
// plane's /metrics; 0 when absent.
func metric(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return 0
}
