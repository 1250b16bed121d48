// Package metricscheck checks the metric names that alert rules and
// dashboards use against a real /metrics scrape of presenced running every
// role, so a metric renamed in the code fails a test instead of leaving an
// alert that never fires or a panel that stays empty. For tests.
package metricscheck

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app/apptest"
	"github.com/presenced/presenced/internal/auth"
)

// needsFailure are label values that appear only while something fails
// (a join answered 503 needs Redis down): their metric and label name are
// still checked, the value is not.
var needsFailure = map[string]bool{`result="unavailable"`: true}

// Scrape is a parsed /metrics: metric name -> label name -> values seen. A
// histogram's _bucket, _count and _sum series are names too.
type Scrape map[string]map[string]map[string]bool

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? `)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	typeLine   = regexp.MustCompile(`^# TYPE (\S+) (\S+)`)
	selector   = regexp.MustCompile(`(presenced_[a-z0-9_]+)(\{([^}]*)\})?`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
)

// Parse reads the Prometheus text format.
func Parse(body string) Scrape {
	s := Scrape{}
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

// Wanted is one metric selector found in a query or a file.
type Wanted struct {
	Name     string
	Matchers [][]string // label, operator, value
}

// Selectors lists the presenced metrics text names, with their label
// matchers, ignoring recording rule names (presenced:...) and the labels
// Prometheus adds when it scrapes (job, instance, component).
func Selectors(text string) []Wanted {
	var out []Wanted
	for _, m := range selector.FindAllStringSubmatch(text, -1) {
		w := Wanted{Name: m[1]}
		for _, mm := range matcher.FindAllStringSubmatch(m[3], -1) {
			if mm[1] == "component" || mm[1] == "instance" || mm[1] == "job" {
				continue
			}
			w.Matchers = append(w.Matchers, mm[1:])
		}
		out = append(out, w)
	}
	return out
}

// Missing says what of want the scrape lacks, one line each: the metric,
// the labels matched on, and with values the exact values matched on.
func (s Scrape) Missing(want []Wanted, values bool) []string {
	var out []string
	for _, w := range want {
		fam, ok := s[w.Name]
		if !ok {
			out = append(out, w.Name+": no such metric")
			continue
		}
		for _, m := range w.Matchers {
			seen, ok := fam[m[0]]
			if !ok {
				out = append(out, fmt.Sprintf("%s: no label %q", w.Name, m[0]))
				continue
			}
			if values && m[1] == "=" && !needsFailure[m[0]+`="`+m[2]+`"`] && !seen[m[2]] {
				out = append(out, fmt.Sprintf("%s: no %s=%q yet", w.Name, m[0], m[2]))
			}
		}
	}
	sort.Strings(out)
	var uniq []string
	for i, v := range out {
		if i == 0 || v != out[i-1] {
			uniq = append(uniq, v)
		}
	}
	return uniq
}

// Live starts every role against the test Redis and PostgreSQL, sends the
// requests that make labelled series appear (a waiting-room join, a hold
// attempt, the correctness monitors' first round) and scrapes /metrics
// until nothing of exact (values checked) and loose (names and labels
// only) is missing, or a generous deadline passes; it returns the last
// scrape, for the caller to report what is missing.
func Live(t *testing.T, exact, loose []Wanted) Scrape {
	t.Helper()
	cfg := apptest.Config(t)
	cfg.Payments.MonitorInterval = 200 * time.Millisecond
	// Unchecked: this scrapes metrics; the documents have their own tests.
	srv := apptest.StartUnchecked(t, cfg)
	a, base := srv.App, srv.URL
	tok, err := auth.SignDev(a.Config.Auth.JWTSecret, "metrics-check", time.Hour, nil, "", "")
	require.NoError(t, err)
	do := func(method, path string) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(`{"seats":[1]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "metrics-check")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	do("POST", "/v1/waitingroom/metrics-check/join")
	do("POST", "/v1/events/metrics-check/holds")

	var s Scrape
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s = Parse(string(body))
		if len(s.Missing(exact, true))+len(s.Missing(loose, false)) == 0 || time.Now().After(deadline) {
			return s
		}
	}
}
