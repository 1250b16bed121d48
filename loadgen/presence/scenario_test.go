package presence

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/app/apptest"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/loadgen"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The load scenario end to end, small: connections, subscriptions (set
// after the snapshot, or named at connect), changes with their latency, a
// storm, and the false-online query.
func TestLoadScenario(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"set", "at-connect"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			loadScenario(t, mode == "at-connect")
		})
	}
}

func loadScenario(t *testing.T, atConnect bool) {
	cfg := apptest.Config(t)
	cfg.Roles = []string{"presence", "worker"}
	p := &cfg.Presence
	p.PingInterval = 5 * time.Second
	p.MissBudget = 2
	p.Grace = 600 * time.Millisecond
	p.SchedulerInterval = 50 * time.Millisecond
	p.StreamPoll = 10 * time.Millisecond
	p.CoalesceTick = 20 * time.Millisecond
	srv := apptest.Start(t, cfg)
	sc := New()
	fs := pflag.NewFlagSet("presence", pflag.ContinueOnError)
	sc.Flags(fs)
	require.NoError(t, fs.Parse([]string{
		"--users", "30", "--follow", "3", "--changes", "50", "--steady", "1s", "--settle", "100ms",
		"--storm", "20", "--storm-window", "3s",
		"--jwt-secret", srv.App.Config.Auth.JWTSecret, "--api-key", srv.App.Config.Auth.APIKey,
		"--user-prefix", "lt" + strings.ReplaceAll(t.Name(), "/", "_"),
		"--follow-at-connect=" + strconv.FormatBool(atConnect),
	}))
	o := loadgen.Options{Target: srv.URL, Concurrency: 1, Duration: 5 * time.Second, Timeout: 5 * time.Second}
	sum, err := loadgen.Execute(context.Background(), sc, o, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, sum.Write(&out, false))
	text := out.String()
	t.Log(text)
	require.Zero(t, sum.Errors)
	require.Greater(t, sum.Ops, int64(0), "deliveries measured")
	require.Contains(t, text, "30 of 30")
	require.Contains(t, text, "0 connections failed, 0 subscription requests failed")
	if atConnect {
		require.Contains(t, text, "named at connect")
	}
	require.Contains(t, text, "killed 6 of 30")
	require.Contains(t, text, "0.00 % (0 of 6 killed sessions still shown online)")
	require.Contains(t, text, "server RSS per connection")
	require.Regexp(t, `deliveries/expected\s+\d+ / \d+ .*, 0 lost`, text, "every delivery arrives or is superseded")
	require.Contains(t, text, "send to receive")
	require.Contains(t, text, "send to reply")
	if runtime.GOOS == "linux" {
		require.Contains(t, text, "send to socket", "receipts carry the kernel's receive time")
	}
	require.Contains(t, text, "loadgen collections")
	require.Contains(t, text, "CPU during the changes")
}

// The spread shape gives every user exactly K followers, none twice.
func TestSpreadShapeGivesEveryUserKFollowers(t *testing.T) {
	t.Parallel()
	l := &Scenario{follow: 20, total: 2000, shape: shapeSpread}
	followers := make([]int, l.total)
	for i := 0; i < l.total; i++ {
		seen := map[int]bool{}
		for _, j := range l.follows(i) {
			require.False(t, seen[j], "user %d follows %d twice", i, j)
			seen[j] = true
			followers[j]++
		}
		require.Len(t, seen, 20)
	}
	for j, n := range followers {
		require.Equal(t, 20, n, "followers of user %d", j)
	}
	require.Equal(t, []int{20, 21, 22}, l.follows(1)[:3], "user i follows (20i+k) mod 2000")
}

// With several servers the CPU figure names each one's share too, so a
// scale-out run shows how the work spreads over the gateways.
func TestCPUFigureNamesEachServer(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_900_000_000, 0)
	a := cpuSample{at: t0, server: 3, redis: 1, self: 1, perServer: []float64{1, 2}}
	b := cpuSample{at: t0.Add(10 * time.Second), server: 9, redis: 2, self: 3, perServer: []float64{3, 6}}
	require.Contains(t, b.since(a), "server 60.0 % (each: 20.0 %, 40.0 %), Redis 10.0 %, this loadgen 20.0 %")
	one := cpuSample{at: t0.Add(10 * time.Second), server: 5, redis: 2, self: 3, perServer: []float64{5}}
	require.Contains(t, one.since(cpuSample{at: t0, server: 1, redis: 1, self: 1, perServer: []float64{1}}), "server 40.0 %, Redis")
}

// Memory per connection is reported only when the readings can say it: a
// gateway that gave memory of earlier connections back to the system while
// this run connected gets no negative figure.
func TestMemoryFigureRefusesAFallingRSS(t *testing.T) {
	t.Parallel()
	before := memory{ok: true, rss: 40 << 20, heapAlloc: 10 << 20, stack: 1 << 20}
	grew := memory{ok: true, rss: 60 << 20, heapAlloc: 20 << 20, stack: 1 << 20, conns: 1024}
	require.Equal(t, "20.0 KiB (0 -> 1024 connections on the gateways, 20 subscriptions each; RSS 40 -> 60 MiB)", rssFigure(before, grew, 20))
	fell := memory{ok: true, rss: 30 << 20, heapAlloc: 20 << 20, stack: 1 << 20, conns: 1024}
	require.Contains(t, rssFigure(before, fell, 20), "not measurable in this run (RSS fell from 40 to 30 MiB")
}
