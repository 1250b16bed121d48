// Package presence is `presenced loadgen presence`: users on the presence
// WebSocket following each other, status changes with their delivery
// latency, and disconnect storms, on the presence wire protocol only.
package presence

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/presenced/presenced/loadgen"
)

// Scenario is the `presenced loadgen presence` scenario: N users, one
// connection each, each following K users of the population; a rate of
// status changes, each sent by the changing user over its own socket, whose
// send-to-receive latency the followers measure, with a check that every
// delivery arrived or was superseded by a newer state of the same user; and
// a disconnect storm that kills a share of the connections without a close
// frame and measures how long their dots stay green.
//
// Several loadgen processes can share one population (--user-offset,
// --user-total), and connections are spread over several loopback source
// addresses so one machine can hold more than one address's ephemeral
// ports.
type Scenario struct {
	users, follow     int
	shape             string
	offset, total     int
	changes           float64
	steadyFor         time.Duration
	gateways          string
	servers           string
	redisURL          string
	sources           int
	sourceBase        int
	secrets           loadgen.Secrets
	prefix            string
	stormPercent      float64
	stormWindow       time.Duration
	connectRate       float64
	inFlight          int
	pingEvery         time.Duration
	settle            time.Duration
	disconnectAtClose bool
	followAtConnect   bool
}

// Follow shapes: who user i follows.
const (
	// shapeNext: the next K users, i+1 … i+K.
	shapeNext = "next"
	// shapeSpread: (K·i + k) mod population for k in 0…K-1, so every user
	// has exactly K followers spread over the population (the fan-out
	// benchmark's shape).
	shapeSpread = "spread"
)

// New returns the presence scenario.
func New() *Scenario { return &Scenario{} }

func (l *Scenario) Name() string { return "presence" }

func (l *Scenario) Describe() string {
	return "hold N presence connections following K users each; measure status-change latency, lost deliveries and a disconnect storm"
}

func (l *Scenario) Flags(fs *pflag.FlagSet) {
	fs.IntVar(&l.users, "users", 1000, "connections (one user each) opened by this process")
	fs.IntVar(&l.follow, "follow", 20, "users each user follows, set as each connection opens (0: none)")
	fs.BoolVar(&l.followAtConnect, "follow-at-connect", false, "name the followed users in the connection's address (?subscribe=), so the session opens following them, instead of a subscriptions:set after the snapshot")
	fs.StringVar(&l.shape, "follow-shape", shapeNext, "who user i follows: next (i+1 … i+K) or spread ((K·i+k) mod population, k < K: K followers each)")
	fs.IntVar(&l.offset, "user-offset", 0, "first user index of this process (several processes share a population)")
	fs.IntVar(&l.total, "user-total", 0, "size of the whole population (default: --users)")
	fs.Float64Var(&l.changes, "changes", 100, "status changes per second made by this process, each by a random user of it over its own socket (0: none)")
	fs.DurationVar(&l.steadyFor, "steady", 0, "how long to make status changes, or with --changes 0 to hold the connections idle (default: --duration); --duration + 2m bounds the whole run, setup included")
	fs.StringVar(&l.gateways, "gateways", "", "comma separated gateway base URLs (default: --target); connections are spread over them")
	fs.StringVar(&l.servers, "servers", "", "comma separated base URLs of every presenced process whose CPU counts as server CPU, read from /metrics (default: --gateways)")
	fs.StringVar(&l.redisURL, "redis-url", os.Getenv("PRESENCED_REDIS_URL"), "the servers' Redis, for its CPU (INFO cpu); several comma separated (default $PRESENCED_REDIS_URL; empty: not measured)")
	fs.IntVar(&l.sources, "sources", 0, "loopback source addresses to spread connections over (default: one per 25,000)")
	fs.IntVar(&l.sourceBase, "source-base", 2, "last byte of the first source address, 127.0.0.<base>; give each loadgen process its own range")
	l.secrets.AddFlags(fs)
	fs.StringVar(&l.prefix, "user-prefix", "load", "user ids are <prefix>-<index>")
	fs.Float64Var(&l.stormPercent, "storm", 0, "after the steady phase, kill this percentage of connections without a close frame (0: no storm)")
	fs.DurationVar(&l.stormWindow, "storm-window", 30*time.Second, "how long after the storm the false-online rate is measured")
	fs.Float64Var(&l.connectRate, "connect-rate", 2000, "new connections per second (0: as fast as --in-flight allows)")
	fs.IntVar(&l.inFlight, "in-flight", 256, "connections being opened (and following) at once")
	fs.DurationVar(&l.pingEvery, "ping-every", 30*time.Second, "each connection sends session:ping this often")
	fs.DurationVar(&l.settle, "settle", 5*time.Second, "wait after connecting before measuring memory")
	fs.BoolVar(&l.disconnectAtClose, "disconnect", true, "end with session:disconnect on every connection (otherwise a plain close)")
}

