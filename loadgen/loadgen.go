// Package loadgen is the frame every module's load scenario plugs into:
// bounded runs against a target, live progress, and a closing summary of
// throughput, latency percentiles and errors by kind.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/time/rate"
)

// Scenario is one kind of load. Run drives it through the Runner, usually
// with Loop, and may add its own figures to the summary.
type Scenario interface {
	Name() string
	Describe() string
	// Flags registers the scenario's own options.
	Flags(fs *pflag.FlagSet)
	Run(ctx context.Context, r *Runner) error
}

// Options are the frame's own flags.
type Options struct {
	Target      string
	Concurrency int
	Duration    time.Duration
	Rate        float64 // operations per second over all workers; 0 = unlimited
	Requests    int64   // stop after this many operations; 0 = by duration only
	Timeout     time.Duration
	JSON        bool
	AllowRemote bool
	// MaxErrors is the share of failed operations, in percent, above which
	// the run fails (exit status 1).
	MaxErrors float64
	// CPUProfile is a file for the load generator's own CPU profile over
	// the run ("" for none): what one operation costs the generator.
	CPUProfile string
}

// AddFlags registers the frame options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Target, "target", "http://127.0.0.1:8080", "base URL of the presenced under load")
	fs.IntVarP(&o.Concurrency, "concurrency", "c", 16, "concurrent workers")
	fs.DurationVarP(&o.Duration, "duration", "d", 10*time.Second, "how long to load (the load window; setup and result checks are extra, and the run always stops by itself)")
	fs.Float64Var(&o.Rate, "rate", 0, "operations per second over all workers (0: as fast as possible)")
	fs.Int64VarP(&o.Requests, "requests", "n", 0, "stop after this many operations (0: run for --duration)")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "timeout of one operation")
	fs.BoolVar(&o.JSON, "json", false, "print the summary as JSON")
	fs.BoolVar(&o.AllowRemote, "allow-remote", false, "allow a target that is not on this machine")
	fs.Float64Var(&o.MaxErrors, "max-errors", 1, "fail (exit status 1) when more than this percent of operations failed")
	fs.StringVar(&o.CPUProfile, "cpu-profile", "", "write this load generator's own CPU profile (pprof) to this file")
}

// Validate checks the options, including that the target is loopback unless
// remote targets were allowed explicitly.
func (o *Options) Validate() error {
	if o.Concurrency <= 0 {
		return errors.New("--concurrency must be positive")
	}
	if o.Duration <= 0 || o.Duration > 24*time.Hour {
		return errors.New("--duration must be positive and at most 24h")
	}
	if o.Rate < 0 || o.Requests < 0 {
		return errors.New("--rate and --requests must not be negative")
	}
	if o.MaxErrors < 0 || o.MaxErrors > 100 {
		return errors.New("--max-errors is a percentage within 0..100")
	}
	u, err := url.Parse(o.Target)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("--target %q is not an http(s) URL", o.Target)
	}
	if o.AllowRemote {
		return nil
	}
	ips, err := net.LookupIP(u.Hostname())
	if err != nil {
		return fmt.Errorf("--target: %w", err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("--target %s is not a loopback address; pass --allow-remote to load another machine", u.Hostname())
		}
	}
	return nil
}

// Runner carries one run: options, shared HTTP client, and the recorders
// the summary is built from.
type Runner struct {
	Options  Options
	Client   *http.Client
	Progress io.Writer

	start   time.Time
	began   time.Time // Execute's start, for the wall time
	ops     atomic.Int64
	errs    atomic.Int64
	mu      sync.Mutex
	hist    Histogram
	kinds   map[string]int64
	figures []Figure
	label   string
	live    func() int64 // LiveCount's counter, if any
	hints   map[string]string
	// The load window: from the first Loop's start to the last one's end.
	// Rates count only this, not setup before it or checks after it.
	loadFrom, loadTo time.Time
}

// Figure is a scenario-specific result line of the summary.
type Figure struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// NewRunner prepares a run.
func NewRunner(o Options, progress io.Writer) *Runner {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = o.Concurrency * 2
	tr.MaxIdleConnsPerHost = o.Concurrency * 2
	return &Runner{
		Options:  o,
		Client:   &http.Client{Transport: tr, Timeout: o.Timeout},
		Progress: progress,
		kinds:    map[string]int64{},
		hints:    map[string]string{},
		label:    "ops",
	}
}

// Hint explains an error kind to the person running the load (what to
// set when the server refuses it): the summary prints it when that kind
// occurred.
func (r *Runner) Hint(kind, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hints[kind] = text
}

// Record adds one timed operation; a non-nil err is counted by its kind.
func (r *Runner) Record(d time.Duration, err error) {
	r.ops.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs.Add(1)
		r.kinds[KindOf(err)]++
		return
	}
	r.hist.Record(d)
}

// AddFigure adds a result line to the summary.
func (r *Runner) AddFigure(name, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.figures = append(r.figures, Figure{Name: name, Value: fmt.Sprintf(format, args...)})
}

