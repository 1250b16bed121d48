package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/loadgen"
	"github.com/presenced/presenced/presence"
)

// loadConn is one simulated device: one user, one connection.
type loadConn struct {
	idx     int // in the population
	user    string
	follows []int
	ws      *websocket.Conn
	wmu     sync.Mutex
	ready   chan struct{}
	acked   chan string // the code of the subscription reply: "" on success
	named   bool        // the follows were named at connect: the snapshot has them
	manual  bool        // toggles busy / away; the steady loop's only
	dead    atomic.Bool

	// What the delivery check needs, guarded by mu: the changes this user
	// sent, and the updates this connection received while recording.
	mu      sync.Mutex
	changes []change
	obs     []observation
}

type loadRun struct {
	l        *Scenario
	r        *loadgen.Runner
	conns    []*loadConn
	byIdx    map[int]*loadConn
	killed   sync.Map // user -> kill time (time.Time)
	offMu    sync.Mutex
	offHist  loadgen.Histogram
	offSeen  map[string]bool
	recordOn atomic.Bool
	observed atomic.Int64
	// changesEnded is when the last change was sent (Unix ns).
	changesEnded int64
	dialErrs     atomic.Int64
	refused      atomic.Int64
	subFails     atomic.Int64
}

func newLoadRun(l *Scenario, r *loadgen.Runner) *loadRun {
	return &loadRun{l: l, r: r, byIdx: map[int]*loadConn{}, offSeen: map[string]bool{}}
}

func (run *loadRun) userID(i int) string {
	return run.l.prefix + "-" + strconv.Itoa(i%run.l.total)
}

