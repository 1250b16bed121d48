package app

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// documentedMetric is one metric a document names, with the labels it
// names ({a,b}), nil when it names none.
type documentedMetric struct {
	name   string
	labels []string
	where  string
}

var metricMention = regexp.MustCompile(`presenced_[a-z0-9_]+(\{[a-z_, ]+\})?`)

// documentedMetrics reads every metric named in README.md and docs/*.md;
// a name ending in "_" is a family prefix (presenced_viewers_) and names
// nothing.
func documentedMetrics(t *testing.T) map[string]documentedMetric {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	files = append(files, "../README.md")
	out := map[string]documentedMetric{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range metricMention.FindAllString(string(b), -1) {
			name, labels, _ := strings.Cut(m, "{")
			if strings.HasSuffix(name, "_") {
				continue
			}
			d := documentedMetric{name: name, where: filepath.Base(f)}
			if labels != "" {
				for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
					d.labels = append(d.labels, strings.TrimSpace(l))
				}
				slices.Sort(d.labels)
			}
			if prev, ok := out[name]; !ok || prev.labels == nil {
				out[name] = d
			}
		}
	}
	return out
}

// scraped are a scrape's series: metric name → the label-name sets seen.
type scraped map[string][][]string

var sampleLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)

func parseScrape(body string) scraped {
	out := scraped{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		var labels []string
		if strings.HasPrefix(rest, "{") {
			for _, m := range sampleLabel.FindAllStringSubmatch(rest[:strings.Index(rest, "}")+1], -1) {
				if m[1] != "le" && m[1] != "quantile" {
					labels = append(labels, m[1])
				}
			}
		}
		slices.Sort(labels)
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				out[base] = append(out[base], labels)
			}
		}
		out[name] = append(out[name], labels)
	}
	return out
}

func (s scraped) has(d documentedMetric) bool {
	for _, labels := range s[d.name] {
		if d.labels == nil || slices.Equal(labels, d.labels) {
			return true
		}
	}
	return false
}

// Every metric the documents name exists in a fresh process, before any
// traffic, with the labels the documents give it: in `--roles=all`, and so
// in the process of at least one role (the module's plane). An alert on a
// documented series never waits for the first event to have something to
// evaluate.
func TestEveryDocumentedMetricExistsInAFreshProcess(t *testing.T) {
	t.Parallel()
	documented := documentedMetrics(t)
	require.Contains(t, documented, "presenced_presence_dead_letters_total")
	var mu sync.Mutex
	byRole := map[string]scraped{}
	t.Run("roles", func(t *testing.T) {
		for _, name := range RoleNames() {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				cfg := testConfig(t)
				cfg.Roles = []string{name}
				a, err := New(cfg, testenv.Logger())
				require.NoError(t, err)
				require.NoError(t, a.Start(t.Context()))
				base := serve(t, a)
				code, _ := get(t, base+"/healthz") // one request, so the HTTP histogram has a series
				require.Equal(t, http.StatusOK, code)
				code, body := get(t, base+"/metrics")
				require.Equal(t, http.StatusOK, code)
				mu.Lock()
				byRole[name] = parseScrape(body)
				mu.Unlock()
			})
		}
	})
	for _, d := range documented {
		require.Truef(t, byRole["all"].has(d), "%s (named in %s with labels %v) is not in a fresh --roles=all scrape", d.name, d.where, d.labels)
		var in []string
		for role, s := range byRole {
			if role != "all" && s.has(d) {
				in = append(in, role)
			}
		}
		require.NotEmptyf(t, in, "%s is in no fresh single-role process", d.name)
	}
	all := byRole["all"]
	require.Contains(t, all, "presenced_build_info")
	require.Equal(t, [][]string{{"commit", "go", "version"}}, all["presenced_build_info"])
}

// /metrics speaks OpenMetrics to a scraper that asks, and answers HEAD;
// so do the other public GETs.
func TestMetricsNegotiationAndHead(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"all"}
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(t.Context()))
	base := serve(t, a)

	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0; charset=utf-8")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, resp.Header.Get("Content-Type"), "application/openmetrics-text")
	require.True(t, strings.HasSuffix(string(body), "# EOF\n"), "an OpenMetrics exposition ends with # EOF")

	code, body2 := get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body2, "# EOF", "plain scrapers keep the text format")

	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json", "/v1/waitingroom/keys",
		"/v1/events/no-such-event/seats", "/v1/viewers/no-such-hotel/count", "/v1/hotels?city=Lisbon"} {
		getResp, err := http.Get(base + path)
		require.NoError(t, err)
		getResp.Body.Close()
		headResp, err := http.Head(base + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(headResp.Body)
		headResp.Body.Close()
		require.Equal(t, getResp.StatusCode, headResp.StatusCode, "HEAD %s answers as GET does", path)
		require.Empty(t, b, path)
	}
}

// With http.admin_listen, /metrics and pprof move to the admin listener
// and leave the public port.
func TestAdminListenerServesMetricsAndPprof(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Roles = []string{"ingest"}
	cfg.HTTP.AdminListen = "127.0.0.1:0"
	cfg.HTTP.Pprof = true
	a, err := New(cfg, testenv.Logger())
	require.NoError(t, err)
	require.NoError(t, a.Start(t.Context()))
	base := serve(t, a)
	require.NotEmpty(t, a.AdminAddr)
	admin := "http://" + a.AdminAddr

	code, body := get(t, admin+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "presenced_build_info")
	code, _ = get(t, admin+"/debug/pprof/cmdline")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, base+"/metrics")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = get(t, base+"/debug/pprof/cmdline")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
}