// Label names what one operation is in the summary ("heartbeats", "joins").
func (r *Runner) Label(s string) { r.label = s }

// LiveCount gives the progress line a count of operations as they happen,
// for a scenario that records its operations only after the load window
// (presence tallies deliveries from their receipts). Call before the run.
func (r *Runner) LiveCount(count func() int64) { r.live = count }

// StartClock restarts the run's clock once a scenario's setup is done, so
// throughput and the progress line count only the measured part.
func (r *Runner) StartClock() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.start = time.Now()
}

// Elapsed is the time since the run started.
func (r *Runner) Elapsed() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.start)
}

// Loop runs op on Concurrency workers, paced by Rate, until Duration passes,
// Requests operations were made, or ctx ends. Each call is timed and
// recorded; op gets a context bounded by Timeout.
func (r *Runner) Loop(ctx context.Context, op func(ctx context.Context, worker int) error) {
	r.mu.Lock()
	if r.loadFrom.IsZero() {
		r.loadFrom = time.Now()
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.Options.Duration)
	defer cancel()
	defer func() {
		r.mu.Lock()
		r.loadTo = time.Now()
		took := r.loadTo.Sub(r.loadFrom)
		r.mu.Unlock()
		if r.Progress != nil {
			fmt.Fprintf(r.Progress, "load window over after %s; collecting results\n", took.Round(100*time.Millisecond))
		}
	}()
	var limiter *rate.Limiter
	if r.Options.Rate > 0 {
		limiter = rate.NewLimiter(rate.Limit(r.Options.Rate), max(1, int(r.Options.Rate/100)))
	}
	var issued atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < r.Options.Concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for ctx.Err() == nil {
				if r.Options.Requests > 0 && issued.Add(1) > r.Options.Requests {
					return // in-flight operations of other workers still count
				}
				if limiter != nil && limiter.Wait(ctx) != nil {
					// The next slot is past the window: idle to its end,
					// so the window is --duration long.
					<-ctx.Done()
					return
				}
				octx, ocancel := context.WithTimeout(ctx, r.Options.Timeout)
				t0 := time.Now()
				err := op(octx, w)
				d := time.Since(t0)
				ocancel()
				if err != nil && ctx.Err() != nil {
					return // the run ended under this operation; do not count it
				}
				r.Record(d, err)
			}
		}(w)
	}
	wg.Wait()
}

// Execute runs a scenario with live progress and returns its summary.
func Execute(ctx context.Context, s Scenario, o Options, progress io.Writer) (*Summary, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return nil, fmt.Errorf("--cpu-profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, fmt.Errorf("--cpu-profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	r := NewRunner(o, progress)
	r.start = time.Now()
	r.began = r.start
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		r.progressLoop(stop)
	}()
	// A run is bounded even if a scenario forgets to be: duration plus
	// time to set up and collect.
	ctx, cancel := context.WithTimeout(ctx, o.Duration+2*time.Minute)
	defer cancel()
	err := s.Run(ctx, r)
	close(stop)
	pwg.Wait()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Name(), err)
	}
	return r.summary(s.Name()), nil
}

// Main is a whole `presenced loadgen` run: execute, print the summary to
// out, and fail when errors passed --max-errors, so scripts and CI see a
// broken run in the exit status.
func Main(ctx context.Context, s Scenario, o Options, out, progress io.Writer) error {
	sum, err := Execute(ctx, s, o, progress)
	if err != nil {
		return err
	}
	if err := sum.Write(out, o.JSON); err != nil {
		return err
	}
	return sum.Check(o.MaxErrors)
}

func (r *Runner) progressLoop(stop <-chan struct{}) {
	if r.Progress == nil {
		return
	}
	tty := isTerminal(r.Progress)
	every := time.Second
	if !tty {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-stop:
			if tty {
				fmt.Fprintln(r.Progress)
			}
			return
		case <-t.C:
			var line string
			line, last = r.progressLine(last, every)
			if tty {
				fmt.Fprintf(r.Progress, "\r%-100s", line)
			} else {
				fmt.Fprintln(r.Progress, line)
			}
		}
	}
}

// progressLine is one progress report: operations so far (live when the
// scenario counts them as they happen), their rate since the last report
// (last, every ago), errors, and the latencies recorded so far.
func (r *Runner) progressLine(last int64, every time.Duration) (string, int64) {
	ops := r.ops.Load()
	if r.live != nil {
		ops = r.live()
	}
	r.mu.Lock()
	timed := r.hist.Count() > 0
	p50, p99 := r.hist.Quantile(0.5), r.hist.Quantile(0.99)
	r.mu.Unlock()
	line := fmt.Sprintf("[%5.0fs] %s %d (%.0f/s) errors %d",
		r.Elapsed().Seconds(), r.label, ops, float64(ops-last)/every.Seconds(), r.errs.Load())
	// Latencies recorded only after the window are in the summary alone.
	if timed {
		line += fmt.Sprintf(" p50 %s p99 %s", RoundLatency(p50), RoundLatency(p99))
	}
	return line, ops
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