// userIndex is the population index of a user id of this run's prefix.
func (run *loadRun) userIndex(user string) (int, bool) {
	rest, ok := strings.CutPrefix(user, run.l.prefix+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

// connect opens every connection, --in-flight at a time and at most
// --connect-rate per second; each is done once its snapshot arrived and,
// with --follow, its subscriptions:set was answered. The in-flight openers
// are long-lived: a goroutine per connection grew a fresh stack through
// the dial and handshake every time, a sixth of this process's CPU.
func (run *loadRun) connect(ctx context.Context, gws []string, meter *cpuMeter) error {
	l := run.l
	var lim *rate.Limiter
	if l.connectRate > 0 {
		lim = rate.NewLimiter(rate.Limit(l.connectRate), max(1, int(l.connectRate/20)))
	}
	run.conns = make([]*loadConn, l.users)
	cpu0 := meter.sample(ctx)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(l.inFlight, l.users) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= l.users || ctx.Err() != nil || (lim != nil && lim.Wait(ctx) != nil) {
					return
				}
				c, err := run.open(ctx, gws[i%len(gws)], l.offset+i, i%l.sources)
				if err != nil {
					run.dialErrs.Add(1)
					run.r.Record(0, loadgen.Errorf("dial", "%v", err))
					continue
				}
				run.conns[i] = c
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	cpu1 := meter.sample(ctx)
	kept := run.conns[:0]
	for _, c := range run.conns {
		if c != nil {
			kept = append(kept, c)
			run.byIdx[c.idx] = c
		}
	}
	run.conns = kept
	what := "connections"
	if l.follow > 0 {
		what = fmt.Sprintf("connections, each following %d (%s)", l.follow, l.shape)
		if l.followAtConnect {
			what += " named at connect"
		}
	}
	run.r.AddFigure("connect", "%d of %d %s in %s (%.0f/s), %d in flight, rate cap %s",
		len(kept), l.users, what, took.Round(time.Millisecond), float64(len(kept))/took.Seconds(), l.inFlight, rateCap(l.connectRate))
	run.r.AddFigure("connect refusals", "%d upgrades refused with 503 (then retried as told), %d connections failed, %d subscription requests failed",
		run.refused.Load(), run.dialErrs.Load(), run.subFails.Load())
	run.r.AddFigure("connect sources", "%d gateway(s), from 127.0.0.%d-%d", len(gws), l.sourceBase, l.sourceBase+l.sources-1)
	run.r.AddFigure("CPU while connecting", "%s", cpu1.since(cpu0))
	run.r.AddFigure("Redis per connect", "%s", redisWork(cpu0.commands, cpu1.commands, float64(len(kept)), "connect"))
	if len(kept) == 0 {
		return fmt.Errorf("no connection could be opened (%d dial errors)", run.dialErrs.Load())
	}
	return ctx.Err()
}

func rateCap(r float64) string {
	if r <= 0 {
		return "none"
	}
	return fmt.Sprintf("%.0f/s", r)
}

var loadDialerPool sync.Pool

// open dials one user's connection, waits for its snapshot and sets its
// subscriptions.
func (run *loadRun) open(ctx context.Context, gw string, idx, source int) (*loadConn, error) {
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
		NetDialContext: loadgen.DialStamped(nd.DialContext), HandshakeTimeout: 10 * time.Second,
		ReadBufferSize: 1024, WriteBufferSize: 1024, WriteBufferPool: &loadDialerPool,
	}
	u := "ws" + strings.TrimPrefix(strings.TrimRight(gw, "/"), "http") + "/v1/presence/ws"
	var follows []int
	var ids []string
	if run.l.follow > 0 {
		follows = run.l.follows(idx)
		ids = make([]string, len(follows))
		for k, f := range follows {
			ids[k] = run.userID(f)
		}
	}
	named := run.l.followAtConnect && len(ids) > 0
	if named {
		u += "?" + url.Values{"subscribe": ids}.Encode()
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
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
		run.refused.Add(1)
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		sleepCtx(dctx, time.Duration(max(wait, 1))*time.Second)
	}
	c := &loadConn{idx: idx, user: user, ws: ws, ready: make(chan struct{}), acked: make(chan string, 1), follows: follows, named: named}
	go run.read(c)
	select {
	case <-c.ready:
	case <-dctx.Done():
		_ = ws.Close()
		return nil, errors.New("no snapshot")
	}
	if len(c.follows) == 0 || named {
		return c, nil
	}
	if err := c.send(presence.EventSubscriptionsSet, presence.SubscriptionsPayload{Users: ids}, "s"); err != nil {
		_ = ws.Close()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	select {
	case code := <-c.acked:
		if code != "" {
			run.subFails.Add(1)
			run.r.Record(0, loadgen.Errorf("subscribe_"+code, "subscriptions:set refused"))
		}
	case <-dctx.Done():
		run.subFails.Add(1)
		run.r.Record(0, loadgen.Errorf("subscribe_timeout", "no reply to subscriptions:set"))
	}
	return c, nil
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

// read handles one connection's frames: the snapshot, replies, and the
// updates the delivery check and the storm measure.
func (run *loadRun) read(c *loadConn) {
	first := true
	var f loadFrame
	for {
		now, decoded, err := readFrame(c.ws, &f)
		if err != nil {
			if first {
				close(c.ready)
			}
			return
		}
		if !decoded {
			continue
		}
		if first {
			first = false
			if c.named && (!f.Payload.Resync || len(f.Payload.Users) != len(c.follows)) {
				// The set named at connect was refused (an error event
				// follows), or the first frame was not the snapshot.
				run.subFails.Add(1)
				run.r.Record(0, loadgen.Errorf("subscribe_at_connect", "the snapshot does not hold the users named at connect"))
			}
			close(c.ready)
			continue
		}
		switch {
		case f.CorrelationID == "s":
			code := ""
			if f.Event == presence.EventError {
				code = f.Payload.Code
				if code == "" {
					code = "error"
				}
			}
			select {
			case c.acked <- code:
			default:
			}
		case f.Event == presence.EventError:
			run.r.Record(0, loadgen.Errorf("error_"+f.Payload.Code, "server error"))
		case strings.HasPrefix(f.CorrelationID, "c") && f.Event == presence.EventPresenceUpdated && len(f.Payload.Users) == 1:
			c.replied(f.CorrelationID[1:], f.Payload.Users[0].V)
		case f.Event == presence.EventPresenceUpdated && f.CorrelationID == "":
			arrived := loadgen.ArrivedAt(c.ws.UnderlyingConn())
			for _, st := range f.Payload.Users {
				run.observe(c, st, now, arrived)
			}
		}
	}
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

// loopbackSource is 127.0.0.n: each source address has its own ephemeral
// ports, so one machine holds more connections to one gateway.
func loopbackSource(n int) net.IP {
	return net.IPv4(127, 0, 0, byte(n))
}
