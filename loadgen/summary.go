package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// Summary is the result of one run.
type Summary struct {
	Scenario string `json:"scenario"`
	Label    string `json:"label"`
	// Duration is the load window that rates are computed over; Wall adds
	// the setup before it and the result checks after it.
	Duration   time.Duration    `json:"-"`
	Seconds    float64          `json:"seconds"`
	Wall       time.Duration    `json:"-"`
	WallSecs   float64          `json:"wallSeconds"`
	Ops        int64            `json:"ops"`
	Errors     int64            `json:"errors"`
	Throughput float64          `json:"throughputPerSecond"`
	Latency    LatencySummary   `json:"latency"`
	ErrorKinds map[string]int64 `json:"errorKinds"`
	Figures    []Figure         `json:"figures"`
	Hints      []string         `json:"hints,omitempty"`
}

// LatencySummary holds the percentiles of successful operations.
type LatencySummary struct {
	P50  time.Duration `json:"p50Nanos"`
	P95  time.Duration `json:"p95Nanos"`
	P99  time.Duration `json:"p99Nanos"`
	Max  time.Duration `json:"maxNanos"`
	Mean time.Duration `json:"meanNanos"`
}

func (r *Runner) summary(name string) *Summary {
	el := r.Elapsed()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.loadTo.IsZero() {
		el = r.loadTo.Sub(r.loadFrom)
	}
	wall := time.Since(r.began)
	ops := r.ops.Load()
	kinds := make(map[string]int64, len(r.kinds))
	var hints []string
	for k, v := range r.kinds {
		kinds[k] = v
		if h, ok := r.hints[k]; ok {
			hints = append(hints, k+": "+h)
		}
	}
	sort.Strings(hints)
	return &Summary{
		Scenario:   name,
		Label:      r.label,
		Duration:   el,
		Seconds:    el.Seconds(),
		Wall:       wall,
		WallSecs:   wall.Seconds(),
		Ops:        ops,
		Errors:     r.errs.Load(),
		Throughput: float64(ops) / el.Seconds(),
		Latency: LatencySummary{
			P50: r.hist.Quantile(0.50), P95: r.hist.Quantile(0.95), P99: r.hist.Quantile(0.99),
			Max: r.hist.Max(), Mean: r.hist.Mean(),
		},
		ErrorKinds: kinds,
		Figures:    append([]Figure(nil), r.figures...),
		Hints:      hints,
	}
}

// Check fails a run that completed no operation, or whose failed share is
// above maxPercent.
func (s *Summary) Check(maxPercent float64) error {
	if s.Ops == 0 {
		return fmt.Errorf("%s: no %s completed", s.Scenario, s.Label)
	}
	share := 100 * float64(s.Errors) / float64(s.Ops)
	if share > maxPercent {
		return fmt.Errorf("%s: %d of %d %s failed (%.2f%%), more than --max-errors %g%%", s.Scenario, s.Errors, s.Ops, s.Label, share, maxPercent)
	}
	return nil
}

// Write prints the summary as a table or, with asJSON, as JSON.
func (s *Summary) Write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\t%s\n", s.Scenario)
	fmt.Fprintf(tw, "duration\t%s (load window; %s in all with setup and checks)\n", s.Duration.Round(time.Millisecond), s.Wall.Round(100*time.Millisecond))
	fmt.Fprintf(tw, "%s\t%d (%.1f/s)\n", s.Label, s.Ops, s.Throughput)
	fmt.Fprintf(tw, "errors\t%d\n", s.Errors)
	fmt.Fprintf(tw, "latency p50\t%s\n", RoundLatency(s.Latency.P50))
	fmt.Fprintf(tw, "latency p95\t%s\n", RoundLatency(s.Latency.P95))
	fmt.Fprintf(tw, "latency p99\t%s\n", RoundLatency(s.Latency.P99))
	fmt.Fprintf(tw, "latency max\t%s\n", RoundLatency(s.Latency.Max))
	kinds := make([]string, 0, len(s.ErrorKinds))
	for k := range s.ErrorKinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(tw, "error %s\t%d\n", k, s.ErrorKinds[k])
	}
	for _, f := range s.Figures {
		fmt.Fprintf(tw, "%s\t%s\n", f.Name, f.Value)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, h := range s.Hints {
		fmt.Fprintf(w, "hint: %s\n", h)
	}
	return nil
}

// RoundLatency rounds a latency for printing: three significant places
// or so at every scale.
func RoundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// KindError labels an error with the kind it is counted under.
type KindError struct {
	Kind string
	Err  error
}

func (e *KindError) Error() string { return e.Kind + ": " + e.Err.Error() }
func (e *KindError) Unwrap() error { return e.Err }

// Errorf returns an error counted under kind.
func Errorf(kind, format string, args ...any) error {
	return &KindError{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// StatusError is an unexpected HTTP status, counted as "http <code>".
func StatusError(code int) error {
	return &KindError{Kind: fmt.Sprintf("http %d", code), Err: fmt.Errorf("unexpected status %d", code)}
}

// KindOf classifies an error for the summary.
func KindOf(err error) string {
	var ke *KindError
	var ne net.Error
	switch {
	case errors.As(err, &ke):
		return ke.Kind
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.EADDRNOTAVAIL):
		return "out of sockets"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	if len(msg) > 40 {
		msg = msg[:40]
	}
	return msg
}
