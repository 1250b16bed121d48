// Package presence is `presenced loadgen presence`: users on the presence
// WebSocket following each other, status changes with their delivery
// latency, and disconnect storms, on the presence wire protocol only.
package presence

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"github.com/spf13/pflag"
	"golang.org/x/time/rate"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/loadgen"
	"github.com/presenced/presenced/presence"
)

// Scenario is the `presenced loadgen presence` scenario: N users, one
// connection each, each following the next K users; a rate of status
// changes whose publish-to-receive latency the followers measure; and a
// disconnect storm that kills a share of the connections without a close
// frame and measures how long their dots stay green.
//
// Several loadgen processes can share one population (--user-offset,
// --user-total), and connections are spread over several loopback source
// addresses so one machine can hold more than one address's ephemeral
// ports.
type Scenario struct {
	users, follow     int
	offset, total     int
	changes           float64
	steadyFor         time.Duration
	gateways          string
	sources           int
	sourceBase        int
	secrets           loadgen.Secrets
	prefix            string
	stormPercent      float64
	stormWindow       time.Duration
	connectRate       float64
	pingEvery         time.Duration
	settle            time.Duration
	disconnectAtClose bool
}

// New returns the presence scenario.
func New() *Scenario { return &Scenario{} }

func (l *Scenario) Name() string { return "presence" }

func (l *Scenario) Describe() string {
	return "hold N presence connections following K users each; measure status-change latency and a disconnect storm"
}

func (l *Scenario) Flags(fs *pflag.FlagSet) {
	fs.IntVar(&l.users, "users", 1000, "connections (one user each) opened by this process")
	fs.IntVar(&l.follow, "follow", 20, "users each user follows (the next K in the population)")
	fs.IntVar(&l.offset, "user-offset", 0, "first user index of this process (several processes share a population)")
	fs.IntVar(&l.total, "user-total", 0, "size of the whole population (default: --users)")
	fs.Float64Var(&l.changes, "changes", 100, "status changes per second made by this process (0: none)")
	fs.DurationVar(&l.steadyFor, "steady", 0, "how long to make status changes (default: --duration); --duration + 2m bounds the whole run, setup included")
	fs.StringVar(&l.gateways, "gateways", "", "comma separated gateway base URLs (default: --target); connections are spread over them")
	fs.IntVar(&l.sources, "sources", 0, "loopback source addresses to spread connections over (default: one per 25,000)")
	fs.IntVar(&l.sourceBase, "source-base", 2, "last byte of the first source address, 127.0.0.<base>; give each loadgen process its own range")
	l.secrets.AddFlags(fs)
	fs.StringVar(&l.prefix, "user-prefix", "load", "user ids are <prefix>-<index>")
	fs.Float64Var(&l.stormPercent, "storm", 0, "after the steady phase, kill this percentage of connections without a close frame (0: no storm)")
	fs.DurationVar(&l.stormWindow, "storm-window", 30*time.Second, "how long after the storm the false-online rate is measured")
	fs.Float64Var(&l.connectRate, "connect-rate", 2000, "new connections per second")
	fs.DurationVar(&l.pingEvery, "ping-every", 30*time.Second, "each connection sends session:ping this often")
	fs.DurationVar(&l.settle, "settle", 5*time.Second, "wait after connecting before measuring memory")
	fs.BoolVar(&l.disconnectAtClose, "disconnect", true, "end with session:disconnect on every connection (otherwise a plain close)")
}

// loadConn is one simulated device.
type loadConn struct {
	idx    int
	user   string
	ws     *websocket.Conn
	wmu    sync.Mutex
	ready  chan struct{}
	acked  chan struct{}
	manual bool // toggles busy / away
	dead   atomic.Bool
}

type loadRun struct {
	l        *Scenario
	r        *loadgen.Runner
	conns    []*loadConn
	byUser   map[string]*loadConn
	killed   sync.Map // user -> kill time (time.Time)
	offMu    sync.Mutex
	offHist  loadgen.Histogram
	offSeen  map[string]bool
	received atomic.Int64
	sent     atomic.Int64
	dialErrs atomic.Int64
	retried  atomic.Int64
}

