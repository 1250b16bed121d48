package faults_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app/apptest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/loadgen"
	"github.com/presenced/presenced/loadgen/mixed"
	paymentsload "github.com/presenced/presenced/loadgen/payments"
	presenceload "github.com/presenced/presenced/loadgen/presence"
	viewersload "github.com/presenced/presenced/loadgen/viewers"
	waitingroomload "github.com/presenced/presenced/loadgen/waitingroom"
)

var soakFor = flag.Duration("soak", 0, "run TestSoak for this long (30m for the release soak); 0 skips it (or set PRESENCED_TEST_SOAK)")

// sample is one reading of the server's resources.
type sample struct {
	at                                         time.Duration
	rssMiB, goroutines, fds, pgConns, redisMiB float64
}

// The soak: `presenced loadgen mixed` (presence, viewers, waiting-room
// lines, holds and payments) against one presenced process for -soak
// (PRESENCED_TEST_SOAK, at least 5m), its resident memory, goroutines and open
// files, the database's connections and Redis's memory read every few
// seconds. After a warm-up (a fifth of the run, 3 to 5 min) and before the
// wind-down each must grow by less than its bound (the slopes are
// printed), the load must have run clean, and `presenced check` must find
// nothing. Redis also grows by the state of the events the sale rounds
// create (a few KiB each, kept as long as the event): the bound allows it.
// Off unless asked: a long run belongs in a release check, not in every
// test run.
func TestSoak(t *testing.T) {
	d := *soakFor
	if env := os.Getenv("PRESENCED_TEST_SOAK"); d == 0 && env != "" {
		var err error
		d, err = time.ParseDuration(env)
		require.NoError(t, err, "PRESENCED_TEST_SOAK")
	}
	if d == 0 {
		t.Skip("the soak runs only when asked: go test ./faults -run TestSoak -soak=30m (or PRESENCED_TEST_SOAK=30m)")
	}
	require.GreaterOrEqual(t, d, 5*time.Minute, "a soak shorter than its warm-up and wind-down measures nothing")
	ctx := context.Background()
	rds := testenv.NewRedisServer(t)
	cfg := saleConfig(t)
	cfg.Redis.URL = rds.URL
	cfg.Waitingroom.TickInterval = 250 * time.Millisecond
	cfg.HTTP.ShutdownTimeout = 15 * time.Second
	// Capped streams fill up to their cap and stay there: small caps let
	// them reach it within the warm-up, so what grows after it is growth.
	// (The viewers' heartbeat streams take about one entry of ~3.4 KB a
	// second per partition under this load: 2,000 took the whole of a
	// 30-minute run to approach.)
	cfg.Outbox.StreamMaxLen = 2000
	cfg.Viewers.StreamMaxLen = 100
	base, proc := apptest.Child(t, cfg)
	pid := proc.Process.Pid
	db, err := pgxpool.New(ctx, cfg.Postgres.URL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	rdb := testenv.RedisClient(t, rds.URL)

	every := max(2*time.Second, d/150)
	var mu sync.Mutex
	var samples []sample
	start := time.Now()
	read := func() {
		s := sample{at: time.Since(start)}
		s.rssMiB = procRSSMiB(pid)
		if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			s.fds = float64(len(ents))
		}
		s.goroutines = metricValue(base, "go_goroutines")
		var n int
		if db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'presenced-%'`).Scan(&n) == nil {
			s.pgConns = float64(n)
		}
		if info, err := rdb.Info(ctx, "memory").Result(); err == nil {
			s.redisMiB = infoField(info, "used_memory") / (1 << 20)
		}
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			read()
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
		}
	}()

	// Each sale round ends with `presenced check`, the real binary (the
	// scenario's default runs its own executable: here the test binary).
	bin := testenv.Binary(t)
	presencedCheck := func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, bin, "check", "--data-dir", t.TempDir(), "--postgres-url", cfg.Postgres.URL).CombinedOutput()
		if err != nil {
			return fmt.Errorf("presenced check: %w: %s", err, out)
		}
		return nil
	}
	s := mixed.New(mixed.Default(
		func() loadgen.Scenario { return presenceload.New() },
		func() loadgen.Scenario { return viewersload.New() },
		func() loadgen.Scenario { return waitingroomload.New() },
		func() loadgen.Scenario { p := paymentsload.New(); p.Check = presencedCheck; return p },
	)...)
	fs := pflag.NewFlagSet("mixed", pflag.ContinueOnError)
	s.Flags(fs)
	var o loadgen.Options
	o.AddFlags(fs)
	require.NoError(t, fs.Parse([]string{"--target", base, "--duration", d.String(), "--api-key", cfg.Auth.APIKey,
		"--jwt-secret", cfg.Auth.JWTSecret, "--postgres-url", cfg.Postgres.URL, "--tick", cfg.Waitingroom.TickInterval.String()}))
	sum, err := loadgen.Execute(ctx, s, o, nil)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	var report strings.Builder
	require.NoError(t, sum.Write(&report, false))
	t.Logf("loadgen mixed for %s:\n%s", d, report.String())

	// From the warm-up to the wind-down: the scenarios' last rounds and
	// the presence connections closing are not the steady state.
	// The ramp (connections opening, the first rounds, streams filling)
	// took about 2.5 min in our runs.
	warm := min(max(d/5, 3*time.Minute), 5*time.Minute)
	windDown := d - min(d/10, 3*time.Minute)
	var after []sample
	for _, x := range samples {
		if x.at >= warm && x.at <= windDown {
			after = append(after, x)
		}
	}
	require.GreaterOrEqual(t, len(after), 5, "samples after the warm-up")
	type metric struct {
		name  string
		get   func(sample) float64
		bound func(mean float64) float64 // largest growth allowed over the window
	}
	metrics := []metric{
		{"RSS (MiB)", func(x sample) float64 { return x.rssMiB }, func(m float64) float64 { return 0.15*m + 16 }},
		{"goroutines", func(x sample) float64 { return x.goroutines }, func(m float64) float64 { return 0.10*m + 50 }},
		{"open files", func(x sample) float64 { return x.fds }, func(m float64) float64 { return 0.10*m + 20 }},
		{"PostgreSQL connections", func(x sample) float64 { return x.pgConns }, func(m float64) float64 { return 0.25*m + 5 }},
		{"Redis memory (MiB)", func(x sample) float64 { return x.redisMiB }, func(m float64) float64 { return 0.25*m + 8 }},
	}
	window := (after[len(after)-1].at - after[0].at).Minutes()
	var tb strings.Builder
	fmt.Fprintf(&tb, "\nSoak: presenced loadgen mixed for %s, %d samples every %s, slopes from %s to %s (TestSoak)\n\n", d, len(samples), every, warm, windDown)
	fmt.Fprintf(&tb, "| resource | after warm-up | at the end | max | slope per minute | growth over %.0f min | bound |\n| --- | --- | --- | --- | --- | --- | --- |\n", window)
	var failures []string
	for _, m := range metrics {
		xs, ys := make([]float64, len(after)), make([]float64, len(after))
		var mean, peak float64
		for i, x := range after {
			xs[i], ys[i] = x.at.Minutes(), m.get(x)
			mean += ys[i] / float64(len(after))
			peak = max(peak, ys[i])
		}
		slope := slopeOf(xs, ys)
		growth := slope * window
		bound := m.bound(mean)
		fmt.Fprintf(&tb, "| %s | %.1f | %.1f | %.1f | %+.3f | %+.1f | %.1f |\n", m.name, ys[0], ys[len(ys)-1], peak, slope, growth, bound)
		if growth > bound {
			failures = append(failures, fmt.Sprintf("%s grew %.1f over %.0f min (bound %.1f)", m.name, growth, window, bound))
		}
	}
	t.Log(tb.String())
	var series strings.Builder
	series.WriteString("seconds,rss_mib,goroutines,open_files,pg_conns,redis_mib\n")
	for _, x := range samples {
		fmt.Fprintf(&series, "%.0f,%.1f,%.0f,%.0f,%.0f,%.2f\n", x.at.Seconds(), x.rssMiB, x.goroutines, x.fds, x.pgConns, x.redisMiB)
	}
	t.Logf("samples:\n%s", series.String())
	t.Logf("Redis keys by shape at the end (count, bytes):\n%s", redisKeyShapes(ctx, rdb))
	if f := os.Getenv("PRESENCED_TEST_DRILL_TABLE"); f != "" {
		if out, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			_, _ = out.WriteString(tb.String() + "\n" + report.String())
			_ = out.Close()
		}
	}
	// presenced check, the command, on the soaked database.
	check := exec.Command(bin, "check", "--data-dir", t.TempDir(), "--postgres-url", cfg.Postgres.URL)
	out, err := check.CombinedOutput()
	t.Logf("presenced check:\n%s", out)
	require.NoError(t, err, "presenced check clean after the soak")
	require.Empty(t, failures, "resources flat after the warm-up")
	require.NoError(t, sum.Check(o.MaxErrors), "the mixed load ran clean")
	for _, f := range sum.Figures {
		require.NotContains(t, f.Name, "failed", "%s: %s", f.Name, f.Value)
	}
}

// slopeOf is the least-squares slope of ys over xs.
func slopeOf(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i] / float64(len(xs))
		my += ys[i] / float64(len(ys))
	}
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return 0
	}
	return num / den
}

func procRSSMiB(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// metricValue reads one unlabelled series from /metrics.
func metricValue(base, name string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

func infoField(info, field string) float64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// redisKeyShapes groups Redis's keys by shape (ids replaced by *) with
// their count and MEMORY USAGE, largest first: what grows, when Redis does.
func redisKeyShapes(ctx context.Context, rdb *redis.Client) string {
	type agg struct {
		n     int
		bytes int64
		ttl   int
	}
	shapes := map[string]*agg{}
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		shape := idLike.ReplaceAllString(k, "*")
		a := shapes[shape]
		if a == nil {
			a = &agg{}
			shapes[shape] = a
		}
		a.n++
		if n, err := rdb.MemoryUsage(ctx, k).Result(); err == nil {
			a.bytes += n
		}
		if d, err := rdb.PTTL(ctx, k).Result(); err == nil && d > 0 {
			a.ttl++
		}
	}
	names := make([]string, 0, len(shapes))
	for k := range shapes {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return shapes[names[i]].bytes > shapes[names[j]].bytes })
	var b strings.Builder
	for i, k := range names {
		if i == 20 {
			break
		}
		a := shapes[k]
		fmt.Fprintf(&b, "%6d keys %9d B %5d with a TTL  %s\n", a.n, a.bytes, a.ttl, k)
	}
	// Streams: their length and their groups' pending entries.
	iter = rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if typ, err := rdb.Type(ctx, k).Result(); err != nil || typ != "stream" {
			continue
		}
		n, _ := rdb.XLen(ctx, k).Result()
		fmt.Fprintf(&b, "stream %s: %d entries", k, n)
		if groups, err := rdb.XInfoGroups(ctx, k).Result(); err == nil {
			for _, g := range groups {
				fmt.Fprintf(&b, "; group %s pending %d lag %d consumers %d", g.Name, g.Pending, g.Lag, g.Consumers)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// idLike matches the ids in keys: numbers, UUIDs, run tags.
var idLike = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9]+|lg-[0-9a-z]+`)
