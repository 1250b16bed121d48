package viewers

import (
	"bytes"
	"context"
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

// The scenario end to end, small: it reports heartbeats per server
// core-second from the server's own CPU over the load window and over its
// steady state (every viewer past its first, cookie-signing heartbeat).
func TestLoadScenarioReportsServerCPU(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config(t)
	cfg.HTTP.TrustedProxies = []string{"127.0.0.1/32"}
	srv := apptest.Start(t, cfg)
	sc := New()
	fs := pflag.NewFlagSet("viewers", pflag.ContinueOnError)
	sc.Flags(fs)
	require.NoError(t, fs.Parse([]string{
		"--viewers", "20", "--hotels", "5", "--interval", "0", "--count-rate", "20",
		"--api-key", srv.App.Config.Auth.APIKey, "--jwt-secret", srv.App.Config.Auth.JWTSecret,
	}))
	// Few viewers, so that even a loaded machine gives each its first
	// heartbeat early in the window (the steady state starts after them),
	// and paced at 5 a second each: unpaced on a fast machine they would
	// pass the server's 10 a second per session, and 429s would hide the
	// figures this test is about.
	o := loadgen.Options{Target: srv.URL, Concurrency: 4, Duration: 5 * time.Second, Timeout: 5 * time.Second, Rate: 100}
	sum, err := loadgen.Execute(context.Background(), sc, o, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, sum.Write(&out, false))
	text := out.String()
	t.Log(text)
	require.Zero(t, sum.Errors)
	require.Regexp(t, `CPU in the load window\s+server \d+\.\d %, this loadgen \d+\.\d % of one core over \d`, text)
	require.Regexp(t, `heartbeats per server core-second\s+\d+ over the load window`, text)
	require.Regexp(t, `in steady state\s+\d+ over the last \d+\.\d s, after every viewer's first heartbeat`, text)
	// Each viewer kept the one session it was given: its cookie went back
	// on every later heartbeat and was accepted.
	require.Regexp(t, `session cookies set\s+20 for 20 viewers`, text)
}

// The figure divides the heartbeats accepted between two marks by the
// server CPU between them; without the server's CPU there is no figure.
func TestPerCore(t *testing.T) {
	t0 := time.Now()
	a := cpuMark{at: t0, server: 10, self: 1, accepted: 1000}
	b := cpuMark{at: t0.Add(10 * time.Second), server: 15, self: 6, accepted: 201_000}
	v, ok := perCore(a, b)
	require.True(t, ok)
	require.InDelta(t, 40_000, v, 0.001)
	require.Equal(t, "server 50.0 %, this loadgen 50.0 % of one core over 10.0 s", cpuShares(a, b))

	_, ok = perCore(cpuMark{server: -1}, b)
	require.False(t, ok, "no CPU at the start")
	_, ok = perCore(a, cpuMark{server: 10, accepted: 5000})
	require.False(t, ok, "no CPU used")
	require.True(t, strings.HasPrefix(cpuShares(cpuMark{at: t0, server: -1}, b), "server n/a"))
}
