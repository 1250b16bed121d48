// Package prometheus_test checks deploy/prometheus/rules.yml against the
// binary: every metric the alerts and their promtool tests name, with the
// labels they match on, must be in a real /metrics scrape of a process
// running every role. A metric renamed in the code fails here, not at 9 p.m.
// on the night of a sale. Then promtool checks the rules and runs their
// tests (rules_test.yml).
package prometheus_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app"
	"github.com/presenced/presenced/config"
	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const installPromtool = "bash scripts/test.sh installs it (go install github.com/prometheus/prometheus/cmd/promtool@v0.316.0)"

// needsFailure are label values that appear only while something fails
// (a join answered 503 needs Redis down): their metric and label name are
// still checked, the value is not.
var needsFailure = map[string]bool{`result="unavailable"`: true}

func here() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// scrape is a parsed /metrics: family name -> label name -> values seen.
type scrape map[string]map[string]map[string]bool

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? `)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	typeLine   = regexp.MustCompile(`^# TYPE (\S+) (\S+)`)
)

func parseScrape(body string) scrape {
	s := scrape{}
	types := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		if m := typeLine.FindStringSubmatch(line); m != nil {
			types[m[1]] = m[2]
			s[m[1]] = map[string]map[string]bool{}
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		if _, ok := s[name]; !ok {
			// name_bucket, name_count, name_sum of a histogram or summary.
			for _, suf := range []string{"_bucket", "_count", "_sum"} {
				if base := strings.TrimSuffix(name, suf); base != name && (types[base] == "histogram" || types[base] == "summary") {
					s[name] = map[string]map[string]bool{}
				}
			}
			if _, ok := s[name]; !ok {
				continue
			}
		}
		for _, lp := range labelPair.FindAllStringSubmatch(m[3], -1) {
			if s[name][lp[1]] == nil {
				s[name][lp[1]] = map[string]bool{}
			}
			s[name][lp[1]][lp[2]] = true
		}
	}
	return s
}

var (
	selector = regexp.MustCompile(`(presenced_[a-z0-9_]+)(\{([^}]*)\})?`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
)

// wanted is one selector found in a rules or test file.
type wanted struct {
	name     string
	matchers [][]string // label, op, value
}

// selectors lists the presenced metrics a file names, ignoring recording
// rule names (presenced:...) and the labels Prometheus adds on scrape.
func selectors(t *testing.T, file string) []wanted {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(here(), file))
	require.NoError(t, err)
	var out []wanted
	for _, m := range selector.FindAllStringSubmatch(string(raw), -1) {
		w := wanted{name: m[1]}
		for _, mm := range matcher.FindAllStringSubmatch(m[3], -1) {
			if mm[1] == "component" || mm[1] == "instance" || mm[1] == "job" {
				continue
			}
			w.matchers = append(w.matchers, mm[1:])
		}
		out = append(out, w)
	}
	require.NotEmpty(t, out, file)
	return out
}

// missing says what of want the scrape lacks, one line each: the metric,
// the labels matched on, and with values the exact values matched on (the
// rules' own; the test file's series carry made-up values).
func (s scrape) missing(want []wanted, values bool) []string {
	var out []string
	for _, w := range want {
		fam, ok := s[w.name]
		if !ok {
			out = append(out, w.name+": no such metric")
			continue
		}
		for _, m := range w.matchers {
			seen, ok := fam[m[0]]
			if !ok {
				out = append(out, fmt.Sprintf("%s: no label %q", w.name, m[0]))
				continue
			}
			if values && m[1] == "=" && !needsFailure[m[0]+`="`+m[2]+`"`] && !seen[m[2]] {
				out = append(out, fmt.Sprintf("%s: no %s=%q yet", w.name, m[0], m[2]))
			}
		}
	}
	sort.Strings(out)
	return slicesCompact(out)
}

func slicesCompact(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// liveScrape starts every role against the real stores, sends the requests
// that make the labelled series appear (a join, a hold attempt, the
// correctness monitors' first round) and returns a scrape once everything
// the files name is there, or the last scrape after a generous deadline.
func liveScrape(t *testing.T, rules, tests []wanted) scrape {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.Redis.URL = testenv.RedisURL(t)
	cfg.Redis.Prefix = testenv.Prefix(t)
	cfg.Postgres.URL = testenv.PostgresURL(t)
	cfg.Payments.MonitorInterval = 200 * time.Millisecond
	a, err := app.New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("presenced did not stop")
		}
	})
	base := "http://" + ln.Addr().String()
	tok, err := auth.SignDev(a.Config.Auth.JWTSecret, "rules-test", time.Hour, nil, "", "")
	require.NoError(t, err)
	do := func(method, path string) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(`{"seats":[1]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "rules-test")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	do("POST", "/v1/waitingroom/rules-test/join")
	do("POST", "/v1/events/rules-test/holds")

	// Poll until everything is there; what is still missing at the
	// deadline is the failure message.
	var s scrape
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s = parseScrape(string(body))
		if len(s.missing(rules, true))+len(s.missing(tests, false)) == 0 || time.Now().After(deadline) {
			return s
		}
	}
}

func TestAlertRulesNameRealMetrics(t *testing.T) {
	t.Parallel()
	rules := selectors(t, "rules.yml")
	tests := selectors(t, "rules_test.yml")
	s := liveScrape(t, rules, tests)
	require.Empty(t, s.missing(rules, true), "rules.yml")
	require.Empty(t, s.missing(tests, false), "rules_test.yml")
	// Every group of alerts is exercised by a series of the test file.
	names := map[string]bool{}
	for _, w := range tests {
		names[w.name] = true
	}
	for _, w := range rules {
		require.True(t, names[w.name], "rules_test.yml has no series of %s", w.name)
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