func (l *Scenario) Run(ctx context.Context, r *loadgen.Runner) error {
	if err := l.defaults(r); err != nil {
		return err
	}
	gws := strings.Split(l.gateways, ",")
	for _, g := range gws {
		if err := checkGateway(g, r.Options.AllowRemote); err != nil {
			return err
		}
	}
	raiseFileLimit()
	run := &loadRun{l: l, r: r, byUser: map[string]*loadConn{}, offSeen: map[string]bool{}}
	r.Label("deliveries")
	before := gatewayMemory(ctx, r.Client, gws)

	start := time.Now()
	if err := run.connect(ctx, gws); err != nil {
		return err
	}
	defer run.closeAll()
	r.AddFigure("connections held", "%d of %d (%d dial errors, %d retries after a 503) in %s over %d gateway(s) from 127.0.0.%d-%d",
		run.live(), l.users, run.dialErrs.Load(), run.retried.Load(), time.Since(start).Round(time.Millisecond), len(gws), l.sourceBase, l.sourceBase+l.sources-1)
	if l.follow > 0 {
		if err := run.subscribeAll(ctx); err != nil {
			return err
		}
	}
	sleepCtx(ctx, l.settle)
	if ctx.Err() != nil {
		return errors.New("the run's time bound (--duration + 2m) ended while settling: raise --duration")
	}
	// Per connection over the gateways' own counts, so runs of several
	// loadgen processes sharing the gateways measure the same window.
	if after := gatewayMemory(ctx, r.Client, gws); before.rss > 0 && after.conns > before.conns {
		n := float64(after.conns - before.conns)
		r.AddFigure("server RSS per connection", "%.1f KiB (%d -> %d connections on the gateways, %d subscriptions each; RSS %.0f -> %.0f MiB)",
			float64(after.rss-before.rss)/n/1024, before.conns, after.conns, l.follow, float64(before.rss)/(1<<20), float64(after.rss)/(1<<20))
		// Heap in use counts garbage not yet collected: a collection between
		// the readings can make the difference negative or larger than the
		// whole, and then it says nothing.
		heap, stack, rss := after.heap-before.heap, after.stack-before.stack, after.rss-before.rss
		if heap >= 0 && stack >= 0 && heap+stack <= rss {
			r.AddFigure("of which Go heap / stacks", "%.1f / %.1f KiB per connection (heap in use, including garbage not yet collected)",
				float64(heap)/n/1024, float64(stack)/n/1024)
		} else {
			r.AddFigure("of which Go heap / stacks", "not measurable in this run (the gateway collected garbage between the readings)")
		}
	}

	r.StartClock()
	pingCtx, stopPings := context.WithCancel(ctx)
	defer stopPings()
	go run.pinger(pingCtx)
	if l.changes > 0 {
		run.steady(ctx)
	}
	if l.stormPercent > 0 {
		if err := run.storm(ctx, gws[0]); err != nil {
			return err
		}
	}
	return nil
}

func (l *Scenario) defaults(r *loadgen.Runner) error {
	if l.users <= 0 || l.follow < 0 {
		return errors.New("--users must be positive and --follow not negative")
	}
	if l.total == 0 {
		l.total = l.offset + l.users
	}
	if l.offset+l.users > l.total || l.follow >= l.total {
		return errors.New("--user-offset + --users must fit in --user-total, and --follow be smaller")
	}
	if l.gateways == "" {
		l.gateways = r.Options.Target
	}
	if l.sources <= 0 {
		l.sources = (l.users + 24999) / 25000
	}
	if l.sourceBase < 1 || l.sourceBase+l.sources > 255 {
		return errors.New("--source-base and --sources must stay within 127.0.0.1-254")
	}
	// The API key serves the final false-online query; the secret mints
	// the users' tokens.
	return l.secrets.Resolve()
}

func (run *loadRun) userID(i int) string {
	return run.l.prefix + "-" + strconv.Itoa(i%run.l.total)
}

