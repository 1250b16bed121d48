// Package waitingroom is `presenced loadgen waitingroom`: users joining a
// waiting room and holding its sockets until admitted, on the waiting
// room's wire protocol only.
package waitingroom

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/spf13/pflag"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/loadgen"
	"github.com/presenced/presenced/waitingroom"
	"github.com/presenced/presenced/web/wire"
)

// Scenario is `presenced loadgen waitingroom`: N users join one waiting
// room within a window, hold sockets (which keep their heartbeats), a
// fraction abandon; admitted users check out for a random time and leave,
// releasing their lease. It reports join latency, admission order
// violations, the most live leases seen against the capacity, and Redis
// memory per queued user.
type Scenario struct {
	users                    int
	window                   time.Duration
	abandon                  float64
	checkoutMin, checkoutMax time.Duration
	capacity, batch          int
	heartbeatTimeout         time.Duration
	lease                    time.Duration
	tick                     time.Duration
	event                    string
	hold                     bool
	secrets                  loadgen.Secrets
}

// New returns the waitingroom load scenario.
func New() *Scenario { return &Scenario{} }

func (s *Scenario) Name() string { return "waitingroom" }

func (s *Scenario) Describe() string {
	return "users join a waiting room, hold sockets, some abandon; checkouts release leases; order, capacity and memory checked"
}

func (s *Scenario) Flags(fs *pflag.FlagSet) {
	fs.IntVar(&s.users, "users", 1000, "users joining (each holds one socket; at most 15000)")
	fs.DurationVar(&s.window, "join-window", 10*time.Second, "the users join spread over this time")
	fs.Float64Var(&s.abandon, "abandon", 0.1, "fraction of users who close their socket within the join window and never return")
	fs.DurationVar(&s.checkoutMin, "checkout-min", 500*time.Millisecond, "shortest simulated checkout before the lease is released")
	fs.DurationVar(&s.checkoutMax, "checkout-max", 2*time.Second, "longest simulated checkout")
	fs.IntVar(&s.capacity, "capacity", 100, "waiting-room capacity (concurrent checkouts)")
	fs.IntVar(&s.batch, "batch", 20, "admissions per tick at most")
	fs.DurationVar(&s.heartbeatTimeout, "heartbeat-timeout", 15*time.Second, "silence after which an entry is abandoned (at least 10s)")
	fs.DurationVar(&s.lease, "lease", 30*time.Second, "checkout lease (10s..1h): how long a slot of someone who got in and walked away stays taken")
	fs.DurationVar(&s.tick, "tick", time.Second, "the server's waitingroom.tick_interval (order checks tolerate half a tick)")
	fs.StringVar(&s.event, "event", "", "event id (default: a fresh loadgen-<time> room, deleted at the end)")
	fs.BoolVar(&s.hold, "hold", true, "hold admissions until everyone joined, and measure the full line's memory")
	s.secrets.AddFlags(fs)
}

// loadUser is what one simulated user saw.
type loadUser struct {
	id         string
	abandons   bool
	joinStart  time.Time
	joinEnd    time.Time
	joined     bool
	admittedAt time.Time // when queue:admitted arrived; zero: never
	left       bool
	reconnects int
	lostSocket bool // could not hold a socket: stopped heartbeating
}

type loadRun struct {
	s       *Scenario
	r       *loadgen.Runner
	base    string
	ws      string
	dialer  *websocket.Dialer
	users   []*loadUser
	holders atomic.Int64
	maxHold atomic.Int64
	// client is the runner's, its connections stamped with the kernel's
	// receive times (loadgen.DialStamped), so a join can be timed from
	// its request's write to its answer reaching the socket: the join
	// without this process's own delays. onWire holds those times.
	client *http.Client
	wireMu sync.Mutex
	onWire loadgen.Histogram
}

