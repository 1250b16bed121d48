package waitingroom

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app/apptest"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/loadgen"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestOrderViolations(t *testing.T) {
	t.Parallel()
	base := time.Unix(1000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	user := func(start, end, admitted int) *loadUser {
		u := &loadUser{joinStart: at(start), joinEnd: at(end)}
		if admitted >= 0 {
			u.admittedAt = at(admitted)
		}
		return u
	}
	tol := 500 * time.Millisecond
	require.Zero(t, violations([]*loadUser{user(0, 5, 1000), user(10, 15, 2000), user(20, 25, 2000)}, tol))
	// Overlapping joins may be admitted in either order.
	require.Zero(t, violations([]*loadUser{user(0, 50, 2000), user(10, 60, 1000)}, tol))
	// Joined after the first finished, admitted a tick earlier.
	require.Equal(t, 1, violations([]*loadUser{user(0, 5, 2000), user(10, 15, 1000)}, tol))
	// Within half a tick: the same tick seen by two sockets.
	require.Zero(t, violations([]*loadUser{user(0, 5, 1200), user(10, 15, 1000)}, tol))
	// Admitted while an earlier joiner never was.
	require.Equal(t, 1, violations([]*loadUser{user(0, 5, -1), user(10, 15, 1000)}, tol))
}

// The scenario runs end to end against an admit plane and a worker.
func TestLoadScenario(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config(t)
	cfg.Roles = []string{"admit", "worker"}
	cfg.Waitingroom.TickInterval = 50 * time.Millisecond
	cfg.Waitingroom.TickLeaseTTL = 500 * time.Millisecond
	cfg.Waitingroom.PositionInterval = 100 * time.Millisecond
	// The order check is about timing: no document checks on this server.
	srv := apptest.StartUnchecked(t, cfg)
	sc := New()
	// Nobody abandons here: an abandoned entry still fresh at the head is
	// admitted and holds its slot for the whole lease, as it should.
	sc.users, sc.window, sc.abandon, sc.lease = 60, time.Second, 0, 10*time.Second
	sc.checkoutMin, sc.checkoutMax = 20*time.Millisecond, 100*time.Millisecond
	// The order check tolerates five ticks (250 ms) of the generator's own
	// lag in reading admissions from 60 sockets: at load 20 one tick was
	// exceeded. A line served out of order shows still, its swaps being a
	// second apart here (20 ticks of 3); the exact order is the module's
	// TestFIFOAdmissionOrder.
	sc.capacity, sc.batch, sc.heartbeatTimeout, sc.tick = 5, 3, 10*time.Second, 5*cfg.Waitingroom.TickInterval
	sc.hold = true
	sc.secrets.APIKey, sc.secrets.JWTSecret = srv.App.Config.Auth.APIKey, srv.App.Config.Auth.JWTSecret
	sum, err := loadgen.Execute(context.Background(), sc, loadgen.Options{
		Target: srv.URL, Concurrency: 4, Duration: 30 * time.Second, Timeout: 5 * time.Second,
	}, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, 60, sum.Ops)
	require.Zero(t, sum.Errors)
	figures := map[string]string{}
	for _, f := range sum.Figures {
		figures[f.Name] = f.Value
	}
	require.True(t, strings.HasPrefix(figures["order violations"], "0 "), figures["order violations"])
	require.Contains(t, figures["admitted (kept heartbeating)"], "; 0 still waiting")
	require.Regexp(t, `^[0-5] / 5 `, figures["max active leases vs capacity"])
	require.Contains(t, figures, "redis bytes per queued user")
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/admin/waitingrooms/"+sc.event, nil)
	require.NoError(t, err)
	req.Header.Set(auth.APIKeyHeader, srv.App.Config.Auth.APIKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "the scenario deletes its room")
}

// A join whose connection fails is retried (a join is idempotent): the
// user is not lost to one EOF, and the failed attempt counts as an error.
func TestJoinRetriesAConnectionError(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close() // the client reads EOF
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	r := loadgen.NewRunner(loadgen.Options{Target: srv.URL, Concurrency: 1, Duration: time.Second, Timeout: 5 * time.Second}, nil)
	run := &loadRun{s: &Scenario{event: "e"}, r: r, base: srv.URL, client: stampedClient(r.Client)}
	require.NoError(t, run.join(context.Background(), "token"))
	require.EqualValues(t, 2, calls.Load())
}

// A join is also timed from its request's write to its answer reaching
// the socket, which leaves out this process's own delays: never longer
// than the join as this process saw it.
func TestJoinIsTimedByTheKernelsStamps(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("receive stamps are read on Linux only")
	}
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	r := loadgen.NewRunner(loadgen.Options{Target: srv.URL, Concurrency: 1, Duration: time.Second, Timeout: 5 * time.Second}, nil)
	run := &loadRun{s: &Scenario{event: "e"}, r: r, base: srv.URL, client: stampedClient(r.Client)}
	// The kernel turns stamping on a moment after a socket first asks.
	var longest time.Duration
	for deadline := time.Now().Add(5 * time.Second); run.onWire.Count() == 0 && time.Now().Before(deadline); {
		t0 := time.Now()
		_, _, err := run.post(context.Background(), "join", "token")
		require.NoError(t, err)
		longest = max(longest, time.Since(t0))
	}
	require.EqualValues(t, 1, run.onWire.Count())
	require.GreaterOrEqual(t, run.onWire.Max(), 2*time.Millisecond, "the server's own time is in it")
	require.LessOrEqual(t, run.onWire.Max(), longest)
}
