package mixed_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/loadgen"
	"github.com/presenced/presenced/loadgen/mixed"
)

// fake is a scenario that records one operation per run, after wait, and
// fails when told to; it remembers the flags it was given.
type fake struct {
	name  string
	wait  time.Duration
	fail  bool
	users int
	runs  *atomic.Int64
	seen  *atomic.Int64
}

func (f *fake) Name() string     { return f.name }
func (f *fake) Describe() string { return f.name }
func (f *fake) Flags(fs *pflag.FlagSet) {
	fs.IntVar(&f.users, "users", 1, "")
}
func (f *fake) Run(ctx context.Context, r *loadgen.Runner) error {
	f.runs.Add(1)
	f.seen.Store(int64(f.users))
	select {
	case <-time.After(f.wait):
	case <-ctx.Done():
	}
	if f.fail {
		r.Record(f.wait, errors.New("boom"))
		return nil
	}
	r.Record(f.wait, nil)
	return nil
}

// Continuous parts run once for the whole duration, round parts again and
// again until it ends; each gets its flags; a failing round is counted.
func TestMixRunsPartsTogetherInRounds(t *testing.T) {
	var contRuns, contSeen, roundRuns, roundSeen, badRuns, badSeen atomic.Int64
	s := mixed.New(
		mixed.Part{New: func() loadgen.Scenario {
			return &fake{name: "steady", wait: 1500 * time.Millisecond, runs: &contRuns, seen: &contSeen}
		}, Set: map[string]string{"users": "7"}},
		mixed.Part{Rounds: true, New: func() loadgen.Scenario {
			return &fake{name: "rounds", wait: 200 * time.Millisecond, runs: &roundRuns, seen: &roundSeen}
		}, Set: map[string]string{"users": "3"}},
		mixed.Part{Rounds: true, New: func() loadgen.Scenario {
			return &fake{name: "broken", wait: 500 * time.Millisecond, fail: true, runs: &badRuns, seen: &badSeen}
		}},
	)
	fs := pflag.NewFlagSet("mixed", pflag.ContinueOnError)
	s.Flags(fs)
	var o loadgen.Options
	o.AddFlags(fs)
	require.NoError(t, fs.Parse([]string{"--target", "http://127.0.0.1:9", "--duration", "2s", "--api-key", "k", "--jwt-secret", "s"}))
	sum, err := loadgen.Execute(context.Background(), s, o, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), contRuns.Load(), "a continuous part runs once")
	require.Equal(t, int64(7), contSeen.Load(), "with its flags")
	require.GreaterOrEqual(t, roundRuns.Load(), int64(4), "a round part runs again until the duration ends")
	require.Equal(t, int64(3), roundSeen.Load())
	require.Positive(t, sum.Errors, "the broken part's rounds count as errors")
	require.Error(t, sum.Check(o.MaxErrors))
	var figures []string
	for _, f := range sum.Figures {
		figures = append(figures, f.Name)
	}
	require.Contains(t, figures, "broken failed")
	require.Contains(t, figures, "rounds")
}
