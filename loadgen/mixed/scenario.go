// Package mixed is the soak's load: every module's scenario at once
// against one presenced, for as long as --duration says. Presence
// connections and viewer heartbeats run the whole time; waiting-room lines
// and sales with payments (holds, payments, webhooks, tickets) run in
// rounds, a fresh event each, one after the other.
package mixed

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/presenced/presenced/loadgen"
)

// Part is one scenario of the mix.
type Part struct {
	// New makes a fresh scenario (one per round).
	New func() loadgen.Scenario
	// Set are its flags (name → value) over its defaults; "{pg}" stands
	// for --postgres-url, "{tick}" for --tick.
	Set map[string]string
	// Rounds runs it again until the duration ends (scenarios that finish
	// by themselves); otherwise it runs once for the whole duration.
	Rounds bool
	// Concurrency of its workers.
	Concurrency int
}

// Scenario runs the parts together.
type Scenario struct {
	parts   []Part
	secrets loadgen.Secrets
	pgURL   string
	tick    time.Duration
}

// New mixes parts.
func New(parts ...Part) *Scenario { return &Scenario{parts: parts} }

func (s *Scenario) Name() string { return "mixed" }

func (s *Scenario) Describe() string {
	return "every module at once for --duration (the soak): presence and viewers throughout, waiting-room lines and paid sales in rounds"
}

func (s *Scenario) Flags(fs *pflag.FlagSet) {
	s.secrets.AddFlags(fs)
	fs.StringVar(&s.pgURL, "postgres-url", "", "database the sales are checked in (default: the development cluster under --data-dir)")
	fs.DurationVar(&s.tick, "tick", time.Second, "the server's waitingroom.tick_interval")
}

// outcome is what the parts did, by part.
type outcome struct {
	mu     sync.Mutex
	rounds map[string]int
	ops    map[string]int64
	errs   map[string]int64
	failed map[string]string
}

func (s *Scenario) Run(ctx context.Context, r *loadgen.Runner) error {
	if err := s.secrets.Resolve(); err != nil {
		return err
	}
	r.Label("rounds")
	r.StartClock()
	deadline := time.Now().Add(r.Options.Duration)
	out := &outcome{rounds: map[string]int{}, ops: map[string]int64{}, errs: map[string]int64{}, failed: map[string]string{}}
	var wg sync.WaitGroup
	for _, p := range s.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				left := time.Until(deadline)
				if left < time.Second || ctx.Err() != nil {
					return
				}
				sub := p.New()
				start := time.Now()
				sum, err := s.execute(ctx, r, p, sub, left)
				if err == nil {
					err = sum.Check(r.Options.MaxErrors)
				}
				r.Record(time.Since(start), err)
				out.note(sub.Name(), sum, err)
				if !p.Rounds {
					return
				}
			}
		}()
	}
	wg.Wait()
	out.figures(r)
	return nil
}

// execute runs one scenario of the mix with its flags for up to left.
func (s *Scenario) execute(ctx context.Context, r *loadgen.Runner, p Part, sub loadgen.Scenario, left time.Duration) (*loadgen.Summary, error) {
	fs := pflag.NewFlagSet(sub.Name(), pflag.ContinueOnError)
	sub.Flags(fs)
	set := map[string]string{"api-key": s.secrets.APIKey, "jwt-secret": s.secrets.JWTSecret, "data-dir": s.secrets.DataDir}
	for k, v := range p.Set {
		set[k] = strings.NewReplacer("{pg}", s.pgURL, "{tick}", s.tick.String()).Replace(v)
	}
	for k, v := range set {
		if fs.Lookup(k) == nil || (v == "" && k == "postgres-url") {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return nil, fmt.Errorf("%s --%s: %w", sub.Name(), k, err)
		}
	}
	o := r.Options
	o.Duration = left
	o.Concurrency = max(1, p.Concurrency)
	o.Rate, o.Requests, o.JSON, o.CPUProfile = 0, 0, false, ""
	return loadgen.Execute(ctx, sub, o, nil)
}

func (o *outcome) note(name string, sum *loadgen.Summary, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rounds[name]++
	if sum != nil {
		o.ops[name] += sum.Ops
		o.errs[name] += sum.Errors
	}
	if err != nil {
		o.failed[name] = err.Error()
	}
}

func (o *outcome) figures(r *loadgen.Runner) {
	o.mu.Lock()
	defer o.mu.Unlock()
	names := make([]string, 0, len(o.rounds))
	for n := range o.rounds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r.AddFigure(n, "%d round(s), %d operations, %d errors", o.rounds[n], o.ops[n], o.errs[n])
		if f := o.failed[n]; f != "" {
			r.AddFigure(n+" failed", "%s", f)
		}
	}
}

// Default is the mix `presenced loadgen mixed` runs: a load one machine
// sustains for half an hour beside the server.
func Default(presence, viewers, waitingroom, payments func() loadgen.Scenario) []Part {
	return []Part{
		{New: presence, Concurrency: 1, Set: map[string]string{"users": "200", "follow": "10", "changes": "20", "connect-rate": "200", "settle": "1s"}},
		{New: viewers, Concurrency: 4, Set: map[string]string{"viewers": "500", "hotels": "20", "interval": "2s", "count-rate": "10", "forwarded": "false"}},
		{New: waitingroom, Rounds: true, Concurrency: 8, Set: map[string]string{"users": "100", "join-window": "3s", "capacity": "20", "batch": "10",
			"lease": "10s", "heartbeat-timeout": "10s", "tick": "{tick}"}},
		{New: payments, Rounds: true, Concurrency: 8, Set: map[string]string{"fans": "60", "seats": "50", "postgres-url": "{pg}"}},
	}
}