func (l *Scenario) Run(ctx context.Context, r *loadgen.Runner) error {
	if err := l.defaults(r); err != nil {
		return err
	}
	gws := splitList(l.gateways)
	for _, g := range gws {
		if err := checkGateway(g, r.Options.AllowRemote); err != nil {
			return err
		}
	}
	servers := splitList(l.servers)
	for _, s := range servers {
		if err := checkGateway(s, r.Options.AllowRemote); err != nil {
			return err
		}
	}
	raiseFileLimit()
	run := newLoadRun(l, r)
	meter := newCPUMeter(r.Client, servers, splitList(l.redisURL))
	defer meter.close()
	r.Label("deliveries")
	r.LiveCount(run.observed.Load)
	before := gatewayMemory(ctx, r.Client, gws)

	if err := run.connect(ctx, gws, meter); err != nil {
		return err
	}
	defer run.closeAll()
	sleepCtx(ctx, l.settle)
	if ctx.Err() != nil {
		return errors.New("the run's time bound (--duration + 2m) ended while settling: raise --duration")
	}
	// Per connection over the gateways' own counts, so runs of several
	// loadgen processes sharing the gateways measure the same window.
	reportMemory(r, before, gatewayMemory(ctx, r.Client, gws), l.follow)

	r.StartClock()
	pingCtx, stopPings := context.WithCancel(ctx)
	defer stopPings()
	go run.pinger(pingCtx)
	if l.changes > 0 {
		run.steady(ctx, meter)
	} else {
		run.idle(ctx, meter)
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
	if l.shape != shapeNext && l.shape != shapeSpread {
		return errors.New("--follow-shape is next or spread")
	}
	if l.inFlight <= 0 || l.connectRate < 0 {
		return errors.New("--in-flight must be positive and --connect-rate not negative")
	}
	if l.gateways == "" {
		l.gateways = r.Options.Target
	}
	if l.servers == "" {
		l.servers = l.gateways
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

func (l *Scenario) steadyDuration(r *loadgen.Runner) time.Duration {
	if l.steadyFor > 0 {
		return l.steadyFor
	}
	return r.Options.Duration
}

// follows lists the population indices user i follows.
func (l *Scenario) follows(i int) []int {
	out := make([]int, l.follow)
	for k := range out {
		if l.shape == shapeSpread {
			out[k] = (l.follow*i + k) % l.total
		} else {
			out[k] = (i + 1 + k) % l.total
		}
	}
	return out
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// idle holds the connections open, pinging, for the steady phase and says
// what holding them cost the servers and Redis.
func (run *loadRun) idle(ctx context.Context, meter *cpuMeter) {
	cpu0 := meter.sample(ctx)
	sleepCtx(ctx, run.l.steadyDuration(run.r))
	cpu1 := meter.sample(ctx)
	secs := cpu1.at.Sub(cpu0.at).Seconds()
	run.r.AddFigure("CPU while idle", "%d connections: %s", len(run.conns), cpu1.since(cpu0))
	run.r.AddFigure("Redis per idle second", "%s", redisWork(cpu0.commands, cpu1.commands, secs, "second"))
}
