package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
