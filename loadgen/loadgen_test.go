package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHTTPScenarioRunsBoundedAndSummarises(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	o := Options{Target: srv.URL, Concurrency: 4, Duration: 5 * time.Second, Requests: 200, Timeout: time.Second}
	var progress bytes.Buffer
	sum, err := Execute(context.Background(), NewHTTP(), o, &progress)
	require.NoError(t, err)
	require.Equal(t, int64(200), sum.Ops, "--requests bounds the run")
	require.Equal(t, int64(20), sum.Errors)
	require.Equal(t, int64(20), sum.ErrorKinds["http 503"])
	require.Positive(t, sum.Latency.P50)
	require.LessOrEqual(t, sum.Latency.P50, sum.Latency.P99)
	require.LessOrEqual(t, sum.Latency.P99, sum.Latency.Max)

	var table bytes.Buffer
	require.NoError(t, sum.Write(&table, false))
	require.Contains(t, table.String(), "latency p99")
	require.Contains(t, table.String(), "error http 503")
	var js bytes.Buffer
	require.NoError(t, sum.Write(&js, true))
	var decoded map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &decoded))
	require.Equal(t, "http", decoded["scenario"])
}

func TestRunStopsByDurationAndRate(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	o := Options{Target: srv.URL, Concurrency: 2, Duration: 500 * time.Millisecond, Rate: 100, Timeout: time.Second}
	start := time.Now()
	sum, err := Execute(context.Background(), NewHTTP(), o, nil)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
	require.LessOrEqual(t, sum.Ops, int64(60), "the rate limit holds (100/s for 0.5s plus a burst)")
}

func TestRemoteTargetsNeedAnExplicitFlag(t *testing.T) {
	t.Parallel()
	o := Options{Target: "http://192.0.2.1:8080", Concurrency: 1, Duration: time.Second}
	require.ErrorContains(t, o.Validate(), "--allow-remote")
	o.AllowRemote = true
	require.NoError(t, o.Validate())
	o = Options{Target: "ftp://127.0.0.1", Concurrency: 1, Duration: time.Second}
	require.Error(t, o.Validate())
	o = Options{Target: "http://localhost:1", Concurrency: 1, Duration: time.Second}
	require.NoError(t, o.Validate())
}

// A run whose errors pass --max-errors fails, so a script sees it; one
// within the threshold does not.
func TestRunsFailAboveMaxErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	o := Options{Target: srv.URL, Concurrency: 2, Duration: 5 * time.Second, Requests: 50, Timeout: time.Second, MaxErrors: 1}
	var out bytes.Buffer
	err := Main(context.Background(), NewHTTP(), o, &out, nil)
	require.ErrorContains(t, err, "50 of 50 requests failed (100.00%), more than --max-errors 1%")
	require.Contains(t, out.String(), "error http 503", "the summary is printed before the verdict")

	sum := &Summary{Scenario: "x", Label: "ops", Ops: 1000, Errors: 10}
	require.NoError(t, sum.Check(1), "1% is within --max-errors 1")
	sum.Errors = 11
	require.Error(t, sum.Check(1))
	require.NoError(t, sum.Check(5))
	require.ErrorContains(t, (&Summary{Scenario: "x", Label: "joins"}).Check(1), "no joins completed")
}

// stallScenario sets up, loads and checks afterwards, like the module
// scenarios that wait for counts to settle.
type stallScenario struct {
	HTTP
	before, after time.Duration
}

func (s *stallScenario) Run(ctx context.Context, r *Runner) error {
	time.Sleep(s.before)
	r.Hint("http 503", "the target is down; start it first")
	err := s.HTTP.Run(ctx, r)
	time.Sleep(s.after)
	return err
}

// Rates count the load window only: setup before it and checks after it
// show in the wall time, not in the throughput.
func TestRatesUseTheLoadWindow(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	s := &stallScenario{HTTP: HTTP{path: "/"}, before: 300 * time.Millisecond, after: 700 * time.Millisecond}
	o := Options{Target: srv.URL, Concurrency: 2, Duration: 400 * time.Millisecond, Rate: 200, Timeout: time.Second}
	var progress bytes.Buffer
	sum, err := Execute(context.Background(), s, o, &progress)
	require.NoError(t, err)
	require.GreaterOrEqual(t, sum.Duration, o.Duration, "the window lasts --duration")
	require.LessOrEqual(t, sum.Duration+s.before+s.after, sum.Wall, "setup and checks are outside the window")
	require.InDelta(t, float64(sum.Ops)/sum.Duration.Seconds(), sum.Throughput, 1e-9)
	require.Contains(t, progress.String(), "load window over after")
	require.Equal(t, []string{"http 503: the target is down; start it first"}, sum.Hints)
	var table bytes.Buffer
	require.NoError(t, sum.Write(&table, false))
	require.Contains(t, table.String(), "(load window; ")
	require.Contains(t, table.String(), "hint: http 503: the target is down")
}

// --cpu-profile writes the generator's own profile over the run.
func TestCPUProfileIsWritten(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "lg.pprof")
	o := Options{Target: srv.URL, Concurrency: 2, Duration: time.Second, Requests: 50, Timeout: time.Second, CPUProfile: path}
	_, err := Execute(context.Background(), NewHTTP(), o, nil)
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Greater(t, len(b), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "a pprof profile is gzipped")
}

// A scenario that records its operations after the load window (presence
// tallies deliveries from receipts) still shows them live, and no
// latency until there is one.
func TestProgressLineCountsLive(t *testing.T) {
	r := NewRunner(Options{Concurrency: 1}, nil)
	r.Label("deliveries")
	var seen atomic.Int64
	r.LiveCount(seen.Load)
	seen.Store(500)
	line, last := r.progressLine(0, 5*time.Second)
	require.Contains(t, line, "deliveries 500 (100/s) errors 0")
	require.NotContains(t, line, "p50", "a latency before any was recorded")
	require.Equal(t, int64(500), last)

	r.Record(2*time.Millisecond, nil)
	seen.Store(1000)
	line, _ = r.progressLine(last, 5*time.Second)
	require.Contains(t, line, "deliveries 1000 (100/s) errors 0 p50 2ms")
}
