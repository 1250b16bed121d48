package grafana_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/deploy/grafana"
	"github.com/presenced/presenced/internal/metricscheck"
	"github.com/presenced/presenced/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The committed JSON is what the Go code generates: edit dashboard.go and
// run `go run ./deploy/grafana/gen`.
func TestDashboardJSONIsGenerated(t *testing.T) {
	t.Parallel()
	want, err := grafana.JSON()
	require.NoError(t, err)
	_, file, _, _ := runtime.Caller(0)
	got, err := os.ReadFile(filepath.Join(filepath.Dir(file), "presenced.json"))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "deploy/grafana/presenced.json is stale: go run ./deploy/grafana/gen")
	for _, q := range grafana.Queries() {
		require.Contains(t, string(got), strings.ReplaceAll(q, `"`, `\"`))
	}
}

// Every metric, label and label value a panel queries is in a real scrape
// of a process running every role: a renamed metric fails here instead of
// leaving an empty panel.
func TestDashboardQueriesNameRealMetrics(t *testing.T) {
	t.Parallel()
	var want []metricscheck.Wanted
	for _, q := range grafana.Queries() {
		sel := metricscheck.Selectors(q)
		require.NotEmpty(t, sel, "a presenced metric in %s", q)
		want = append(want, sel...)
	}
	s := metricscheck.Live(t, want, nil)
	require.Empty(t, s.Missing(want, true))
}