// connect opens every connection at the configured rate and waits for each
// snapshot.
func (run *loadRun) connect(ctx context.Context, gws []string) error {
	l := run.l
	lim := rate.NewLimiter(rate.Limit(l.connectRate), max(1, int(l.connectRate/20)))
	sem := make(chan struct{}, 256)
	run.conns = make([]*loadConn, l.users)
	var wg sync.WaitGroup
	for i := 0; i < l.users; i++ {
		if err := lim.Wait(ctx); err != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := run.dial(ctx, gws[i%len(gws)], l.offset+i, i%l.sources)
			if err != nil {
				run.dialErrs.Add(1)
				run.r.Record(0, loadgen.Errorf("dial", "%v", err))
				return
			}
			run.conns[i] = c
		}(i)
	}
	wg.Wait()
	kept := run.conns[:0]
	for _, c := range run.conns {
		if c != nil {
			kept = append(kept, c)
			run.byUser[c.user] = c
		}
	}
	run.conns = kept
	if len(kept) == 0 {
		return fmt.Errorf("no connection could be opened (%d dial errors)", run.dialErrs.Load())
	}
	return ctx.Err()
}

var loadDialerPool sync.Pool

func (run *loadRun) dial(ctx context.Context, gw string, idx, source int) (*loadConn, error) {
	user := run.userID(idx)
	// One shared room, so the contacts policy lets the population see itself.
	tok, err := auth.SignDev(run.l.secrets.JWTSecret, user, 24*time.Hour, []string{"loadgen"}, "", "")
	if err != nil {
		return nil, err
	}
	nd := &net.Dialer{Timeout: 10 * time.Second}
	if ip := loopbackSource(run.l.sourceBase + source); isLoopbackURL(gw) {
		nd.LocalAddr = &net.TCPAddr{IP: ip}
		nd.Control = bindNoPort
	}
	d := websocket.Dialer{
		NetDialContext: nd.DialContext, HandshakeTimeout: 10 * time.Second,
		ReadBufferSize: 1024, WriteBufferSize: 1024, WriteBufferPool: &loadDialerPool,
	}
	u := "ws" + strings.TrimPrefix(strings.TrimRight(gw, "/"), "http") + "/v1/presence/ws"
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var ws *websocket.Conn
	for attempt := 1; ; attempt++ {
		var resp *http.Response
		ws, resp, err = d.DialContext(dctx, u, http.Header{"Authorization": {"Bearer " + tok}})
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if err == nil {
			break
		}
		// A gateway shedding a connect storm says when to come back; a
		// real client does as told, and so does this one, a few times.
		if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || attempt == 5 {
			return nil, err
		}
		run.retried.Add(1)
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		sleepCtx(dctx, time.Duration(max(wait, 1))*time.Second)
	}
	c := &loadConn{idx: idx, user: user, ws: ws, ready: make(chan struct{}), acked: make(chan struct{}, 1)}
	go run.read(c)
	select {
	case <-c.ready:
		return c, nil
	case <-dctx.Done():
		_ = ws.Close()
		return nil, errors.New("no snapshot")
	}
}