// stampedClient is c with its connections stamped.
func stampedClient(c *http.Client) *http.Client {
	tr := c.Transport.(*http.Transport).Clone()
	tr.DialContext = loadgen.DialStamped((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	return &http.Client{Transport: tr, Timeout: c.Timeout}
}

func (s *Scenario) Run(ctx context.Context, r *loadgen.Runner) error {
	if s.users < 1 || s.users > 15000 {
		return errors.New("--users must be within 1..15000")
	}
	if s.abandon < 0 || s.abandon > 1 || s.checkoutMin <= 0 || s.checkoutMax < s.checkoutMin {
		return errors.New("--abandon must be within 0..1 and 0 < --checkout-min <= --checkout-max")
	}
	if err := s.secrets.Resolve(); err != nil {
		return err
	}
	if s.event == "" {
		s.event = fmt.Sprintf("loadgen-%d", time.Now().Unix())
	}
	base := strings.TrimRight(r.Options.Target, "/")
	run := &loadRun{s: s, r: r, base: base, ws: "ws" + strings.TrimPrefix(base, "http"),
		dialer: &websocket.Dialer{HandshakeTimeout: r.Options.Timeout}, client: stampedClient(r.Client)}
	r.Label("joins")
	settings := map[string]any{
		"capacity": s.capacity, "batch": s.batch, "leaseSeconds": int(s.lease / time.Second), "mode": waitingroom.ModeFIFO,
		"heartbeatTimeoutSeconds": int(s.heartbeatTimeout / time.Second), "paused": s.hold, "openAt": nil,
	}
	if err := run.admin(ctx, http.MethodPut, settings, nil); err != nil {
		return fmt.Errorf("create the waiting room: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := run.admin(dctx, http.MethodDelete, nil, nil); err != nil {
			fmt.Fprintf(os.Stderr, "delete the waiting room %s: %v\n", s.event, err)
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, r.Options.Duration)
	defer cancel()
	mon := run.monitor(ctx)
	run.warmPool(ctx)
	start := time.Now()
	var joins, done sync.WaitGroup
	// Each user starts at its join time, not all at once: 10,000
	// goroutines and timers made at the start were a burst of this
	// process's CPU that the first joins' answers waited behind.
	next := time.NewTimer(0)
	defer next.Stop()
	for i := 0; i < s.users && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(float64(s.window) * float64(i) / float64(s.users)))
		if d := time.Until(at); d > 0 {
			next.Reset(d)
			select {
			case <-next.C:
			case <-ctx.Done():
			}
		}
		u := &loadUser{id: fmt.Sprintf("lg-%s-%06d", s.event, i), abandons: rand.Float64() < s.abandon}
		run.users = append(run.users, u)
		joins.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			run.user(ctx, u, joins.Done)
		}()
	}
	joins.Wait()
	if s.hold && ctx.Err() == nil {
		var view waitingroom.RoomView
		if err := run.admin(ctx, http.MethodGet, nil, &view); err == nil {
			if view.Stats.MemoryBytes != nil && view.Stats.Queued > 0 {
				r.AddFigure("redis bytes per queued user", "%.0f (%d queued, MEMORY USAGE of the line)",
					float64(*view.Stats.MemoryBytes)/float64(view.Stats.Queued), view.Stats.Queued)
			}
		}
		if err := run.admin(ctx, http.MethodPut, map[string]any{"paused": false}, nil); err != nil {
			return fmt.Errorf("open the waiting room: %w", err)
		}
	}
	done.Wait()
	cancel()
	maxActive, capacity := mon()
	run.figures(time.Since(start), maxActive, capacity)
	return nil
}

