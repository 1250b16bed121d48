// Package prometheus_test checks deploy/prometheus/rules.yml against the
// binary: every metric the alerts and their promtool tests name, with the
// labels they match on, must be in a real /metrics scrape of a process
// running every role. A metric renamed in the code fails here, not at 9 p.m.
// on the night of a sale. Then promtool checks the rules and runs their
// tests (rules_test.yml).
package prometheus_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/metricscheck"
	"github.com/presenced/presenced/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const installPromtool = "bash scripts/test.sh installs it (go install github.com/prometheus/prometheus/cmd/promtool@v0.316.0)"

func here() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

func selectors(t *testing.T, file string) []metricscheck.Wanted {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(here(), file))
	require.NoError(t, err)
	out := metricscheck.Selectors(string(raw))
	require.NotEmpty(t, out, file)
	return out
}

// The rules' metrics, labels and label values are in a real scrape; the
// test file's series (made-up values) use real metric and label names, and
// every metric the rules use has a series there.
func TestAlertRulesNameRealMetrics(t *testing.T) {
	t.Parallel()
	rules := selectors(t, "rules.yml")
	tests := selectors(t, "rules_test.yml")
	s := metricscheck.Live(t, rules, tests)
	require.Empty(t, s.Missing(rules, true), "rules.yml")
	require.Empty(t, s.Missing(tests, false), "rules_test.yml")
	names := map[string]bool{}
	for _, w := range tests {
		names[w.Name] = true
	}
	for _, w := range rules {
		require.True(t, names[w.Name], "rules_test.yml has no series of %s", w.Name)
	}
}

func TestAlertRulesPassPromtool(t *testing.T) {
	t.Parallel()
	promtool := os.Getenv("PRESENCED_TEST_PROMTOOL")
	if promtool == "" {
		promtool = testenv.Tool(t, "promtool", installPromtool)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yml"}, {"test", "rules", "rules_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = here()
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s: %s", strings.Join(args, " "), out)
	}
}