func (c *loadConn) send(event string, payload any, id string) error {
	p, _ := json.Marshal(payload)
	b, _ := json.Marshal(struct {
		V       int             `json:"v"`
		Event   string          `json:"event"`
		Payload json.RawMessage `json:"payload,omitempty"`
		ID      string          `json:"id,omitempty"`
	}{1, event, p, id})
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

type loadFrame struct {
	Event         string `json:"event"`
	CorrelationID string `json:"correlationId"`
	Payload       struct {
		Users  []presence.Status `json:"users"`
		Resync bool              `json:"resync"`
		Code   string            `json:"code"`
	} `json:"payload"`
}

// read handles one connection's frames: snapshot, replies, and the
// updates whose latency it records.
func (run *loadRun) read(c *loadConn) {
	first := true
	for {
		_, msg, err := c.ws.ReadMessage()
		if err != nil {
			if first {
				close(c.ready)
			}
			return
		}
		var f loadFrame
		if json.Unmarshal(msg, &f) != nil {
			continue
		}
		if first {
			first = false
			close(c.ready)
			continue
		}
		now := time.Now()
		switch {
		case f.Event == presence.EventError:
			run.r.Record(0, loadgen.Errorf("error_"+f.Payload.Code, "server error"))
		case f.CorrelationID == "s":
			select {
			case c.acked <- struct{}{}:
			default:
			}
		case f.Event == presence.EventPresenceUpdated && f.CorrelationID == "" && !f.Payload.Resync:
			for _, st := range f.Payload.Users {
				run.observe(st, now)
			}
		}
	}
}

func (run *loadRun) observe(st presence.Status, now time.Time) {
	switch st.Status {
	case presence.StatusOffline:
		if v, ok := run.killed.Load(st.User); ok {
			run.offMu.Lock()
			if !run.offSeen[st.User] {
				run.offSeen[st.User] = true
				run.offHist.Record(now.Sub(v.(time.Time)))
			}
			run.offMu.Unlock()
		}
	case "busy", "away":
		if st.Since > 0 {
			run.received.Add(1)
			run.r.Record(now.Sub(time.UnixMilli(st.Since)), nil)
		}
	}
}

// subscribeAll makes each user follow the next K users of the population.
func (run *loadRun) subscribeAll(ctx context.Context) error {
	lim := rate.NewLimiter(rate.Limit(run.l.connectRate), max(1, int(run.l.connectRate/20)))
	var wg sync.WaitGroup
	var failed atomic.Int64
	for _, c := range run.conns {
		if err := lim.Wait(ctx); err != nil {
			return err
		}
		ids := make([]string, run.l.follow)
		for k := range ids {
			ids[k] = run.userID(c.idx + 1 + k)
		}
		if err := c.send(presence.EventSubscriptionsSet, presence.SubscriptionsPayload{Users: ids}, "s"); err != nil {
			failed.Add(1)
			continue
		}
		wg.Add(1)
		go func(c *loadConn) {
			defer wg.Done()
			select {
			case <-c.acked:
			case <-time.After(30 * time.Second):
				failed.Add(1)
			}
		}(c)
	}
	wg.Wait()
	run.r.AddFigure("subscriptions", "%d users x %d (%d failed)", len(run.conns), run.l.follow, failed.Load())
	return nil
}

// steady changes statuses at the configured rate for --duration.
func (run *loadRun) steady(ctx context.Context) {
	l := run.l
	d := l.steadyFor
	if d <= 0 {
		d = run.r.Options.Duration
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	lim := rate.NewLimiter(rate.Limit(l.changes), max(1, int(l.changes/100)))
	start := time.Now()
	for ctx.Err() == nil {
		if lim.Wait(ctx) != nil {
			break
		}
		c := run.conns[rand.IntN(len(run.conns))]
		if c.dead.Load() {
			continue
		}
		c.manual = !c.manual
		st := "busy"
		if !c.manual {
			st = "away"
		}
		if err := c.send(presence.EventPresenceUpdate, map[string]any{"status": st}, ""); err == nil {
			run.sent.Add(1)
		}
	}
	time.Sleep(time.Second) // let the last deliveries arrive
	el := time.Since(start)
	sent, got := run.sent.Load(), run.received.Load()
	run.r.AddFigure("status changes", "%d in %s (%.0f/s), each to %d followers", sent, el.Round(time.Second), float64(sent)/el.Seconds(), l.follow)
	run.r.AddFigure("deliveries received here", "%d (%.0f/s); followers in other loadgen processes receive the rest", got, float64(got)/el.Seconds())
}

// storm kills a share of the connections without a close frame, then
// measures how long their users stay online: as seen by their followers
// here, and by a final query of the server after the storm window.
func (run *loadRun) storm(ctx context.Context, gw string) error {
	l := run.l
	n := int(float64(len(run.conns)) * l.stormPercent / 100)
	perm := rand.Perm(len(run.conns))
	victims := make([]string, 0, n)
	at := time.Now()
	for _, i := range perm[:n] {
		c := run.conns[i]
		c.dead.Store(true)
		run.killed.Store(c.user, at)
		victims = append(victims, c.user)
		_ = c.ws.UnderlyingConn().Close()
	}
	sleepCtx(ctx, l.stormWindow)
	run.offMu.Lock()
	seen := len(run.offSeen)
	h := run.offHist
	run.offMu.Unlock()
	run.r.AddFigure("storm", "killed %d of %d connections without a close frame", n, len(run.conns))
	if seen > 0 {
		run.r.AddFigure("time to offline (seen by followers)", "p50 %s p99 %s max %s over %d users",
			h.Quantile(0.5).Round(time.Millisecond), h.Quantile(0.99).Round(time.Millisecond), h.Max().Round(time.Millisecond), seen)
	}
	stillOnline, err := run.countOnline(ctx, gw, victims)
	if err != nil {
		return err
	}
	run.r.AddFigure(fmt.Sprintf("false-online after %s", l.stormWindow), "%.2f %% (%d of %d killed sessions still shown online)",
		100*float64(stillOnline)/float64(max(n, 1)), stillOnline, n)
	return nil
}

func (run *loadRun) countOnline(ctx context.Context, gw string, users []string) (int, error) {
	online := 0
	for start := 0; start < len(users); start += 1000 {
		batch := users[start:min(start+1000, len(users))]
		body, _ := json.Marshal(map[string]any{"users": batch})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(gw, "/")+"/v1/presence/query", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(auth.APIKeyHeader, run.l.secrets.APIKey)
		resp, err := run.r.Client.Do(req)
		if err != nil {
			return 0, err
		}
		var out presence.UpdatedPayload
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("query: status %d: %v", resp.StatusCode, err)
		}
		for _, st := range out.Users {
			if st.Status != presence.StatusOffline {
				online++
			}
		}
	}
	return online, nil
}

// pinger sends session:ping on every connection, spread over pingEvery.
func (run *loadRun) pinger(ctx context.Context) {
	if len(run.conns) == 0 || run.l.pingEvery <= 0 {
		return
	}
	step := run.l.pingEvery / time.Duration(len(run.conns))
	t := time.NewTicker(max(step, time.Millisecond))
	defer t.Stop()
	per := max(1, int(time.Millisecond/max(step, 1)))
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for k := 0; k < per; k++ {
			c := run.conns[i%len(run.conns)]
			i++
			if !c.dead.Load() {
				_ = c.send(presence.EventSessionPing, nil, "")
			}
		}
	}
}