// warmPool opens the connections the joins will reuse before the first
// join: a join that has to dial waited for its connection behind
// everything else this process did at that moment.
func (run *loadRun) warmPool(ctx context.Context) {
	var wg sync.WaitGroup
	for range run.r.Options.Concurrency {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, run.base+"/healthz", nil)
			if err != nil {
				return
			}
			if resp, err := run.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

func (run *loadRun) admin(ctx context.Context, method string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, run.base+"/v1/admin/waitingrooms/"+run.s.event, rd)
	if err != nil {
		return err
	}
	req.Header.Set(auth.APIKeyHeader, run.s.secrets.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := run.r.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %d %s", method, resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// monitor polls the admin statistics and returns a function that stops it
// and answers the most live leases seen and the capacity.
func (run *loadRun) monitor(ctx context.Context) func() (int, int) {
	var maxActive, capacity atomic.Int64
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			var view waitingroom.RoomView
			mctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if run.admin(mctx, http.MethodGet, nil, &view) == nil {
				capacity.Store(int64(view.Settings.Capacity))
				if int64(view.Stats.Active) > maxActive.Load() {
					maxActive.Store(int64(view.Stats.Active))
				}
			}
			cancel()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() (int, int) {
		close(stop)
		<-finished
		return int(maxActive.Load()), int(capacity.Load())
	}
}

// user joins at its time, holds its socket until admitted (or until it
// abandons), checks out for a while and leaves. Like a real client it
// retries a 503 after its Retry-After and reconnects a dropped socket
// (its place is kept).
func (run *loadRun) user(ctx context.Context, u *loadUser, joined func()) {
	s := run.s
	if ctx.Err() != nil {
		joined()
		return
	}
	// The caller starts each user at its join time, and the token is signed
	// then: signed up front, all users' tokens were one burst of CPU at the
	// start, and the first joins' answers waited behind it in this process
	// (the generator's own p99, about 100 ms, on one core).
	tok, err := s.secrets.UserToken(u.id)
	if err != nil {
		joined()
		return
	}
	u.joinStart = time.Now()
	err = run.join(ctx, tok)
	u.joinEnd = time.Now()
	u.joined = err == nil
	joined()
	if err != nil {
		return
	}
	var leaveAt <-chan time.Time
	if u.abandons {
		leaveAt = time.After(time.Duration(rand.Int64N(int64(s.window))))
	}
	for attempt := 0; ; attempt++ {
		if run.hold(ctx, u, tok, leaveAt) || ctx.Err() != nil {
			return
		}
		if attempt == 5 {
			u.lostSocket = true
			return
		}
		u.reconnects++
		select {
		case <-time.After(time.Duration(250+rand.IntN(750)) * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

// join posts the join, retrying a 503 after its Retry-After and a join
// whose connection failed (an EOF, a reset) after a short pause: a join is
// idempotent, so a user is not lost to one bad connection. Each attempt is
// recorded, the failed ones as errors.
func (run *loadRun) join(ctx context.Context, tok string) error {
	for attempt := 0; ; attempt++ {
		t0 := time.Now()
		status, retry, err := run.post(ctx, "join", tok)
		run.r.Record(time.Since(t0), err)
		connFailed := status == 0 && err != nil && ctx.Err() == nil
		if connFailed {
			retry = time.Duration(50+rand.IntN(200)) * time.Millisecond
		}
		if (status != http.StatusServiceUnavailable && !connFailed) || attempt == 4 {
			return err
		}
		select {
		case <-time.After(retry):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// arrival is a frame and when it came off the socket.
type arrival struct {
	env wire.Envelope
	at  time.Time
}

// hold keeps one socket until the user is done (admitted and checked out,
// or abandoned): it reports false when the socket failed or ended first.
func (run *loadRun) hold(ctx context.Context, u *loadUser, tok string, leaveAt <-chan time.Time) bool {
	conn, _, err := run.dialer.DialContext(ctx, run.ws+"/v1/waitingroom/"+url.PathEscape(run.s.event)+"/ws?token="+url.QueryEscape(tok), nil)
	if err != nil {
		return false
	}
	defer conn.Close()
	frames := make(chan arrival, 4)
	go func() {
		defer close(frames)
		for {
			_, msg, err := conn.ReadMessage()
			if err != nil {
				return
			}
			// Stamped as it leaves the socket, before decoding and the
			// channel hop, so the order figure sees as little client
			// scheduling as it can.
			at := time.Now()
			var env wire.Envelope
			if json.Unmarshal(msg, &env) == nil {
				frames <- arrival{env: env, at: at}
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-leaveAt:
			return true // abandons: the socket closes, nothing more is sent
		case f, ok := <-frames:
			if !ok {
				return false
			}
			if f.env.Event != waitingroom.EventAdmitted {
				continue
			}
			u.admittedAt = f.at
			if !u.abandons {
				run.checkout(ctx, u, tok)
			} // else: got in, then walked away; the lease runs out
			return true
		}
	}
}

func (run *loadRun) checkout(ctx context.Context, u *loadUser, tok string) {
	n := run.holders.Add(1)
	for {
		m := run.maxHold.Load()
		if n <= m || run.maxHold.CompareAndSwap(m, n) {
			break
		}
	}
	s := run.s
	d := s.checkoutMin + time.Duration(rand.Int64N(int64(s.checkoutMax-s.checkoutMin)+1))
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	// The checkout ends: leave releases the lease for the next tick.
	lctx, cancel := context.WithTimeout(context.Background(), run.r.Options.Timeout)
	_, _, err := run.post(lctx, "leave", tok)
	u.left = err == nil
	cancel()
	run.holders.Add(-1)
}

// post calls a user endpoint; it answers the status and, for a 503, the
// Retry-After.
func (run *loadRun) post(ctx context.Context, op, tok string) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, run.base+"/v1/waitingroom/"+url.PathEscape(run.s.event)+"/"+op, nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	var conn net.Conn
	var wrote time.Time
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:      func(i httptrace.GotConnInfo) { conn = i.Conn },
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote = time.Now() },
	}))
	resp, err := run.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The answer's last segment is the last one read from the connection:
	// it carries one request at a time.
	if at := loadgen.ArrivedAt(conn); op == "join" && at > 0 && !wrote.IsZero() {
		run.wireMu.Lock()
		run.onWire.Record(time.Duration(at - wrote.UnixNano()))
		run.wireMu.Unlock()
	}
	if resp.StatusCode/100 != 2 {
		retry := time.Second
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			retry = time.Duration(secs) * time.Second
		}
		return resp.StatusCode, retry, loadgen.StatusError(resp.StatusCode)
	}
	return resp.StatusCode, 0, nil
}

func (run *loadRun) figures(elapsed time.Duration, maxActive, capacity int) {
	r := run.r
	var stayed []*loadUser
	var admitted, abandoned, abandonedIn, waiting, lost, reconnects int
	var waits loadgen.Histogram
	for _, u := range run.users {
		if !u.joined {
			continue
		}
		reconnects += u.reconnects
		if u.lostSocket {
			lost++
			continue
		}
		if u.abandons {
			abandoned++
			if !u.admittedAt.IsZero() {
				abandonedIn++
			}
			continue
		}
		stayed = append(stayed, u)
		if u.admittedAt.IsZero() {
			waiting++
			continue
		}
		admitted++
		waits.Record(u.admittedAt.Sub(u.joinEnd))
	}
	r.AddFigure("waiting room", "%s: capacity %d, batch %d, %d users over %s", run.s.event, run.s.capacity, run.s.batch, run.s.users, run.s.window)
	r.AddFigure("admitted (kept heartbeating)", "%d of %d; %d still waiting at the end", admitted, len(stayed), waiting)
	r.AddFigure("abandoned", "%d (of whom %d were admitted before leaving)", abandoned, abandonedIn)
	r.AddFigure("order violations", "%d (an earlier joiner admitted more than a tick later)", violations(stayed, run.s.tick))
	r.AddFigure("max active leases vs capacity", "%d / %d (admin stats every 100ms; client-side holders max %d)", maxActive, capacity, run.maxHold.Load())
	if n := run.onWire.Count(); n > 0 {
		q := func(x float64) time.Duration { return run.onWire.Quantile(x).Round(10 * time.Microsecond) }
		r.AddFigure("join, written to answered (kernel stamps)", "p50 %s p95 %s p99 %s max %s over %d joins: the join without this process's own delays (the latency above includes them)",
			q(0.5), q(0.95), q(0.99), run.onWire.Max().Round(10*time.Microsecond), n)
	}
	r.AddFigure("join to admission p50/p99", "%s / %s", waits.Quantile(0.5).Round(time.Millisecond), waits.Quantile(0.99).Round(time.Millisecond))
	r.AddFigure("sockets", "%d reconnects; %d users gave up holding one (left out above)", reconnects, lost)
	r.AddFigure("admission throughput", "%.1f/s over %s", float64(admitted+abandonedIn)/elapsed.Seconds(), elapsed.Round(time.Second))
}

// violations counts users admitted ahead of someone who had finished
// joining before they started (both kept heartbeating); an admission more
// than tol before the earlier joiner's counts, never admitted counts as
// admitted at the end of time. Admissions are seen as they arrive on
// separate sockets, so two users of one batch can arrive tens of
// milliseconds apart on a busy machine: a tolerance of one tick keeps
// that jitter out while a line served out of order still shows, its
// swaps being several ticks apart. The exact order is the module's own
// test (waitingroom TestFIFOAdmissionOrder).
func violations(users []*loadUser, tol time.Duration) int {
	adm := func(u *loadUser) time.Time {
		if u.admittedAt.IsZero() {
			return time.Unix(1<<40, 0)
		}
		return u.admittedAt
	}
	byEnd := append([]*loadUser(nil), users...)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].joinEnd.Before(byEnd[j].joinEnd) })
	// latest[i]: the latest admission among the first i+1 finished joins.
	latest := make([]time.Time, len(byEnd))
	for i, u := range byEnd {
		latest[i] = adm(u)
		if i > 0 && latest[i-1].After(latest[i]) {
			latest[i] = latest[i-1]
		}
	}
	n := 0
	for _, b := range users {
		if b.admittedAt.IsZero() {
			continue
		}
		k := sort.Search(len(byEnd), func(i int) bool { return !byEnd[i].joinEnd.Before(b.joinStart) })
		if k > 0 && latest[k-1].Sub(b.admittedAt) > tol {
			n++
		}
	}
	return n
}