func (run *loadRun) live() int {
	n := 0
	for _, c := range run.conns {
		if !c.dead.Load() {
			n++
		}
	}
	return n
}

func (run *loadRun) closeAll() {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for _, c := range run.conns {
		if c.dead.Load() {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(c *loadConn) {
			defer wg.Done()
			defer func() { <-sem }()
			if run.l.disconnectAtClose {
				_ = c.send(presence.EventSessionDisconnect, nil, "")
			}
			c.wmu.Lock()
			_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			c.wmu.Unlock()
			_ = c.ws.Close()
		}(c)
	}
	wg.Wait()
}

// memory is what the gateways report of their memory and connections,
// summed.
type memory struct{ rss, heap, stack, conns int64 }

// gatewayMemory reads the process and Go memory metrics of the gateways.
func gatewayMemory(ctx context.Context, client *http.Client, gws []string) memory {
	var m memory
	for _, g := range gws {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(g, "/")+"/metrics", nil)
		if err != nil {
			return memory{}
		}
		resp, err := client.Do(req)
		if err != nil {
			return memory{}
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			name, v, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				continue
			}
			f, _ := strconv.ParseFloat(v, 64)
			switch name {
			case "process_resident_memory_bytes":
				m.rss += int64(f)
			case "go_memstats_heap_inuse_bytes":
				m.heap += int64(f)
			case "go_memstats_stack_inuse_bytes":
				m.stack += int64(f)
			case "presenced_presence_connections":
				m.conns += int64(f)
			}
		}
		resp.Body.Close()
	}
	return m
}

func checkGateway(g string, allowRemote bool) error {
	u, err := url.Parse(g)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("--gateways: %q is not an http(s) URL", g)
	}
	if !allowRemote && !isLoopbackURL(g) {
		return fmt.Errorf("--gateways: %s is not a loopback address; pass --allow-remote to load another machine", u.Hostname())
	}
	return nil
}

func isLoopbackURL(g string) bool {
	u, err := url.Parse(g)
	if err != nil {
		return false
	}
	ips, err := net.LookupIP(u.Hostname())
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// loopbackSource is 127.0.0.n: each source address has its own ephemeral
// ports, so one machine holds more connections to one gateway.
func loopbackSource(n int) net.IP {
	return net.IPv4(127, 0, 0, byte(n))
}

// raiseFileLimit lifts the soft open-files limit to the hard one.
func raiseFileLimit() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
